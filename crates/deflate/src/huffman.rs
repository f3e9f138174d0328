//! Length-limited Huffman code construction for level 2's dynamic blocks.

/// Computes code lengths (at most `max_len` bits) for symbols with the given frequencies;
/// unused symbols get 0. One used symbol gets length 1.
pub(crate) fn build_lengths(freq: &[u32], max_len: usize, out: &mut [u8]) {
    out.fill(0);
    // Used symbols as (frequency, symbol) in one integer each, so sorting them is a sort
    // of plain integers.
    let mut keys = [0u64; 289];
    let mut n = 0;
    for (i, &f) in freq.iter().take(288).enumerate() {
        // Written whether used or not, kept by counting it: no branch on the data.
        keys[n] = u64::from(f) << 16 | i as u64;
        n += usize::from(f > 0);
    }
    let keys = &mut keys[..n];
    let symbol = |k: u64| (k & 0xffff) as usize;
    match n {
        0 => return,
        1 => {
            out[symbol(keys[0])] = 1;
            return;
        }
        _ => {}
    }
    keys.sort_unstable();
    let mut a = [0u32; 288];
    for (w, &k) in a.iter_mut().zip(keys.iter()) {
        *w = (k >> 16).min(u64::from(u32::MAX)) as u32;
    }
    let a = &mut a[..n];
    minimum_redundancy(a);
    // a[i] is now the code length of the i-th least frequent symbol (non-increasing in i).
    // Depths past 63 (possible only with extreme weights) are all past any limit.
    let mut count = [0u32; 64];
    for &d in a.iter() {
        count[(d as usize).min(63)] += 1;
    }
    let deepest = (a[0] as usize).min(63);
    // Limit lengths: move overlong codes to max_len, then rebalance the Kraft sum by
    // splitting shorter codes (each step keeps the sum, minus one unit).
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
            out[symbol(keys[k])] = len as u8;
            k += 1;
        }
    }
}

/// Optimal (unlimited) code lengths, in place, for weights sorted in non-decreasing order
/// (at least two): Moffat and Katajainen's method, which builds the tree in the array
/// itself. The first pass merges into parent pointers, the second turns them into depths,
/// the third turns internal depths into leaf depths.
fn minimum_redundancy(a: &mut [u32]) {
    let n = a.len();
    a[0] = a[0].saturating_add(a[1]);
    let (mut root, mut leaf) = (0, 2);
    for next in 1..n - 1 {
        // Each new node takes the two lightest of: leaves not yet used, nodes not yet used.
        if leaf >= n || a[root] < a[leaf] {
            a[next] = a[root];
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] = a[leaf];
            leaf += 1;
        }
        if leaf >= n || (root < next && a[root] < a[leaf]) {
            a[next] = a[next].saturating_add(a[root]);
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] = a[next].saturating_add(a[leaf]);
            leaf += 1;
        }
    }
    a[n - 2] = 0;
    for next in (0..n - 2).rev() {
        a[next] = a[a[next] as usize] + 1;
    }
    let (mut avail, mut used, mut depth) = (1u32, 0u32, 0u32);
    let (mut root, mut next) = (n as isize - 2, n as isize - 1);
    while avail > 0 {
        while root >= 0 && a[root as usize] == depth {
            used += 1;
            root -= 1;
        }
        while avail > used {
            a[next as usize] = depth;
            next -= 1;
            avail -= 1;
        }
        avail = 2 * used;
        depth += 1;
        used = 0;
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
