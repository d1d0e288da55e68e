//! Test support for tickwheel: reference models and the runners that compare our data
//! structures with them. Used by the property tests, the fuzz targets and the checked-in
//! fuzz seeds, so that each check is written once.

pub mod pg;
mod proto_check;
mod queue_model;
mod wheel_model;

pub use proto_check::check_decoder;
pub use queue_model::{
    decode_queue_ops, queue_config_for_input, run_queue_ops, run_queue_ops_config,
    run_queue_ops_with, QueueOp,
};
pub use wheel_model::{decode_wheel_ops, run_wheel_ops, WheelOp};
