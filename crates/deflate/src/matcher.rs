//! Match finding and block emission for levels 1 and 2.
//!
//! Per-thread scratch holds the hash table (and level 2's chains and token list). Positions
//! are stored offset by a per-thread `base` that grows with every call, so entries left by an
//! earlier call fall below the current base and are ignored: no table is ever cleared for a
//! new call, and a match can never refer to another call's data.

use std::cell::RefCell;

use crate::huffman::{build_lengths, canonical_codes};
use crate::tables::{
    dist_code, DIST_BASE, DIST_EXTRA, FIXED_DIST_CODES, FIXED_LEN, FIXED_LIT, LEN_BASE, LEN_CODE,
    LEN_EXTRA,
};
use crate::writer::Writer;

/// Input handled per block decision.
pub(crate) const SEGMENT: usize = 32768;
/// Most bytes a segment's output can exceed its input by (see `fast`'s give-up rule).
pub(crate) const SEGMENT_OVERHEAD: usize = 48;
/// How far (in bits) a fixed-Huffman block may fall behind a stored one before giving up.
const GIVE_UP_MARGIN: u64 = 256;

const HASH_BITS: u32 = 13;
const WINDOW: usize = 32768;
const MIN_MATCH: usize = 4;
const MAX_MATCH: usize = 258;
/// Level 2: chain links followed per position, and the match length that ends the search.
const MAX_CHAIN: usize = 1;
const GOOD_ENOUGH: usize = 16;
/// Level 2: positions inside matches up to this length are hashed too.
const MAX_INSERT: usize = 4;
/// Level 2: matches shorter than this are compared with the match one byte later.
const LAZY_BELOW: usize = 6;

struct Scratch {
    head: Vec<u32>,
    /// Distance back to the previous position with the same hash, by position mod WINDOW.
    prev: Vec<u16>,
    tokens: Vec<u32>,
    base: u32,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        head: vec![0; 1 << HASH_BITS],
        prev: Vec::new(),
        tokens: Vec::new(),
        base: 1,
    });
}

impl Scratch {
    /// Reserves positions for an `n`-byte call and returns its base.
    fn begin(&mut self, n: usize) -> u32 {
        if u64::from(self.base) + n as u64 + 1 >= u64::from(u32::MAX) {
            self.head.fill(0);
            self.base = 1;
        }
        let base = self.base;
        self.base += n as u32 + 1;
        base
    }
}

#[inline(always)]
fn read32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn read64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn hash(v: u32) -> usize {
    (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
}

/// Number of equal bytes at `a` and `b` (a < b), at most `max`; `b + max` is in bounds.
#[inline(always)]
fn common(input: &[u8], a: usize, b: usize, max: usize) -> usize {
    let mut i = 0;
    while i + 8 <= max {
        let x = read64(input, a + i) ^ read64(input, b + i);
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < max && input[a + i] == input[b + i] {
        i += 1;
    }
    i
}

#[inline(always)]
fn put_fixed_literal(w: &mut Writer<'_>, b: u8) {
    let (code, len) = FIXED_LIT[b as usize];
    w.put(u64::from(code), u32::from(len));
}

#[inline(always)]
fn put_fixed_match(w: &mut Writer<'_>, len: usize, dist: usize) {
    let (lcode, lbits) = FIXED_LEN[len - 3];
    let fd = FIXED_DIST_CODES[dist_code(dist as u32)];
    let dextra = (dist - fd.base as usize) as u64;
    let dbits = 5 + u32::from(fd.extra);
    let dcode = u64::from(fd.code) | (dextra << 5);
    w.put(
        u64::from(lcode) | (dcode << lbits),
        u32::from(lbits) + dbits,
    );
}

/// Level 1: greedy matching, one candidate per hash slot, fixed-Huffman blocks; a segment
/// whose fixed encoding falls behind a stored copy by more than a small margin is stored.
pub(crate) fn fast(w: &mut Writer<'_>, input: &[u8], last: bool) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let base = s.begin(input.len());
        // A fixed-size table: hashes index it without bounds checks.
        let head: &mut [u32; 1 << HASH_BITS] = s
            .head
            .as_mut_slice()
            .try_into()
            .expect("the table has 2^HASH_BITS slots");
        fast_with(w, input, last, head, base);
    });
}

