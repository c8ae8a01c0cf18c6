//! Where each engine of a data-parallel CPU server runs: one engine per NUMA node where there
//! are several (engine i on node i mod nodes), a node's allowed CPUs split between its
//! engines, and each engine's thread pool pinned to its share (by `executor::pooled`).

pub mod affinity;
pub mod cpulist;
pub mod split;
pub mod topology;

use std::path::Path;

pub use split::CpuShare;

use crate::config::CpuAffinity;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("not a CPU list: {0:?}")]
    CpuList(String),
    #[error("reading {0}: {1}")]
    Sysfs(String, #[source] std::io::Error),
    #[error("reading the CPUs this process may use: {0}")]
    Affinity(#[source] std::io::Error),
}

/// Each engine's CPUs, from this machine's NUMA nodes and this process's allowed CPUs;
/// `None` for an engine whose threads run unpinned: a single engine (it runs on the global
/// pool, over every allowed CPU), `--cpu-affinity off`, or the CUDA build (its engines run on
/// their devices; the devices' NUMA nodes are not read).
pub fn place_engines(engines: usize, affinity: CpuAffinity) -> Result<Vec<Option<CpuShare>>, PlacementError> {
    if !pins(engines, affinity) {
        return Ok(vec![None; engines]);
    }
    let allowed = affinity::allowed_cpus().map_err(PlacementError::Affinity)?;
    place_engines_on(Path::new(topology::SYSFS_NODES), &allowed, engines)
}

/// [`place_engines`] with pinning on, over the node folders under `root` and the CPUs `allowed`.
pub fn place_engines_on(
    root: &Path,
    allowed: &[usize],
    engines: usize,
) -> Result<Vec<Option<CpuShare>>, PlacementError> {
    let nodes = topology::allowed_nodes(root, allowed)?;
    if nodes.iter().all(|n| n.cpus.is_empty()) {
        return Ok(vec![None; engines]);
    }
    Ok(split::split(&nodes, engines).into_iter().map(Some).collect())
}

fn pins(engines: usize, affinity: CpuAffinity) -> bool {
    engines > 1 && affinity == CpuAffinity::Auto && !cfg!(feature = "cuda")
}

#[cfg(test)]
mod tests {
    use super::topology::tests::fake_sysfs;
    use super::*;

    #[test]
    fn one_engine_or_affinity_off_pins_nothing() {
        assert_eq!(place_engines(1, CpuAffinity::Auto).unwrap(), vec![None]);
        assert_eq!(place_engines(2, CpuAffinity::Off).unwrap(), vec![None, None]);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn several_engines_on_this_machine_split_its_allowed_cpus() {
        let allowed = affinity::allowed_cpus().unwrap();
        let shares = place_engines(2, CpuAffinity::Auto).unwrap();
        let shares: Vec<CpuShare> = shares.into_iter().map(|s| s.expect("pinned")).collect();
        let mut used: Vec<usize> = shares.iter().flat_map(|s| s.cpus.clone()).collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, allowed, "{shares:?}");
    }

    #[test]
    fn a_fake_two_node_machine_gets_an_engine_per_node() {
        let root = fake_sysfs(&["0-1", "2-3"]);
        let shares = place_engines_on(root.path(), &[0, 1, 2, 3], 2).unwrap();
        assert_eq!(
            shares,
            vec![
                Some(CpuShare {
                    node: 0,
                    cpus: vec![0, 1]
                }),
                Some(CpuShare {
                    node: 1,
                    cpus: vec![2, 3]
                }),
            ]
        );
    }
}
