//! The bit writer: a 64-bit queue that is stored whole at the output position after every
//! `put`, which then advances by the whole bytes queued. No branch depends on the data: the
//! encoder's loops emit a symbol per input position, and a data-dependent flush branch was
//! their most mispredicted one.
//!
//! Invariant: between `put` calls fewer than 8 bits are queued, so one `put` of up to 56
//! bits never overflows the queue. Bytes past `pos` may hold scratch from the last store;
//! later writes overwrite them and callers only read `out[..pos]`. Callers guarantee room
//! in the slice through the `max_encoded_len` bound; indexing stays checked, and the last 8
//! bytes of the slice take a slower byte-by-byte path.

pub(crate) struct Writer<'a> {
    out: &'a mut [u8],
    pub(crate) pos: usize,
    bits: u64,
    nbits: u32,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut [u8], bits: u64, nbits: u8) -> Writer<'a> {
        Writer {
            out,
            pos: 0,
            bits,
            nbits: u32::from(nbits),
        }
    }

    pub(crate) fn into_parts(self) -> (usize, u64, u8) {
        (self.pos, self.bits, self.nbits as u8)
    }

    /// Bits queued and not yet written.
    pub(crate) fn pending_bits(&self) -> u32 {
        self.nbits
    }

    /// Total bits produced so far by this writer (for cost checks and rewinds).
    #[inline(always)]
    pub(crate) fn bit_pos(&self) -> u64 {
        self.pos as u64 * 8 + u64::from(self.nbits)
    }

    /// A writer over the same output from the same state, for a hot loop. Its fields can
    /// live in registers, where this one's sit behind a pointer that every output store might
    /// alias; `rewind(local.mark())` brings its state back.
    pub(crate) fn local(&mut self) -> Writer<'_> {
        Writer {
            out: &mut *self.out,
            pos: self.pos,
            bits: self.bits,
            nbits: self.nbits,
        }
    }

    /// A snapshot to rewind to.
    pub(crate) fn mark(&self) -> (usize, u64, u32) {
        (self.pos, self.bits, self.nbits)
    }

    pub(crate) fn rewind(&mut self, m: (usize, u64, u32)) {
        (self.pos, self.bits, self.nbits) = m;
    }

    #[inline(always)]
    pub(crate) fn put(&mut self, code: u64, len: u32) {
        debug_assert!(
            len <= 56 && self.nbits < 8 && code >> len == 0,
            "put of {len} bits ({code:#x}) with {} queued",
            self.nbits
        );
        self.bits |= code << self.nbits;
        self.nbits += len;
        let Some(dst) = self.out.get_mut(self.pos..self.pos + 8) else {
            (self.pos, self.bits, self.nbits) = near_end(self.out, self.pos, self.bits, self.nbits);
            return;
        };
        dst.copy_from_slice(&self.bits.to_le_bytes());
        let whole = self.nbits & !7;
        self.pos += (whole / 8) as usize;
        // `whole` is at most 56: fewer than 8 bits were queued and `len` is at most 56.
        self.bits >>= whole;
        self.nbits -= whole;
    }

    /// Pads to a byte boundary and writes out every queued byte.
    pub(crate) fn align(&mut self) {
        self.nbits = (self.nbits + 7) & !7;
        while self.nbits > 0 {
            self.out[self.pos] = self.bits as u8;
            self.pos += 1;
            self.bits >>= 8;
            self.nbits -= 8;
        }
        self.bits = 0;
    }

    /// Writes whole bytes (the queue must be aligned and empty).
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        debug_assert_eq!(self.nbits, 0);
        self.out[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    /// Stored blocks holding `data`, the last one final when `last`.
    pub(crate) fn stored_blocks(&mut self, data: &[u8], last: bool) {
        let mut chunks = data.chunks(65535).peekable();
        while let Some(chunk) = chunks.next() {
            let fin = last && chunks.peek().is_none();
            self.put(u64::from(fin), 3);
            self.align();
            let len = chunk.len() as u16;
            self.bytes(&len.to_le_bytes());
            self.bytes(&(!len).to_le_bytes());
            self.bytes(chunk);
        }
    }

    /// An empty final fixed-Huffman block: BFINAL=1, BTYPE=01, end-of-block (10 bits).
    pub(crate) fn empty_final_block(&mut self) {
        self.put(0b011, 3);
        self.put(0, 7);
    }

    /// An empty non-final stored block, which byte-aligns the stream (a "sync flush").
    pub(crate) fn sync_block(&mut self) {
        self.put(0, 3);
        self.align();
        self.bytes(&[0, 0, 0xff, 0xff]);
    }
}

/// `put`'s tail when fewer than 8 bytes of room are left: whole bytes one at a time. A free
/// function over plain values, so that calling it does not make the writer's fields live in
/// memory in the hot loops.
#[cold]
#[inline(never)]
fn near_end(out: &mut [u8], mut pos: usize, mut bits: u64, mut nbits: u32) -> (usize, u64, u32) {
    while nbits >= 8 {
        out[pos] = bits as u8;
        pos += 1;
        bits >>= 8;
        nbits -= 8;
    }
    (pos, bits, nbits)
}
