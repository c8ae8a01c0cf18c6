//! `-dp 2` through the real binary: each engine's pool threads (named `engine{i}-{t}`) run
//! with the CPU mask of their share, as `/proc` shows it. The expected shares are worked out
//! here from sysfs and the process's own mask, not by kiln's code: with one NUMA node the
//! allowed CPUs split in two contiguous halves (with a single allowed CPU, both engines get
//! it); with several, engine i gets the allowed CPUs of the i-th node holding any.
//! `--cpu-affinity off` leaves them on the whole mask.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::process::{KilnProcess, Launch};
use crate::common::wait::wait_for;

/// The CPUs of a `Cpus_allowed_list:` line in a `/proc` status file.
fn allowed_list(status: &str) -> Vec<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("a Cpus_allowed_list line")
        .trim();
    cpus(list)
}

/// A Linux CPU list (`0-3,8`), as sysfs and `/proc` write it.
fn cpus(list: &str) -> Vec<usize> {
    let list = list.trim();
    if list.is_empty() {
        return Vec::new();
    }
    list.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().expect("cpu")..=b.parse().expect("cpu")).collect::<Vec<_>>(),
            None => vec![part.parse().expect("cpu")],
        })
        .collect()
}

/// The allowed CPUs of every NUMA node holding some of `allowed`, by node id.
fn nodes(allowed: &[usize]) -> BTreeMap<usize, Vec<usize>> {
    let mut nodes = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/sys/devices/system/node") else {
        return nodes;
    };
    for entry in entries.map(|e| e.expect("sysfs entry")) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("node").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let list = std::fs::read_to_string(entry.path().join("cpulist")).expect("cpulist");
        let on_node: Vec<usize> = cpus(&list).into_iter().filter(|c| allowed.contains(c)).collect();
        if !on_node.is_empty() {
            nodes.insert(id, on_node);
        }
    }
    nodes
}

/// What each of two engines should get: (node, CPUs).
fn expected_shares(allowed: &[usize]) -> [(usize, Vec<usize>); 2] {
    let nodes = nodes(allowed);
    if nodes.len() >= 2 {
        let mut it = nodes.into_iter();
        return [it.next().unwrap(), it.next().unwrap()];
    }
    let node = nodes.keys().next().copied().unwrap_or(0);
    if allowed.len() == 1 {
        // One CPU: both engines share it.
        return [(node, allowed.to_vec()), (node, allowed.to_vec())];
    }
    let half = allowed.len() / 2;
    [(node, allowed[..half].to_vec()), (node, allowed[half..].to_vec())]
}

/// Each thread of `kiln` whose name starts `engine{engine}-`: (name, allowed CPUs).
fn engine_threads(kiln: &KilnProcess, engine: usize) -> Vec<(String, Vec<usize>)> {
    let prefix = format!("engine{engine}-");
    let mut threads = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{}/task", kiln.pid())).expect("/proc task list");
    for task in tasks.map(|t| t.expect("task")) {
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(task.path().join("comm")),
            std::fs::read_to_string(task.path().join("status")),
        ) else {
            continue; // a thread that ended between the listing and the read
        };
        let name = comm.trim().to_owned();
        if name.starts_with(&prefix) {
            threads.push((name, allowed_list(&status)));
        }
    }
    threads.sort();
    threads
}

/// How many threads each engine's pool should have.
fn pool_size(share: &[usize]) -> usize {
    match std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        Some(n) if n > 0 => (n / 2).max(1),
        _ => share.len(),
    }
}

/// Waits until both engines' threads have all started with `expected` masks: `sizes[i]`
/// threads for engine i where given, else at least one.
fn wait_for_masks(kiln: &KilnProcess, expected: [&[usize]; 2], sizes: [Option<usize>; 2]) {
    wait_for("every engine thread to run on its share", || {
        for engine in 0..2 {
            let threads = engine_threads(kiln, engine);
            let size_ok = sizes[engine].map_or(!threads.is_empty(), |n| threads.len() == n);
            if !size_ok || threads.iter().any(|(_, mask)| mask != expected[engine]) {
                return Err(format!(
                    "engine {engine}: want {:?} threads on {:?}, got {threads:?}",
                    sizes[engine], expected[engine]
                ));
            }
        }
        Ok(())
    });
}

#[test]
fn each_engines_threads_run_on_its_share_of_the_cpus() {
    let kiln = Launch::default().arg("-dp", "2").start();
    let status = std::fs::read_to_string(format!("/proc/{}/status", kiln.pid())).expect("status");
    let allowed = allowed_list(&status);
    let shares = expected_shares(&allowed);
    wait_for_masks(
        &kiln,
        [&shares[0].1, &shares[1].1],
        [Some(pool_size(&shares[0].1)), Some(pool_size(&shares[1].1))],
    );

    let info: Value = kiln.get_json("/get_server_info");
    for (rank, (node, cpus)) in shares.iter().enumerate() {
        let entry = &info["dp_ranks"][rank];
        assert_eq!(entry["numa_node"], *node, "{info}");
        let listed = cpus_listed(entry);
        assert_eq!(&listed, cpus, "{info}");
    }
    let logs = kiln.logs();
    assert!(
        logs.lines().filter(|l| l.contains("engine threads pinned")).count() == 2,
        "{logs}"
    );
}

fn cpus_listed(rank: &Value) -> Vec<usize> {
    cpus(rank["cpus"].as_str().unwrap_or_else(|| panic!("cpus listed: {rank}")))
}

#[test]
fn affinity_off_leaves_every_engine_thread_on_the_whole_mask() {
    let kiln = Launch::default().arg("-dp", "2").arg("--cpu-affinity", "off").start();
    let status = std::fs::read_to_string(format!("/proc/{}/status", kiln.pid())).expect("status");
    let allowed = allowed_list(&status);
    // Unpinned pools take an even share of rayon's global pool, whose size follows the CPU
    // quota as well as the mask, so only their masks are checked.
    wait_for_masks(&kiln, [&allowed, &allowed], [None, None]);
    let info: Value = kiln.get_json("/get_server_info");
    assert!(
        info["dp_ranks"][0]["cpus"].is_null() && info["dp_ranks"][1]["numa_node"].is_null(),
        "{info}"
    );
}
