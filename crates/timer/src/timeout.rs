//! [`Timeout`]: run a future with a time limit.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Elapsed;
use crate::sleep::Sleep;

pin_project_lite::pin_project! {
    /// A future with a time limit, from [`Timer::timeout`](crate::Timer::timeout) or
    /// [`timeout`](crate::timeout()): `Ok(output)` if the inner future completes first,
    /// `Err(Elapsed)` once the deadline has passed.
    ///
    /// The inner future is polled first, so a future that is ready at once never touches
    /// the timer; the timer is registered only if the first poll returns `Pending`.
    ///
    /// # Cancellation safety
    ///
    /// Dropping a `Timeout` drops the inner future (so it is as cancellation safe as that
    /// future) and cancels the timer in O(1).
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, sleep: Sleep) -> Self {
        Timeout { future, sleep }
    }

    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// Gives the inner future back, dropping the timer.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let sleep = this.sleep;
        match Pin::new(&mut *sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed {
                deadline: sleep.deadline(),
            })),
            Poll::Pending => Poll::Pending,
        }
    }
}
