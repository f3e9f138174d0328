//! Precomputed fixed-Huffman codes (RFC 1951 §3.2.6), bit-reversed for LSB-first output,
//! and the length/distance code tables. Built at compile time.

/// Reverses the low `len` bits of `code`.
pub(crate) const fn reverse(code: u32, len: u32) -> u32 {
    let mut r = 0;
    let mut i = 0;
    while i < len {
        r |= ((code >> i) & 1) << (len - 1 - i);
        i += 1;
    }
    r
}

/// Fixed-Huffman code and length of a literal/length symbol (0..=287).
pub(crate) const fn fixed_lit(sym: u32) -> (u32, u32) {
    if sym < 144 {
        (reverse(0x30 + sym, 8), 8)
    } else if sym < 256 {
        (reverse(0x190 + sym - 144, 9), 9)
    } else if sym < 280 {
        (reverse(sym - 256, 7), 7)
    } else {
        (reverse(0xc0 + sym - 280, 8), 8)
    }
}

pub(crate) const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
pub(crate) const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
pub(crate) const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
pub(crate) const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// Length code index (0..29) for match lengths 3..=258, indexed by `len - 3`.
pub(crate) static LEN_CODE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut code = 0;
    let mut len = 3;
    while len <= 258 {
        while code + 1 < 29 && LEN_BASE[code + 1] as usize <= len {
            code += 1;
        }
        t[len - 3] = code as u8;
        len += 1;
    }
    t
};

/// Distance code for `dist - 1` below 256, and for `(dist - 1) >> 7` above (zlib's trick).
pub(crate) static DIST_CODE: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut d = 0;
    while d < 32768 {
        let mut code = 0;
        while code + 1 < 30 && DIST_BASE[code + 1] as usize <= d + 1 {
            code += 1;
        }
        if d < 256 {
            t[d] = code as u8;
        } else {
            t[256 + (d >> 7)] = code as u8;
        }
        d += 1;
    }
    t
};

#[inline(always)]
pub(crate) fn dist_code(dist: u32) -> usize {
    let d = (dist - 1) as usize;
    // Without a branch: distances are as good as random to a predictor.
    let far = usize::from(d >= 256);
    DIST_CODE[((d >> (7 * far)) | far << 8) & 511] as usize
}

/// A distance code's fixed-Huffman code (5 bits, bit-reversed), base distance and number of
/// extra bits, for one load per match.
#[derive(Clone, Copy)]
pub(crate) struct FixedDist {
    pub(crate) base: u16,
    pub(crate) code: u8,
    pub(crate) extra: u8,
}

pub(crate) static FIXED_DIST_CODES: [FixedDist; 30] = {
    let mut t = [FixedDist {
        base: 0,
        code: 0,
        extra: 0,
    }; 30];
    let mut i = 0;
    while i < 30 {
        t[i] = FixedDist {
            base: DIST_BASE[i],
            code: FIXED_DIST[i],
            extra: DIST_EXTRA[i],
        };
        i += 1;
    }
    t
};

/// Fixed-Huffman bits of a match length (code and extra bits together), by `len - 3`.
pub(crate) static FIXED_LEN: [(u32, u8); 256] = {
    let mut t = [(0u32, 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let code = LEN_CODE[i] as usize;
        let (c, l) = fixed_lit(257 + code as u32);
        let extra = (i + 3 - LEN_BASE[code] as usize) as u32;
        t[i] = (c | (extra << l), (l + LEN_EXTRA[code] as u32) as u8);
        i += 1;
    }
    t
};

/// Fixed-Huffman literal codes.
pub(crate) static FIXED_LIT: [(u16, u8); 256] = {
    let mut t = [(0u16, 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let (c, l) = fixed_lit(i as u32);
        t[i] = (c as u16, l as u8);
        i += 1;
    }
    t
};

/// Fixed distance codes are 5-bit code numbers, bit-reversed.
pub(crate) static FIXED_DIST: [u8; 30] = {
    let mut t = [0u8; 30];
    let mut i = 0;
    while i < 30 {
        t[i] = reverse(i as u32, 5) as u8;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_the_rfc() {
        assert_eq!(LEN_CODE[0], 0);
        assert_eq!(LEN_CODE[258 - 3], 28);
        assert_eq!(LEN_CODE[257 - 3], 27);
        assert_eq!(LEN_CODE[10 - 3], 7);
        assert_eq!(LEN_CODE[11 - 3], 8);
        assert_eq!(dist_code(1), 0);
        assert_eq!(dist_code(5), 4);
        assert_eq!(dist_code(32768), 29);
        assert_eq!(dist_code(24577), 29);
        assert_eq!(dist_code(24576), 28);
        for d in 1..=32768u32 {
            let c = dist_code(d);
            assert!(
                DIST_BASE[c] as u32 <= d && d < DIST_BASE[c] as u32 + (1 << DIST_EXTRA[c]),
                "{d}"
            );
        }
        assert_eq!(fixed_lit(0), (reverse(0b0011_0000, 8), 8));
        assert_eq!(fixed_lit(256), (0, 7));
    }
}
