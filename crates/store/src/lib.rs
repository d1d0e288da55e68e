//! tickwheel-store (in progress)
