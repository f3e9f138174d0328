//! `cpu-map` lines as read: which CPUs each worker thread may run on.
//!
//! Invariants:
//! - Threads are numbered from 1 as HAProxy numbers them (worker `tid` is thread `tid + 1`);
//!   a later line replaces an earlier one for the threads both name; threads above
//!   `nbthread` are ignored.
//! - `auto:` gives the threads of the set, lowest first, one CPU each, lowest first; the two
//!   sets have the same size (checked when the line is read).

use sluice_config::KwError;

/// The highest thread number and CPU number + 1 a set may name (HAProxy's word size).
const MAX: usize = 64;

/// Every `cpu-map` line, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuMap {
    lines: Vec<MapLine>,
}

/// One `cpu-map` line: threads (numbered from 1) and the CPUs they get.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MapLine {
    threads: Vec<usize>,
    cpus: Vec<usize>,
    /// `auto:`: the n-th thread gets the n-th CPU alone.
    auto: bool,
}

impl CpuMap {
    /// Adds a line's words (after the keyword).
    pub fn push_line(&mut self, a: &[String]) -> Result<(), KwError> {
        self.lines.push(parse(a)?);
        Ok(())
    }

    /// The CPUs thread `thread` (from 1) may run on, if a line names it.
    pub fn cpus_for(&self, thread: usize) -> Option<Vec<usize>> {
        self.lines.iter().rev().find_map(|l| {
            let at = l.threads.iter().position(|&t| t == thread)?;
            Some(if l.auto {
                vec![l.cpus[at]]
            } else {
                l.cpus.clone()
            })
        })
    }
}

fn parse(a: &[String]) -> Result<MapLine, KwError> {
    let Some((set, cpu_words)) = a.split_first() else {
        return Err(KwError::Missing("a process/thread set and CPUs"));
    };
    if cpu_words.is_empty() {
        return Err(KwError::Missing("a CPU set"));
    }
    let (auto, set) = match set.strip_prefix("auto:") {
        Some(rest) => (true, rest),
        None => (false, set.as_str()),
    };
    let (process, threads) = set.split_once('/').unwrap_or((set, "all"));
    let bad = |why: &str| KwError::bad(1, set, why.to_string());
    // Since HAProxy 2.5 there is one process: it must be named 1 (or a set holding it).
    let processes = numbers(process, 1).map_err(|e| bad(&e))?;
    if !processes.contains(&1) {
        return Err(bad(
            "there is one process, 1 (threads are written 1/THREADS)",
        ));
    }
    let threads = numbers(threads, 1).map_err(|e| bad(&e))?;
    let mut cpus = Vec::new();
    for (i, w) in cpu_words.iter().enumerate() {
        let set = numbers(w, 0).map_err(|e| KwError::bad(i + 2, w, e))?;
        cpus.extend(set);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if auto && threads.len() != cpus.len() {
        return Err(KwError::Invalid(format!(
            "'auto:' needs as many CPUs as threads ({} threads, {} CPUs)",
            threads.len(),
            cpus.len()
        )));
    }
    Ok(MapLine {
        threads,
        cpus,
        auto,
    })
}

/// The numbers a set names, sorted: `all`, `odd`, `even`, `N`, `N-M` or `N-` (to the
/// highest), from `first` (1 for threads and processes, 0 for CPUs).
fn numbers(word: &str, first: usize) -> Result<Vec<usize>, String> {
    let last = MAX - 1 + first;
    let all = first..=last;
    let num = |s: &str| -> Result<usize, String> {
        s.parse::<usize>()
            .ok()
            .filter(|n| all.contains(n))
            .ok_or_else(|| format!("'{s}': expects a number from {first} to {last}"))
    };
    Ok(match word {
        "all" => all.collect(),
        "odd" => all.filter(|n| n % 2 == 1).collect(),
        "even" => all.filter(|n| n % 2 == 0).collect(),
        _ => match word.split_once('-') {
            Some((lo, hi)) => {
                let lo = num(lo)?;
                let hi = if hi.is_empty() { last } else { num(hi)? };
                if hi < lo {
                    return Err(format!("'{word}': the range is reversed"));
                }
                (lo..=hi).collect()
            }
            None => vec![num(word)?],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(lines: &[&str]) -> Result<CpuMap, KwError> {
        let mut m = CpuMap::default();
        for l in lines {
            let words: Vec<String> = l.split_whitespace().map(String::from).collect();
            m.lines.push(parse(&words)?);
        }
        Ok(m)
    }

    #[test]
    fn the_manuals_examples() {
        for auto in ["auto:1/1-4 0-3", "auto:1/1-4 0-1 2-3", "auto:1/1-4 3 2 1 0"] {
            let m = map(&[auto]).unwrap();
            for t in 1..=4 {
                assert_eq!(m.cpus_for(t), Some(vec![t - 1]), "{auto}, thread {t}");
            }
            assert_eq!(m.cpus_for(5), None);
        }
        let m = map(&["1/all 0-3"]).unwrap();
        assert_eq!(m.cpus_for(7), Some(vec![0, 1, 2, 3]));
        let m = map(&["1 2"]).unwrap();
        assert_eq!(m.cpus_for(1), Some(vec![2]));
        let m = map(&["auto:1/odd 32-63"]).unwrap();
        assert_eq!(m.cpus_for(1), Some(vec![32]));
        assert_eq!(m.cpus_for(3), Some(vec![33]));
        assert_eq!(m.cpus_for(2), None);
        let m = map(&["1/1- 0-"]).unwrap();
        assert_eq!(m.cpus_for(64).map(|c| c.len()), Some(64));
    }

    #[test]
    fn a_later_line_wins_where_they_overlap() {
        let m = map(&["1/all 0-1", "1/2 3"]).unwrap();
        assert_eq!(m.cpus_for(1), Some(vec![0, 1]));
        assert_eq!(m.cpus_for(2), Some(vec![3]));
    }

    #[test]
    fn bad_lines() {
        for bad in [
            "2/1 0",
            "auto:1/1-3 0-1",
            "1/0 0",
            "1/1 64",
            "1/3-2 0",
            "1/1",
            "1/x 0",
        ] {
            assert!(map(&[bad]).is_err(), "{bad}");
        }
    }
}