fn fast_with(
    w: &mut Writer<'_>,
    input: &[u8],
    last: bool,
    head: &mut [u32; 1 << HASH_BITS],
    base: u32,
) {
    let n = input.len();
    let mut seg_start = 0;
    while seg_start < n {
        let seg_end = (seg_start + SEGMENT).min(n);
        let fin = last && seg_end == n;
        let mark = w.mark();
        let mut local = w.local();
        let ok = fixed_segment(&mut local, &input[..seg_end], seg_start, fin, head, base);
        let state = local.mark();
        w.rewind(state);
        if !ok {
            w.rewind(mark);
            w.stored_blocks(&input[seg_start..seg_end], fin);
        }
        seg_start = seg_end;
    }
}

/// `input[seg_start..]` as one fixed-Huffman block; false when it gave up because a stored
/// block is smaller (the caller then rewinds `w`). Inlined so that `w`'s fields can stay in
/// registers.
#[inline(always)]
fn fixed_segment(
    w: &mut Writer<'_>,
    input: &[u8],
    seg_start: usize,
    fin: bool,
    head: &mut [u32; 1 << HASH_BITS],
    base: u32,
) -> bool {
    let seg_end = input.len();
    let start_bits = w.bit_pos();
    // Stored bits for the bytes consumed so far, plus the margin: the fixed block gives up
    // when it would exceed that.
    let give_up = |w: &Writer<'_>, consumed: usize| {
        w.bit_pos() - start_bits > consumed as u64 * 8 + GIVE_UP_MARGIN
    };
    w.put(u64::from(fin) | 0b10, 3);
    let mut p = seg_start;
    while p + MIN_MATCH <= seg_end {
        let v = read32(input, p);
        let h = hash(v);
        let c = head[h].wrapping_sub(base) as usize;
        head[h] = base + p as u32;
        // One comparison covers "earlier in this call" and "inside the window": an entry
        // from another call, or never set, wraps `p - c` far past WINDOW.
        let dist = p.wrapping_sub(c);
        if dist.wrapping_sub(1) < WINDOW && read32(input, c) == v {
            let max = (seg_end - p).min(MAX_MATCH);
            let len = MIN_MATCH + common(input, c + MIN_MATCH, p + MIN_MATCH, max - MIN_MATCH);
            put_fixed_match(w, len, dist);
            // Hash one position near the match's end: the next search then finds the
            // most recent copy of what follows, for one table write per match.
            let q = p + len - 2;
            if len > 4 && q + MIN_MATCH <= seg_end {
                head[hash(read32(input, q))] = base + q as u32;
            }
            p += len;
        } else {
            let b = input[p];
            put_fixed_literal(w, b);
            p += 1;
            // Only 9-bit literals (>= 144) can make fixed Huffman cost more than storing.
            if b >= 144 && give_up(w, p - seg_start) {
                return false;
            }
        }
    }
    while p < seg_end {
        put_fixed_literal(w, input[p]);
        p += 1;
    }
    w.put(0, 7);
    !give_up(w, seg_end - seg_start)
}

/// Level 2: lazy matching over short hash chains; each segment is emitted as a dynamic,
/// fixed or stored block, whichever is smallest.
pub(crate) fn better(w: &mut Writer<'_>, input: &[u8], last: bool) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let base = s.begin(input.len());
        if s.prev.is_empty() {
            s.prev = vec![0; WINDOW];
        }
        let Scratch {
            head, prev, tokens, ..
        } = &mut *s;
        better_with(w, input, last, head, prev, tokens, base);
    });
}

/// Token encoding: a literal is its byte; a match is MATCH | (len - 3) << 16 | (dist - 1).
const MATCH: u32 = 1 << 31;

struct Chains<'a> {
    input: &'a [u8],
    head: &'a mut [u32],
    prev: &'a mut [u16],
    base: u32,
}

