//! Optional time limits on the data path's waits.
//!
//! Most waits end at their first poll (a write that fits the socket's buffer, bytes
//! already read), so a wait's timer is only armed once it has to wait: a timer armed is
//! a place in the runtime's wheel to take and give back, for every wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pin_project_lite::pin_project! {
    /// `f` within a time limit, if any: `Err` when it expires first.
    pub(crate) struct Within<F> {
        #[pin]
        f: F,
        deadline: Option<Instant>,
        // Armed at the first poll that finds `f` waiting.
        #[pin]
        timer: Option<Sleep>,
    }
}

/// Runs `f` until it has been idle for `limit`: when the time is up but `progress` moved
/// since it was armed, the time starts again (an inactivity timeout, as HAProxy's
/// `timeout client`: a slow but steady peer is served).
pub(crate) async fn idle_within<F: Future>(
    limit: Option<Duration>,
    progress: impl Fn() -> u64,
    f: F,
) -> Result<F::Output, ()> {
    let Some(limit) = limit else {
        return Ok(f.await);
    };
    let mut f = std::pin::pin!(f);
    let mut seen = progress();
    loop {
        match within(Some(limit), f.as_mut()).await {
            Ok(v) => return Ok(v),
            Err(()) if progress() != seen => seen = progress(),
            Err(()) => return Err(()),
        }
    }
}

/// Runs `f` within `limit`, counted from now (`Err` when it expires).
pub(crate) fn within<F: Future>(limit: Option<Duration>, f: F) -> Within<F> {
    Within {
        f,
        deadline: limit.map(crate::clock::deadline),
        timer: None,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(v) = this.f.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep_until(deadline)));
        }
        if let Some(timer) = this.timer.as_pin_mut() {
            ready!(timer.poll(cx));
        }
        Poll::Ready(Err(()))
    }
}
