//! tickwheel (placeholder)
