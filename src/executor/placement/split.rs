//! Which CPUs each engine gets: engine i on node i mod nodes, a node's CPUs split into
//! contiguous, even shares between the engines on it.

use super::topology::NumaNode;

/// One engine's CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuShare {
    /// The NUMA node the CPUs are on.
    pub node: usize,
    /// Sorted, never empty.
    pub cpus: Vec<usize>,
}

/// `engines` shares of `nodes` (each with at least one CPU). Engines outnumbering a node's
/// CPUs share them: engine j of that node gets its CPU j mod the node's count.
pub fn split(nodes: &[NumaNode], engines: usize) -> Vec<CpuShare> {
    (0..engines)
        .map(|engine| {
            let node = &nodes[engine % nodes.len()];
            // This engine's place among the node's engines, and how many the node has.
            let rank = engine / nodes.len();
            let on_node = engines / nodes.len() + usize::from(engine % nodes.len() < engines % nodes.len());
            let count = node.cpus.len();
            let cpus = if count >= on_node {
                node.cpus[rank * count / on_node..(rank + 1) * count / on_node].to_vec()
            } else {
                vec![node.cpus[rank % count]]
            };
            CpuShare { node: node.id, cpus }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::topology::{allowed_nodes, tests::fake_sysfs};
    use super::*;

    fn shares(nodes: &[&str], allowed: &[usize], engines: usize) -> Vec<(usize, Vec<usize>)> {
        let root = fake_sysfs(nodes);
        let nodes = allowed_nodes(root.path(), allowed).unwrap();
        split(&nodes, engines).into_iter().map(|s| (s.node, s.cpus)).collect()
    }

    #[test]
    fn two_nodes_take_engines_in_turn_and_split_their_cpus() {
        let all: Vec<usize> = (0..16).collect();
        let two = ["0-3,8-11", "4-7,12-15"];
        assert_eq!(
            shares(&two, &all, 2),
            vec![
                (0, vec![0, 1, 2, 3, 8, 9, 10, 11]),
                (1, vec![4, 5, 6, 7, 12, 13, 14, 15])
            ]
        );
        assert_eq!(
            shares(&two, &all, 4),
            vec![
                (0, vec![0, 1, 2, 3]),
                (1, vec![4, 5, 6, 7]),
                (0, vec![8, 9, 10, 11]),
                (1, vec![12, 13, 14, 15]),
            ]
        );
        // Three engines: node 0 holds two, node 1 one.
        assert_eq!(
            shares(&two, &all, 3),
            vec![
                (0, vec![0, 1, 2, 3]),
                (1, vec![4, 5, 6, 7, 12, 13, 14, 15]),
                (0, vec![8, 9, 10, 11])
            ]
        );
    }

    #[test]
    fn one_node_splits_the_allowed_cpus_evenly() {
        let allowed = [0, 1, 2, 3, 4, 5, 6];
        assert_eq!(
            shares(&["0-7"], &allowed, 3),
            vec![(0, vec![0, 1]), (0, vec![2, 3]), (0, vec![4, 5, 6])]
        );
        assert_eq!(shares(&["0-1"], &[0, 1], 2), vec![(0, vec![0]), (0, vec![1])]);
    }

    #[test]
    fn engines_outnumbering_the_cpus_share_them() {
        assert_eq!(shares(&["0-1"], &[1], 2), vec![(0, vec![1]), (0, vec![1])]);
        assert_eq!(
            shares(&["0-1"], &[0, 1], 3),
            vec![(0, vec![0]), (0, vec![1]), (0, vec![0])]
        );
    }

    #[test]
    fn every_engine_gets_cpus_of_its_node_and_every_cpu_is_used() {
        let nodes = [
            NumaNode {
                id: 0,
                cpus: (0..5).collect(),
            },
            NumaNode {
                id: 3,
                cpus: (5..12).collect(),
            },
        ];
        // From one engine per node up (one engine leaves node 3 idle).
        for engines in 2..=12 {
            let shares = split(&nodes, engines);
            let mut used: Vec<usize> = shares.iter().flat_map(|s| s.cpus.clone()).collect();
            used.sort_unstable();
            // More engines than a node's CPUs share them.
            used.dedup();
            assert_eq!(used, (0..12).collect::<Vec<_>>(), "{engines} engines: {shares:?}");
            for (i, share) in shares.iter().enumerate() {
                let node = &nodes[i % 2];
                assert_eq!(share.node, node.id);
                assert!(share.cpus.iter().all(|c| node.cpus.contains(c)), "{share:?}");
            }
        }
    }
}
