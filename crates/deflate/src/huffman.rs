//! Length-limited Huffman code construction for level 2's dynamic blocks.

/// Computes code lengths (at most `max_len` bits) for symbols with the given frequencies;
/// unused symbols get 0. One used symbol gets length 1.
pub(crate) fn build_lengths(freq: &[u32], max_len: usize, out: &mut [u8]) {
    out.fill(0);
    let mut syms = [(0u32, 0u16); 288];
    let mut n = 0;
    for (i, &f) in freq.iter().enumerate() {
        if f > 0 {
            syms[n] = (f, i as u16);
            n += 1;
        }
    }
    let syms = &mut syms[..n];
    match n {
        0 => return,
        1 => {
            out[syms[0].1 as usize] = 1;
            return;
        }
        _ => {}
    }
    syms.sort_unstable();
    // Two-queue Huffman: leaves are 0..n (sorted), internal nodes n.. are created in
    // non-decreasing weight order, so both queues stay sorted.
    let mut weight = [0u64; 576];
    let mut parent = [0u16; 576];
    for (i, s) in syms.iter().enumerate() {
        weight[i] = u64::from(s.0);
    }
    let (mut leaf, mut inner, mut next) = (0, n, n);
    let pick = |leaf: &mut usize, inner: &mut usize, next: usize, weight: &[u64]| {
        if *leaf < n && (*inner >= next || weight[*leaf] <= weight[*inner]) {
            *leaf += 1;
            *leaf - 1
        } else {
            *inner += 1;
            *inner - 1
        }
    };
    while next < 2 * n - 1 {
        let a = pick(&mut leaf, &mut inner, next, &weight);
        let b = pick(&mut leaf, &mut inner, next, &weight);
        weight[next] = weight[a] + weight[b];
        parent[a] = next as u16;
        parent[b] = next as u16;
        next += 1;
    }
    // Depths: parents have higher indices than their children.
    let root = 2 * n - 2;
    let mut depth = [0u8; 576];
    let mut count = [0u32; 64];
    for i in (0..root).rev() {
        depth[i] = depth[parent[i] as usize] + 1;
    }
    for &d in &depth[..n] {
        count[d as usize] += 1;
    }
    // Limit lengths: move overlong codes to max_len, then rebalance the Kraft sum by
    // splitting shorter codes (each step keeps the sum, minus one unit).
    let deepest = depth[..n].iter().copied().max().unwrap_or(0) as usize;
    if deepest > max_len {
        for d in max_len + 1..=deepest {
            count[max_len] += count[d];
            count[d] = 0;
        }
        let mut total: u64 = (1..=max_len)
            .map(|i| u64::from(count[i]) << (max_len - i))
            .sum();
        while total > 1 << max_len {
            count[max_len] -= 1;
            for i in (1..max_len).rev() {
                if count[i] > 0 {
                    count[i] -= 1;
                    count[i + 1] += 2;
                    break;
                }
            }
            total -= 1;
        }
    }
    // Least frequent symbols get the longest codes.
    let mut k = 0;
    for len in (1..=max_len).rev() {
        for _ in 0..count[len] {
            out[syms[k].1 as usize] = len as u8;
            k += 1;
        }
    }
}

/// Canonical codes for `lengths`, bit-reversed for LSB-first output.
pub(crate) fn canonical_codes(lengths: &[u8], codes: &mut [u16]) {
    let mut count = [0u16; 16];
    for &l in lengths {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut next = [0u16; 16];
    let mut code = 0u16;
    for bits in 1..16 {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    for (i, &l) in lengths.iter().enumerate() {
        if l > 0 {
            codes[i] = crate::tables::reverse(u32::from(next[l as usize]), u32::from(l)) as u16;
            next[l as usize] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kraft(lengths: &[u8], max: usize) -> u64 {
        lengths
            .iter()
            .filter(|&&l| l > 0)
            .map(|&l| 1u64 << (max - l as usize))
            .sum()
    }

    #[test]
    fn lengths_are_complete_and_limited() {
        // Fibonacci frequencies force deep trees.
        let mut f = vec![0u32; 40];
        let (mut a, mut b) = (1u32, 1u32);
        for x in f.iter_mut() {
            *x = a;
            let c = a.saturating_add(b);
            a = b;
            b = c;
        }
        let mut l = vec![0u8; 40];
        build_lengths(&f, 15, &mut l);
        assert!(l.iter().all(|&x| (1..=15).contains(&x)));
        assert_eq!(kraft(&l, 15), 1 << 15);
        build_lengths(&f, 7, &mut l);
        assert!(l.iter().all(|&x| (1..=7).contains(&x)));
        assert!(kraft(&l, 7) <= 1 << 7);
        let mut one = vec![0u32; 5];
        one[3] = 9;
        build_lengths(&one, 15, &mut l[..5]);
        assert_eq!(&l[..5], &[0, 0, 0, 1, 0]);
    }

    #[test]
    fn canonical_example_from_rfc() {
        // RFC 1951 §3.2.2: lengths (3,3,3,3,3,2,4,4) give codes 010..111, 00, 1110, 1111.
        let lengths = [3u8, 3, 3, 3, 3, 2, 4, 4];
        let mut codes = [0u16; 8];
        canonical_codes(&lengths, &mut codes);
        let want = [0b010, 0b011, 0b100, 0b101, 0b110, 0b00, 0b1110, 0b1111];
        for i in 0..8 {
            assert_eq!(
                codes[i] as u32,
                crate::tables::reverse(want[i], lengths[i] as u32)
            );
        }
    }
}