impl Chains<'_> {
    /// The longest match at `p` (length, distance), then records `p` in the chains.
    #[inline(always)]
    fn search_and_insert(&mut self, p: usize, limit: usize) -> (usize, usize) {
        let input = self.input;
        let v = read32(input, p);
        let h = hash(v);
        let first = self.head[h].wrapping_sub(self.base) as usize;
        let (mut best_len, mut best_dist) = (0, 0);
        let mut c = first;
        let max = (limit - p).min(MAX_MATCH);
        for _ in 0..MAX_CHAIN {
            if c >= p || p - c > WINDOW {
                break;
            }
            // A candidate can only beat the best if it matches one byte further.
            if read32(input, c) == v
                && (best_len == 0 || input[c + best_len] == input[p + best_len])
            {
                let len = MIN_MATCH + common(input, c + MIN_MATCH, p + MIN_MATCH, max - MIN_MATCH);
                if len > best_len {
                    best_len = len;
                    best_dist = p - c;
                    if len >= GOOD_ENOUGH || len == max {
                        break;
                    }
                }
            }
            let d = self.prev[c % WINDOW] as usize;
            if d == 0 {
                break;
            }
            c = c.wrapping_sub(d);
        }
        self.insert_known(p, h, first);
        (best_len, best_dist)
    }

    #[inline(always)]
    fn insert_known(&mut self, p: usize, h: usize, first: usize) {
        if MAX_CHAIN > 1 {
            self.prev[p % WINDOW] = if first < p && p - first <= WINDOW {
                (p - first) as u16
            } else {
                0
            };
        }
        self.head[h] = self.base + p as u32;
    }

    #[inline(always)]
    fn insert(&mut self, p: usize) {
        let h = hash(read32(self.input, p));
        let first = self.head[h].wrapping_sub(self.base) as usize;
        self.insert_known(p, h, first);
    }
}

fn better_with(
    w: &mut Writer<'_>,
    input: &[u8],
    last: bool,
    head: &mut [u32],
    prev: &mut [u16],
    tokens: &mut Vec<u32>,
    base: u32,
) {
    let n = input.len();
    let mut ch = Chains {
        input,
        head,
        prev,
        base,
    };
    let mut seg_start = 0;
    while seg_start < n {
        let seg_end = (seg_start + SEGMENT).min(n);
        let fin = last && seg_end == n;
        tokens.clear();
        tokens.reserve(seg_end - seg_start);
        let mut lit = [0u32; 286];
        let mut dist = [0u32; 30];
        let mut extra_bits = 0u64;
        let mut push_match = |tokens: &mut Vec<u32>,
                              lit: &mut [u32; 286],
                              dist: &mut [u32; 30],
                              len: usize,
                              d: usize| {
            let lc = LEN_CODE[len - 3] as usize;
            let dc = dist_code(d as u32);
            lit[257 + lc] += 1;
            dist[dc] += 1;
            extra_bits += u64::from(LEN_EXTRA[lc]) + u64::from(DIST_EXTRA[dc]);
            tokens.push(MATCH | ((len as u32 - 3) << 16) | (d as u32 - 1));
        };
        let mut p = seg_start;
        let mut pending: Option<(usize, usize)> = None;
        while p + MIN_MATCH <= seg_end {
            let (len, d) = match pending.take() {
                Some(m) => m,
                None => ch.search_and_insert(p, seg_end),
            };
            if len < MIN_MATCH {
                lit[input[p] as usize] += 1;
                tokens.push(u32::from(input[p]));
                p += 1;
                continue;
            }
            // Lazy evaluation: a longer match one byte later wins over this one.
            if len < LAZY_BELOW && p + 1 + MIN_MATCH <= seg_end {
                let next = ch.search_and_insert(p + 1, seg_end);
                if next.0 > len {
                    lit[input[p] as usize] += 1;
                    tokens.push(u32::from(input[p]));
                    p += 1;
                    pending = Some(next);
                    continue;
                }
                push_match(tokens, &mut lit, &mut dist, len, d);
                if len <= MAX_INSERT {
                    for q in p + 2..(p + len).min(seg_end - MIN_MATCH + 1) {
                        ch.insert(q);
                    }
                }
            } else {
                push_match(tokens, &mut lit, &mut dist, len, d);
                if len <= MAX_INSERT {
                    for q in p + 1..(p + len).min(seg_end - MIN_MATCH + 1) {
                        ch.insert(q);
                    }
                }
            }
            p += len;
        }
        while p < seg_end {
            lit[input[p] as usize] += 1;
            tokens.push(u32::from(input[p]));
            p += 1;
        }
        lit[256] += 1;
        emit_best_block(
            w,
            &input[seg_start..seg_end],
            tokens,
            &lit,
            &dist,
            extra_bits,
            fin,
        );
        seg_start = seg_end;
    }
}

