//! An in-memory byte stream between an HTTP/2 stream and the HTTP/1.1 code that deals with
//! it: a client's stream and the session that serves it, or a transaction and the bridge
//! that turns its server connection into a stream on an HTTP/2 server connection. The
//! HTTP/1.1 side (the session end) sees an ordinary [`crate::transport::Conn`] whose bytes
//! come from and go to the stream's side, which sees a [`Front`] handle.
//!
//! Invariants:
//! - Each direction holds at most `LIMIT` bytes: a writer waits for the reader, so a slow
//!   client slows its stream's session and server, as a socket's buffers would.
//! - Once either side drops or aborts, the other side's reads end (after what was already
//!   written) and its writes fail: neither can wait forever on a side that is gone.
//! - Both ends live on the worker that made them; the mutex only satisfies `Send` bounds
//!   and is never contended.

use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

/// The most one direction holds before its writer waits.
const LIMIT: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Direction {
    bytes: Vec<u8>,
    /// Where unread bytes start in `bytes`.
    read: usize,
    /// The writer will write no more.
    done: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

impl Direction {
    fn unread(&self) -> &[u8] {
        &self.bytes[self.read..]
    }

    fn take(&mut self, into: &mut [u8]) -> usize {
        let n = into.len().min(self.bytes.len() - self.read);
        into[..n].copy_from_slice(&self.bytes[self.read..self.read + n]);
        self.consume(n);
        n
    }

    fn consume(&mut self, n: usize) {
        self.read += n;
        if self.read == self.bytes.len() {
            self.bytes.clear();
            self.read = 0;
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    fn put(&mut self, b: &[u8]) -> usize {
        let n = b
            .len()
            .min(LIMIT.saturating_sub(self.bytes.len() - self.read));
        if self.read > 0 && self.bytes.len() + n > self.bytes.capacity() {
            self.bytes.drain(..self.read);
            self.read = 0;
        }
        self.bytes.extend_from_slice(&b[..n]);
        if n > 0 {
            if let Some(w) = self.reader.take() {
                w.wake();
            }
        }
        n
    }

    fn finish(&mut self) {
        self.done = true;
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Front to session: the request.
    up: Direction,
    /// Session to front: the response.
    down: Direction,
    /// The front went away before the stream ended (the client reset it).
    aborted: bool,
}

/// The session's end: used by `Conn`, which gives it the calls of a socket.
#[derive(Debug)]
pub struct SessionEnd {
    state: Arc<Mutex<State>>,
}

/// The front's end.
#[derive(Debug)]
pub struct Front {
    state: Arc<Mutex<State>>,
}

/// A new pipe for one stream.
pub fn pair() -> (Front, SessionEnd) {
    let state = Arc::new(Mutex::new(State::default()));
    (
        Front {
            state: state.clone(),
        },
        SessionEnd { state },
    )
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes all of `bytes` into the direction `dir` picks, waiting while it is full. A
/// direction ended (by its writer, or by either side going away) takes nothing more.
async fn write_all(
    state: &Mutex<State>,
    dir: fn(&mut State) -> &mut Direction,
    mut bytes: &[u8],
) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = std::future::poll_fn(|cx| {
            let mut st = lock(state);
            let d = dir(&mut st);
            if d.done {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::BrokenPipe)));
            }
            match d.put(bytes) {
                0 => {
                    d.writer = Some(cx.waker().clone());
                    Poll::Pending
                }
                n => Poll::Ready(Ok(n)),
            }
        })
        .await?;
        bytes = &bytes[n..];
    }
    Ok(())
}

impl SessionEnd {
    /// Reads what the front wrote (`WouldBlock` when nothing is there yet, 0 at its end).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = lock(&self.state);
        let up = &mut st.up;
        match up.take(buf) {
            0 if !buf.is_empty() && !up.done => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    /// Appends what the front wrote to `buf`, up to its capacity, as [`Self::try_read`].
    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut st = lock(&self.state);
        let up = &mut st.up;
        let n = up.unread().len().min(buf.capacity() - buf.len());
        if n == 0 && !up.done {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        buf.extend_from_slice(&up.unread()[..n]);
        up.consume(n);
        Ok(n)
    }

    /// Copies what is waiting without consuming it.
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let st = lock(&self.state);
        let n = buf.len().min(st.up.unread().len());
        buf[..n].copy_from_slice(&st.up.unread()[..n]);
        n
    }

