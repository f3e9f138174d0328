//! A limit of things held at once that an operator may change while they are held: the
//! `maxconn` of a server (its queue), of a frontend and of the process (`set maxconn
//! server|frontend|global`).
//!
//! It is a fair semaphore: waiters are served in arrival order, whichever worker they are
//! on. A raise adds permits at once (waiters get in); a cut takes the free permits away
//! now and the rest as holders give theirs back (a held permit is never revoked). 0 is no
//! limit, as in HAProxy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};

#[derive(Debug)]
pub struct Limit {
    permits: Arc<Semaphore>,
    /// The limit now (0: none).
    now: AtomicUsize,
    /// Permits to take out of circulation as holders give theirs back, after a cut below
    /// what was held (shared with each permit, which pays it when dropped).
    debt: Arc<AtomicUsize>,
}

/// One thing held under a [`Limit`]; given back when dropped, unless the limit was cut
/// meanwhile: then it pays one of the permits owed.
#[derive(Debug)]
pub struct Permit(Option<(OwnedSemaphorePermit, Arc<AtomicUsize>)>);

impl Drop for Permit {
    fn drop(&mut self) {
        let Some((permit, debt)) = self.0.take() else {
            return;
        };
        let owed = debt.fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1));
        if owed.is_ok() {
            permit.forget();
        }
    }
}

/// The permits a limit of `n` stands for.
fn permits(n: usize) -> usize {
    if n == 0 {
        Semaphore::MAX_PERMITS
    } else {
        n
    }
}

impl Limit {
    pub fn new(n: usize) -> Limit {
        Limit {
            permits: Arc::new(Semaphore::new(permits(n))),
            now: AtomicUsize::new(n),
            debt: Arc::default(),
        }
    }

    /// The limit now (0: none).
    pub fn get(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }

    fn permit(&self, p: OwnedSemaphorePermit) -> Permit {
        Permit(Some((p, self.debt.clone())))
    }

    /// Whether a permit is free now.
    pub fn has_room(&self) -> bool {
        self.permits.available_permits() > 0
    }

    /// A permit if one is free now.
    pub fn try_take(&self) -> Result<Permit, TryAcquireError> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map(|p| self.permit(p))
    }

    /// A permit, in arrival order.
    pub async fn take(&self) -> Result<Permit, AcquireError> {
        let p = self.permits.clone().acquire_owned().await?;
        Ok(self.permit(p))
    }

    /// Sets the limit to `n` (0: none) from now on.
    pub fn set(&self, n: usize) {
        let old = permits(self.now.swap(n, Ordering::AcqRel));
        let new = permits(n);
        if new > old {
            // Owed permits are forgiven first, then the semaphore grows.
            let mut grow = new - old;
            let _ = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    let forgiven = d.min(new - old);
                    grow = new - old - forgiven;
                    Some(d - forgiven)
                });
            self.permits.add_permits(grow);
        } else {
            let cut = old - new;
            let taken = self.permits.forget_permits(cut);
            self.debt.fetch_add(cut - taken, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_grows_at_once_and_shrinks_as_permits_come_back() {
        let l = Limit::new(2);
        let a = l.try_take().unwrap();
        let b = l.try_take().unwrap();
        assert!(l.try_take().is_err());
        l.set(3);
        let c = l.try_take().unwrap();
        assert!(l.try_take().is_err());
        // Cut to 1 with three held: two are owed, paid as they come back.
        l.set(1);
        drop(a);
        drop(b);
        assert!(l.try_take().is_err());
        drop(c);
        let d = l.try_take().unwrap();
        assert!(l.try_take().is_err());
        drop(d);
        // No limit, then one again.
        l.set(0);
        let many: Vec<_> = (0..100).map(|_| l.try_take().unwrap()).collect();
        assert_eq!(l.get(), 0);
        l.set(1);
        drop(many);
        let e = l.try_take().unwrap();
        assert!(l.try_take().is_err());
        drop(e);
    }
}
