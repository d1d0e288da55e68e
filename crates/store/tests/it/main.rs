//! Integration tests of tickwheel-store, linked as one binary (see STYLE.md section 6).
#![expect(clippy::unwrap_used, reason = "tests")]
#![allow(unreachable_pub, reason = "test helper modules")]

mod util;

mod corrupt;
mod crash;
mod faults;
mod format;
mod group;
mod model;
mod recovery;
