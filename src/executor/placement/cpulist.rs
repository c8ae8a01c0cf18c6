//! Linux's CPU list syntax (`0-3,8-11`), as sysfs (`node*/cpulist`) and `/proc/*/status`
//! (`Cpus_allowed_list`) write it.

use super::PlacementError;

/// The highest CPU number a list may name: `sched_setaffinity`'s fixed set holds 1024, and a
/// bound keeps a corrupt range from allocating without end.
pub const MAX_CPU: usize = 1023;

/// The CPUs `text` lists, sorted and without repeats; an empty list (a node with memory and
/// no CPUs) is empty.
pub fn parse(text: &str) -> Result<Vec<usize>, PlacementError> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    let bad = || PlacementError::CpuList(text.to_owned());
    let cpu = |s: &str| -> Result<usize, PlacementError> {
        let n: usize = s.trim().parse().map_err(|_| bad())?;
        if n > MAX_CPU { Err(bad()) } else { Ok(n) }
    };
    for part in text.split(',') {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (cpu(first)?, cpu(last)?);
                if first > last {
                    return Err(bad());
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(cpu(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `cpus` (sorted) in the same syntax, runs folded into ranges: what the logs and
/// `/get_server_info` show.
pub fn format(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ranges_singles_and_the_newline_sysfs_ends_with() {
        assert_eq!(parse("0-3,8-11\n").unwrap(), vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(parse("5").unwrap(), vec![5]);
        assert_eq!(parse("0,2,4-5").unwrap(), vec![0, 2, 4, 5]);
        assert_eq!(parse("3,1-2,2").unwrap(), vec![1, 2, 3], "sorted, no repeats");
        assert_eq!(parse("\n").unwrap(), Vec::<usize>::new(), "a node without CPUs");
    }

    #[test]
    fn malformed_lists_are_refused_naming_the_text() {
        for text in ["a", "1-", "-3", "3-1", "1,,2", "0-7:2", "1024", "0-99999999999"] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(text.trim()), "{err}");
        }
    }

    #[test]
    fn format_folds_runs() {
        assert_eq!(format(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
        assert_eq!(format(&[0, 2, 3]), "0,2-3");
        assert_eq!(format(&[]), "");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_the_set(cpus in proptest::collection::btree_set(0..=MAX_CPU, 0..64)) {
            let cpus: Vec<usize> = cpus.into_iter().collect();
            prop_assert_eq!(parse(&format(&cpus)).unwrap(), cpus);
        }
    }
}