    pub fn has_input(&self) -> bool {
        !lock(&self.state).up.unread().is_empty()
    }

    /// Resolves once a read may make progress.
    pub async fn readable(&self) {
        std::future::poll_fn(|cx| {
            let mut st = lock(&self.state);
            if !st.up.unread().is_empty() || st.up.done {
                return Poll::Ready(());
            }
            st.up.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Resolves once the front is gone. The end of the request is not a close: an HTTP/2
    /// request ends its stream's sending side as a matter of course.
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut st = lock(&self.state);
            if st.aborted {
                return Poll::Ready(());
            }
            st.up.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The front is gone and everything it wrote has been read.
    pub fn front_gone(&self) -> bool {
        let st = lock(&self.state);
        st.up.done && st.up.unread().is_empty()
    }

    /// Writes all of `bytes`, waiting while the front has not read what came before.
    /// Fails once the front is gone.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        write_all(&self.state, |st| &mut st.down, bytes).await
    }

    /// The session will write no more (the end of a close-delimited response).
    pub fn shutdown(&self) {
        lock(&self.state).down.finish();
    }

    /// Ends both directions at once.
    pub fn abort(&self) {
        let mut st = lock(&self.state);
        st.up.finish();
        st.down.finish();
    }
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        self.abort();
    }
}

impl Front {
    /// Writes all of `bytes` for the session, waiting while it has not read what came
    /// before. Fails once the session is gone.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        write_all(&self.state, |st| &mut st.up, bytes).await
    }

    /// Appends what the session wrote to `out`, waiting for at least one byte; `Ok(0)`
    /// once the session will write no more.
    pub async fn read(&self, out: &mut Vec<u8>) -> io::Result<usize> {
        std::future::poll_fn(|cx| {
            let mut st = lock(&self.state);
            let down = &mut st.down;
            let n = down.unread().len();
            if n > 0 && out.is_empty() && down.read == 0 {
                // Nothing to append to: take the bytes whole and leave `out`'s storage.
                std::mem::swap(out, &mut down.bytes);
                down.consume(0);
                return Poll::Ready(Ok(n));
            }
            if n > 0 {
                out.extend_from_slice(down.unread());
                down.consume(n);
                return Poll::Ready(Ok(n));
            }
            if down.done {
                return Poll::Ready(Ok(0));
            }
            down.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The request is complete: the session reads its end.
    pub fn finish(&self) {
        lock(&self.state).up.finish();
    }

    /// The stream is gone (reset by the client, or its connection closed).
    pub fn abort(&self) {
        let mut st = lock(&self.state);
        st.aborted = true;
        st.up.finish();
        st.down.finish();
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_cross_in_order_and_ends_are_seen() {
        let (front, end) = pair();
        front.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(end.try_read(&mut buf).unwrap(), 16);
        assert_eq!(
            end.try_read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        front.finish();
        end.readable().await;
        assert_eq!(end.try_read(&mut buf).unwrap(), 0);
        end.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        end.shutdown();
        let mut out = Vec::new();
        assert_eq!(front.read(&mut out).await.unwrap(), 17);
        assert_eq!(front.read(&mut out).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_writer_waits_for_its_reader_and_fails_once_it_is_gone() {
        let (front, end) = pair();
        let big = vec![7u8; LIMIT + 10];
        let mut out = Vec::new();
        let reader = async {
            while out.len() < big.len() {
                front.read(&mut out).await.unwrap();
            }
        };
        let (w, ()) = tokio::join!(end.write_all(&big), reader);
        w.unwrap();
        drop(front);
        assert!(end.write_all(b"x").await.is_err());
        let mut buf = [0u8; 4];
        assert_eq!(end.try_read(&mut buf).unwrap(), 0);
    }
}
