//! The machine's NUMA nodes as sysfs lists them, narrowed to the CPUs this process may run on.

use std::path::Path;

use super::{PlacementError, cpulist};

/// Where Linux lists the NUMA nodes (`node0/cpulist`, ...).
pub const SYSFS_NODES: &str = "/sys/devices/system/node";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    pub id: usize,
    /// Sorted; only CPUs the process is allowed.
    pub cpus: Vec<usize>,
}

/// The nodes under `root` (a `node<N>` folder each, with a `cpulist`) holding CPUs of
/// `allowed`, by id, each with only those CPUs. Without node folders (a kernel built without
/// NUMA, a container hiding them) or with none holding an allowed CPU: one node 0 of `allowed`.
pub fn allowed_nodes(root: &Path, allowed: &[usize]) -> Result<Vec<NumaNode>, PlacementError> {
    let io = |e| PlacementError::Sysfs(root.display().to_string(), e);
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(one_node(allowed)),
        Err(e) => return Err(io(e)),
    };
    let mut nodes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let list = entry.path().join("cpulist");
        let text = std::fs::read_to_string(&list).map_err(|e| PlacementError::Sysfs(list.display().to_string(), e))?;
        let cpus: Vec<usize> = cpulist::parse(&text)?
            .into_iter()
            .filter(|c| allowed.binary_search(c).is_ok())
            .collect();
        if !cpus.is_empty() {
            nodes.push(NumaNode { id, cpus });
        }
    }
    if nodes.is_empty() {
        return Ok(one_node(allowed));
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

fn one_node(allowed: &[usize]) -> Vec<NumaNode> {
    vec![NumaNode {
        id: 0,
        cpus: allowed.to_vec(),
    }]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sysfs node folder in a temporary directory: `nodes[i]` is node i's cpulist.
    pub(crate) fn fake_sysfs(nodes: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        for (id, list) in nodes.iter().enumerate() {
            let node = root.path().join(format!("node{id}"));
            std::fs::create_dir(&node).expect("node dir");
            std::fs::write(node.join("cpulist"), format!("{list}\n")).expect("cpulist");
        }
        // What sysfs has beside the nodes, to be passed over.
        std::fs::write(root.path().join("online"), "0-1\n").expect("online");
        std::fs::create_dir(root.path().join("power")).expect("power");
        root
    }

    #[test]
    fn two_nodes_narrowed_to_the_allowed_cpus() {
        let root = fake_sysfs(&["0-3,8-11", "4-7,12-15"]);
        let allowed: Vec<usize> = (2..16).collect();
        let nodes = allowed_nodes(root.path(), &allowed).unwrap();
        assert_eq!(
            nodes,
            vec![
                NumaNode {
                    id: 0,
                    cpus: vec![2, 3, 8, 9, 10, 11]
                },
                NumaNode {
                    id: 1,
                    cpus: vec![4, 5, 6, 7, 12, 13, 14, 15]
                },
            ]
        );
    }

    #[test]
    fn a_node_without_allowed_cpus_is_left_out() {
        let root = fake_sysfs(&["0-3", "4-7", ""]);
        let nodes = allowed_nodes(root.path(), &[4, 5]).unwrap();
        assert_eq!(
            nodes,
            vec![NumaNode {
                id: 1,
                cpus: vec![4, 5]
            }]
        );
    }

    #[test]
    fn no_node_folders_is_one_node_of_the_allowed_cpus() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("node");
        assert_eq!(
            allowed_nodes(&missing, &[0, 1]).unwrap(),
            vec![NumaNode {
                id: 0,
                cpus: vec![0, 1]
            }]
        );
        assert_eq!(
            allowed_nodes(root.path(), &[0, 1]).unwrap(),
            vec![NumaNode {
                id: 0,
                cpus: vec![0, 1]
            }]
        );
    }

    #[test]
    fn a_corrupt_cpulist_is_an_error_naming_it() {
        let root = fake_sysfs(&["0-x"]);
        let err = allowed_nodes(root.path(), &[0]).unwrap_err().to_string();
        assert!(err.contains("0-x"), "{err}");
    }
}
