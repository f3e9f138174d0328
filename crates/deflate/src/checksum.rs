//! The trailers' checksums: CRC-32 (gzip, via crc32fast's SIMD code) and Adler-32 (zlib).

use crate::Format;

/// The running check value of `format` over `data`, continuing from `prev`.
pub(crate) fn update(format: Format, prev: u32, data: &[u8]) -> u32 {
    match format {
        Format::Gzip => {
            let mut h = crc32fast::Hasher::new_with_initial(prev);
            h.update(data);
            h.finalize()
        }
        Format::Zlib => adler32(prev, data),
        Format::Raw => 0,
    }
}

pub(crate) fn initial(format: Format) -> u32 {
    match format {
        Format::Zlib => 1,
        _ => 0,
    }
}

/// Adler-32 (RFC 1950 §8), reducing modulo 65521 only every 5552 bytes (the largest run
/// that cannot overflow 32 bits).
fn adler32(prev: u32, data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (prev & 0xffff, prev >> 16);
    for block in data.chunks(5552) {
        let mut quads = block.chunks_exact(4);
        for q in &mut quads {
            a += u32::from(q[0]);
            b += a;
            a += u32::from(q[1]);
            b += a;
            a += u32::from(q[2]);
            b += a;
            a += u32::from(q[3]);
            b += a;
        }
        for &x in quads.remainder() {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler_known_values() {
        assert_eq!(adler32(1, b""), 1);
        assert_eq!(adler32(1, b"Wikipedia"), 0x11E6_0398);
        let big = vec![0xffu8; 100_000];
        let mut naive = (1u32, 0u32);
        for &x in &big {
            naive.0 = (naive.0 + u32::from(x)) % 65521;
            naive.1 = (naive.1 + naive.0) % 65521;
        }
        assert_eq!(adler32(1, &big), (naive.1 << 16) | naive.0);
        // Split updates equal one update.
        assert_eq!(
            adler32(adler32(1, &big[..777]), &big[777..]),
            adler32(1, &big)
        );
    }
}
