//! The hash functions of HAProxy's converters and `hash-type`, written from their published
//! definitions, so that a key hashes to the same value (and the same server) as there.

/// CRC-32 (the IEEE polynomial, as zlib's).
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Bernstein's hash: h = h * 33 + byte, from 5381.
pub fn djb2(data: &[u8]) -> u32 {
    data.iter().fold(5381u32, |h, &b| {
        h.wrapping_mul(33).wrapping_add(u32::from(b))
    })
}

/// The sdbm database's hash: h = byte + (h << 6) + (h << 16) - h.
pub fn sdbm(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |h, &b| {
        u32::from(b)
            .wrapping_add(h << 6)
            .wrapping_add(h << 16)
            .wrapping_sub(h)
    })
}

/// HAProxy's "wt6": two 32-bit states mixed with rotations whose steps depend on the data.
pub fn wt6(data: &[u8]) -> u32 {
    let (mut h0, mut h1) = (0xa53c_965a_u32, 0x5ca6_953a_u32);
    let (mut step0, mut step1) = (6u32, 18u32);
    for &b in data {
        let t = u32::from(b);
        h0 = !(h0 ^ t);
        h1 = !(h1.wrapping_add(t));
        let r = h1.rotate_left(step0);
        h1 = h0.rotate_left(step1);
        h0 = r;
        let t = ((h0 >> 16) ^ h1) & 0xffff;
        step0 = t & 0x1f;
        step1 = t >> 11;
    }
    h0 ^ h1
}

/// The avalanche step HAProxy applies after a hash when asked (`crc32(1)`, `hash-type ...
/// avalanche`): Bob Jenkins' 32-bit integer mix, then a multiplication by the prime
/// 3221225473 that spreads values over the whole range.
pub fn avalanche(mut a: u32) -> u32 {
    a = a.wrapping_add(0x7ed5_5d16).wrapping_add(a << 12);
    a = (a ^ 0xc761_c23c) ^ (a >> 19);
    a = a.wrapping_add(0x1656_67b1).wrapping_add(a << 5);
    a = a.wrapping_add(0xd3a2_646c) ^ (a << 9);
    a = a.wrapping_add(0xfd70_46c5).wrapping_add(a << 3);
    a = (a ^ 0xb55a_4f09) ^ (a >> 16);
    a.wrapping_mul(3_221_225_473)
}

/// XXH32, with a seed.
pub fn xxh32(data: &[u8], seed: u32) -> u32 {
    xxhash_rust::xxh32::xxh32(data, seed)
}

/// XXH64, with a seed.
pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(data, seed)
}

/// XXH3, 64 bits, with a seed.
pub fn xxh3(data: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(data, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(djb2(b""), 5381);
        assert_eq!(djb2(b"a"), 5381 * 33 + 97);
        assert_eq!(sdbm(b"a"), 97);
        assert_eq!(xxh3(b"", 0), 0x2d06_8005_38d3_94c2);
    }

    /// What HAProxy 2.6.12 answers for `%[path,djb2]` ... on these paths.
    #[test]
    fn equal_to_haproxy() {
        let p = b"/api/users";
        assert_eq!(djb2(p), 2086524975);
        assert_eq!(crc32(p), 2162284669);
        assert_eq!(wt6(p), 1634223544);
        assert_eq!(sdbm(p), 4042491044);
        assert_eq!(avalanche(djb2(p)), 589122015);
        assert_eq!(avalanche(crc32(p)), 293529663);
        assert_eq!(avalanche(wt6(p)), 1306680290);
        assert_eq!(avalanche(sdbm(p)), 2761070127);
        assert_eq!(xxh3(p, 0) as i64, 4367959314151795169);
        assert_eq!(xxh3(p, 5) as i64, 8673234375921608972);
        assert_eq!(xxh3(b"/index.html", 0) as i64, -6156675040932399064);
        assert_eq!(
            (djb2(b"/"), crc32(b"/"), wt6(b"/"), sdbm(b"/")),
            (177620, 2043925204, 1886637733, 47)
        );
    }
}
