//! Optional time limits on the data path's waits.

use std::future::Future;
use std::time::Duration;

/// Runs `f` within `limit` (`Err` when it expires).
pub(crate) async fn within<F: Future>(limit: Option<Duration>, f: F) -> Result<F::Output, ()> {
    match limit {
        Some(d) => tokio::time::timeout_at(crate::clock::deadline(d), f)
            .await
            .map_err(|_| ()),
        None => Ok(f.await),
    }
}
