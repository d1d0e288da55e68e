//! tickwheel-queue (in progress)
