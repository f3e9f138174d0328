//! I/O buffers taken from a per-worker pool only while data is in flight.
//!
//! A connection waits for readability *before* taking a buffer, and gives it back as soon as
//! it is empty. Idle keep-alive connections therefore hold no buffer at all, and the few
//! buffers a worker cycles through stay hot in its CPU caches (the pool is LIFO), which
//! matters more than anything else when relaying large bodies.
//!
//! Invariant: a buffer holding unconsumed bytes is never returned to the pool.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::transport::Conn;

/// What a worker's buffers hold, readable from any thread (`show pools`, `show info`): the
/// buffers connections hold, and the free ones the worker keeps for reuse.
#[derive(Debug, Default)]
pub struct BufGauge {
    in_use: AtomicUsize,
    cached: AtomicUsize,
}

impl BufGauge {
    /// Buffers taken by connections and not yet given back.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Free buffers kept by the worker.
    pub fn cached(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }
}

/// A buffer's storage while a connection holds it: counted in use from the pool's `take`
/// until it is given back or dropped with its connection.
struct Storage {
    bytes: Vec<u8>,
    gauge: Arc<BufGauge>,
}

impl Deref for Storage {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.gauge.in_use.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A worker's free buffers, each with room for `tune.bufsize` bytes.
///
/// A buffer's room is never written before data is read into it (no zero-filling), so a
/// connection that received a few hundred bytes costs the memory pages those bytes landed
/// in, not the whole buffer.
pub struct BufPool {
    size: usize,
    free: RefCell<Vec<Vec<u8>>>,
    gauge: Arc<BufGauge>,
}

/// Free buffers kept per worker beyond what is in use (the rest go back to the allocator).
const MAX_FREE: usize = 64;

impl BufPool {
    /// A pool of buffers of `size` bytes, counted in `gauge`.
    pub fn new(size: usize, gauge: Arc<BufGauge>) -> BufPool {
        BufPool {
            size,
            free: RefCell::new(Vec::new()),
            gauge,
        }
    }

    /// The size of its buffers.
    pub fn size(&self) -> usize {
        self.size
    }

    fn take(&self) -> Storage {
        let bytes = match self.free.borrow_mut().pop() {
            Some(b) => {
                self.gauge.cached.fetch_sub(1, Ordering::Relaxed);
                b
            }
            None => Vec::with_capacity(self.size),
        };
        self.gauge.in_use.fetch_add(1, Ordering::Relaxed);
        Storage {
            bytes,
            gauge: self.gauge.clone(),
        }
    }

    fn give(&self, mut s: Storage) {
        let mut b = std::mem::take(&mut s.bytes);
        drop(s);
        let mut free = self.free.borrow_mut();
        if free.len() < MAX_FREE {
            b.clear();
            free.push(b);
            self.gauge.cached.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Buffered bytes up to this many wait for the rest of a request head in a copy of their
/// own size, the pooled storage going back to the pool meanwhile (a client that sends half
/// a head and stalls holds a few hundred bytes, not a buffer). Bodies being relayed are
/// not parked: their waits are short and frequent.
const PARK_MAX: usize = 2048;

/// A byte buffer whose unread bytes are `start..` of its storage; the storage comes from a
/// [`BufPool`] and its length is where the data read so far ends. While `fill_head` waits
/// for more, a few buffered bytes may sit in `parked` instead, the storage given back.
#[derive(Default)]
pub struct Buf {
    data: Option<Storage>,
    start: usize,
    parked: Vec<u8>,
}

impl Buf {
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Some(d) => &d[self.start..],
            None => &self.parked,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    pub fn consume(&mut self, n: usize) {
        let Some(d) = &mut self.data else {
            self.parked.drain(..n);
            return;
        };
        self.start += n;
        if self.start == d.len() {
            self.start = 0;
            d.clear();
        }
    }

    /// Drops whatever is buffered (a connection that will not be read again).
    pub fn clear(&mut self, pool: &BufPool) {
        self.start = 0;
        self.parked = Vec::new();
        if let Some(d) = &mut self.data {
            d.clear();
        }
        self.release(pool);
    }

    /// Moves a few buffered bytes out of the pooled storage, which goes back to the pool.
    fn park(&mut self, pool: &BufPool) {
        if self.bytes().len() > PARK_MAX {
            return;
        }
        if let Some(d) = self.data.take() {
            self.parked = d[self.start..].to_vec();
            self.start = 0;
            pool.give(d);
        }
    }

    /// Puts parked bytes back at the start of pooled storage.
    fn unpark(&mut self, pool: &BufPool) {
        if self.data.is_none() && !self.parked.is_empty() {
            let mut d = pool.take();
            d.extend_from_slice(&self.parked);
            self.parked = Vec::new();
            self.data = Some(d);
        }
    }

    /// No room is left and nothing can be compacted.
    pub fn is_full(&self) -> bool {
        self.data
            .as_ref()
            .is_some_and(|d| self.start == 0 && d.len() == d.capacity())
    }

    /// The last read stopped at the end of the storage, so the peer may well have more
    /// waiting (a read that stopped short took everything there was).
    pub fn read_to_capacity(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.len() == d.capacity())
    }

    /// Returns the storage to the pool if nothing is buffered.
    pub fn release(&mut self, pool: &BufPool) {
        if self.is_empty() {
            if let Some(d) = self.data.take() {
                pool.give(d);
            }
        }
    }

    /// Reads once from `stream`. Waits for readability without holding storage, so an idle
    /// connection costs no buffer.
    pub async fn fill(&mut self, stream: &Conn, pool: &BufPool) -> std::io::Result<usize> {
        self.fill_parking(stream, pool, false).await
    }

    /// Like `fill`, for a message head: while the rest is awaited, a few buffered bytes are
    /// parked and the storage goes back to the pool.
    pub async fn fill_head(&mut self, stream: &Conn, pool: &BufPool) -> std::io::Result<usize> {
        self.fill_parking(stream, pool, true).await
    }

    async fn fill_parking(
        &mut self,
        stream: &Conn,
        pool: &BufPool,
        park: bool,
    ) -> std::io::Result<usize> {
        loop {
            if self.is_empty() {
                self.release(pool);
                stream.readable().await?;
            }
            self.unpark(pool);
            let data: &mut Vec<u8> = self.data.get_or_insert_with(|| pool.take());
            if data.len() == data.capacity() && self.start > 0 {
                data.copy_within(self.start.., 0);
                data.truncate(data.len() - self.start);
                self.start = 0;
            }
            if data.len() == data.capacity() {
                // Full: callers check `is_full` first; as a read into no room, nothing.
                return Ok(0);
            }
            match stream.try_read_into(data) {
                Ok(n) => {
                    if n == 0 {
                        self.release(pool);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !self.is_empty() {
                        if park {
                            self.park(pool);
                        }
                        stream.readable().await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
