//! What the store's loom tests share (a directory, so Cargo does not build it as a test of
//! its own and `ci/loom.sh`'s `tests/loom*.rs` does not pick it up).

/// Runs `f` under loom's model checker with a preemption bound of 2 (unless
/// `LOOM_MAX_PREEMPTIONS` sets one), or once as a plain test without `--cfg loom`.
pub(crate) fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    #[cfg(loom)]
    {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.check(f);
    }
    #[cfg(not(loom))]
    f();
}