/// The order code-length code lengths are sent in (RFC 1951 §3.2.7).
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// Run-length encodes code lengths into (symbol, extra value) pairs.
fn rle_lengths(lengths: &[u8], out: &mut Vec<(u8, u8)>) {
    let mut i = 0;
    while i < lengths.len() {
        let l = lengths[i];
        let mut run = lengths[i..].iter().take_while(|&&x| x == l).count();
        i += run;
        if l == 0 {
            while run >= 11 {
                let r = run.min(138);
                out.push((18, (r - 11) as u8));
                run -= r;
            }
            if run >= 3 {
                out.push((17, (run - 3) as u8));
                run = 0;
            }
        } else {
            out.push((l, 0));
            run -= 1;
            while run >= 3 {
                let r = run.min(6);
                out.push((16, (r - 3) as u8));
                run -= r;
            }
        }
        for _ in 0..run {
            out.push((l, 0));
        }
    }
}

fn emit_best_block(
    w: &mut Writer<'_>,
    data: &[u8],
    tokens: &[u32],
    lit: &[u32; 286],
    dist: &[u32; 30],
    extra_bits: u64,
    fin: bool,
) {
    // Fixed-Huffman cost.
    let fixed_lit_len = |s: usize| -> u64 {
        match s {
            0..=143 => 8,
            144..=255 => 9,
            256..=279 => 7,
            _ => 8,
        }
    };
    let fixed_bits: u64 = 3
        + (0..286)
            .map(|s| u64::from(lit[s]) * fixed_lit_len(s))
            .sum::<u64>()
        + dist.iter().map(|&f| u64::from(f) * 5).sum::<u64>()
        + extra_bits;
    // Dynamic-Huffman cost.
    let mut lit_len = [0u8; 286];
    let mut dist_len = [0u8; 30];
    build_lengths(lit, 15, &mut lit_len);
    build_lengths(dist, 15, &mut dist_len);
    if dist_len.iter().all(|&l| l == 0) {
        dist_len[0] = 1; // at least one distance code must be described
    }
    let hlit = 257
        + lit_len[257..]
            .iter()
            .rposition(|&l| l > 0)
            .map_or(0, |i| i + 1);
    let hdist = 1 + dist_len.iter().rposition(|&l| l > 0).unwrap_or(0);
    let mut all = [0u8; 316];
    all[..hlit].copy_from_slice(&lit_len[..hlit]);
    all[hlit..hlit + hdist].copy_from_slice(&dist_len[..hdist]);
    let mut rle = Vec::with_capacity(64);
    rle_lengths(&all[..hlit + hdist], &mut rle);
    let mut cl_freq = [0u32; 19];
    for &(s, _) in &rle {
        cl_freq[s as usize] += 1;
    }
    let mut cl_len = [0u8; 19];
    build_lengths(&cl_freq, 7, &mut cl_len);
    let hclen = 4 + CL_ORDER
        .iter()
        .rposition(|&s| cl_len[s] > 0)
        .map_or(0, |i| i + 1)
        .saturating_sub(4);
    let rle_extra = |s: u8| match s {
        16 => 2,
        17 => 3,
        18 => 7,
        _ => 0,
    };
    let header_bits: u64 = 3
        + 5
        + 5
        + 4
        + 3 * hclen as u64
        + rle
            .iter()
            .map(|&(s, _)| u64::from(cl_len[s as usize]) + rle_extra(s))
            .sum::<u64>();
    let dynamic_bits = header_bits
        + (0..286)
            .map(|s| u64::from(lit[s]) * u64::from(lit_len[s]))
            .sum::<u64>()
        + (0..30)
            .map(|s| u64::from(dist[s]) * u64::from(dist_len[s]))
            .sum::<u64>()
        + extra_bits;
    let stored_bits = data.len() as u64 * 8 + 42 * (data.len() as u64 / 65535 + 1);

    if stored_bits <= fixed_bits.min(dynamic_bits) {
        w.stored_blocks(data, fin);
    } else if fixed_bits <= dynamic_bits {
        w.put(u64::from(fin) | 0b10, 3);
        let mut local = w.local();
        for &t in tokens {
            if t & MATCH == 0 {
                put_fixed_literal(&mut local, t as u8);
            } else {
                put_fixed_match(
                    &mut local,
                    ((t >> 16) & 0xff) as usize + 3,
                    (t & 0xffff) as usize + 1,
                );
            }
        }
        let state = local.mark();
        w.rewind(state);
        w.put(0, 7);
    } else {
        let mut lit_code = [0u16; 286];
        let mut dist_code_tab = [0u16; 30];
        let mut cl_code = [0u16; 19];
        canonical_codes(&lit_len, &mut lit_code);
        canonical_codes(&dist_len, &mut dist_code_tab);
        canonical_codes(&cl_len, &mut cl_code);
        w.put(u64::from(fin) | 0b100, 3);
        w.put((hlit - 257) as u64, 5);
        w.put((hdist - 1) as u64, 5);
        w.put((hclen - 4) as u64, 4);
        for &s in &CL_ORDER[..hclen] {
            w.put(u64::from(cl_len[s]), 3);
        }
        for &(s, x) in &rle {
            w.put(
                u64::from(cl_code[s as usize]),
                u32::from(cl_len[s as usize]),
            );
            let e = rle_extra(s);
            if e > 0 {
                w.put(u64::from(x), e as u32);
            }
        }
        // Per-block tables so each token is one or two look-ups, as for fixed blocks.
        let mut len_bits = [(0u32, 0u8); 256];
        for (i, e) in len_bits.iter_mut().enumerate() {
            let lc = LEN_CODE[i] as usize;
            let s = 257 + lc;
            if lit_len[s] > 0 {
                let extra = (i + 3 - LEN_BASE[lc] as usize) as u32;
                *e = (
                    u32::from(lit_code[s]) | (extra << lit_len[s]),
                    lit_len[s] + LEN_EXTRA[lc],
                );
            }
        }
        // A literal's code and length in one look-up.
        let mut lit_bits = [(0u32, 0u8); 256];
        for (s, e) in lit_bits.iter_mut().enumerate() {
            *e = (u32::from(lit_code[s]), lit_len[s]);
        }
        let mut local = w.local();
        for &t in tokens {
            if t & MATCH == 0 {
                let (code, len) = lit_bits[(t & 0xff) as usize];
                local.put(u64::from(code), u32::from(len));
            } else {
                let (lcode, lbits) = len_bits[((t >> 16) & 0xff) as usize];
                let d = (t & 0xffff) as usize + 1;
                let dc = dist_code(d as u32);
                let dextra = (d - DIST_BASE[dc] as usize) as u64;
                // Two puts: a dynamic length (<= 15 + 5 bits) and distance (<= 15 + 13 bits)
                // together could exceed the writer's 32 bits per put.
                local.put(u64::from(lcode), u32::from(lbits));
                local.put(
                    u64::from(dist_code_tab[dc]) | (dextra << dist_len[dc]),
                    u32::from(dist_len[dc]) + u32::from(DIST_EXTRA[dc]),
                );
            }
        }
        local.put(u64::from(lit_code[256]), u32::from(lit_len[256]));
        let state = local.mark();
        w.rewind(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rle_round_trip() {
        let lengths = [
            0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 5, 0, 0, 3, 3,
        ];
        let mut rle = Vec::new();
        rle_lengths(&lengths, &mut rle);
        let mut back = Vec::new();
        for (s, x) in rle {
            match s {
                16 => {
                    let l = *back.last().unwrap();
                    back.extend(std::iter::repeat_n(l, 3 + x as usize));
                }
                17 => back.extend(std::iter::repeat_n(0, 3 + x as usize)),
                18 => back.extend(std::iter::repeat_n(0, 11 + x as usize)),
                l => back.push(l),
            }
        }
        assert_eq!(back, lengths);
    }

    #[test]
    fn common_prefix() {
        let v = b"abcdefghijabcdefghijXY";
        assert_eq!(common(v, 0, 10, 12), 10);
        assert_eq!(common(v, 0, 10, 5), 5);
    }
}
