//! I/O buffers taken from a per-worker pool only while data is in flight.
//!
//! A connection waits for readability *before* taking a buffer, and gives it back as soon as
//! it is empty. Idle keep-alive connections therefore hold no buffer at all, and the few
//! buffers a worker cycles through stay hot in its CPU caches (the pool is LIFO), which
//! matters more than anything else when relaying large bodies.
//!
//! Invariant: a buffer holding unconsumed bytes is never returned to the pool.

use std::cell::RefCell;

use crate::transport::Conn;

/// A worker's free buffers, all of `tune.bufsize` bytes.
pub struct BufPool {
    size: usize,
    free: RefCell<Vec<Box<[u8]>>>,
}

/// Free buffers kept per worker beyond what is in use.
const MAX_FREE: usize = 256;

impl BufPool {
    pub fn new(size: usize) -> BufPool {
        BufPool {
            size,
            free: RefCell::new(Vec::new()),
        }
    }

    fn take(&self) -> Box<[u8]> {
        self.free
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0; self.size].into_boxed_slice())
    }

    fn give(&self, b: Box<[u8]>) {
        let mut free = self.free.borrow_mut();
        if free.len() < MAX_FREE {
            free.push(b);
        }
    }
}

/// A byte buffer with a read window `start..end`; its storage comes from a [`BufPool`].
#[derive(Default)]
pub struct Buf {
    data: Option<Box<[u8]>>,
    pub start: usize,
    pub end: usize,
}

impl Buf {
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Some(d) => &d[self.start..self.end],
            None => &[],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Drops whatever is buffered (a connection that will not be read again).
    pub fn clear(&mut self, pool: &BufPool) {
        self.start = 0;
        self.end = 0;
        self.release(pool);
    }

    /// No room is left and nothing can be compacted.
    pub fn is_full(&self) -> bool {
        self.data
            .as_ref()
            .is_some_and(|d| self.start == 0 && self.end == d.len())
    }

    /// The last read stopped at the end of the storage, so the peer may well have more
    /// waiting (a read that stopped short took everything there was).
    pub fn read_to_capacity(&self) -> bool {
        self.data.as_ref().is_some_and(|d| self.end == d.len())
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
    pub async fn fill(&mut self, stream: &mut Conn, pool: &BufPool) -> std::io::Result<usize> {
        loop {
            if self.is_empty() {
                self.release(pool);
                stream.readable().await?;
            }
            let data = self.data.get_or_insert_with(|| pool.take());
            if self.end == data.len() && self.start > 0 {
                data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match stream.try_read(&mut data[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    if n == 0 {
                        self.release(pool);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !self.is_empty() {
                        stream.readable().await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
