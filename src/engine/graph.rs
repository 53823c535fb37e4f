//! The dependency graph between resources, by index into the manifest's resource list.

use std::collections::{BTreeSet, VecDeque};

use petgraph::algo::toposort;
use petgraph::graph::{DiGraph, NodeIndex};

/// Edges point from a dependency to its dependents; both directions are kept for lookups.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyGraph {
    dependencies: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    order: Vec<usize>,
}

impl DependencyGraph {
    /// Builds the graph of `count` resources from `(dependent, dependency)` pairs. On a cycle,
    /// returns one cycle as indices `[a, b, …, a]`, each depending on the next.
    pub fn build(count: usize, edges: &[(usize, usize)]) -> Result<Self, Vec<usize>> {
        let mut dependencies = vec![BTreeSet::new(); count];
        let mut dependents = vec![BTreeSet::new(); count];
        for &(dependent, dependency) in edges {
            dependencies[dependent].insert(dependency);
            dependents[dependency].insert(dependent);
        }
        let dependencies: Vec<Vec<usize>> = dependencies.into_iter().map(Vec::from_iter).collect();
        let dependents: Vec<Vec<usize>> = dependents.into_iter().map(Vec::from_iter).collect();

        let mut graph = DiGraph::<usize, ()>::with_capacity(count, edges.len());
        let nodes: Vec<NodeIndex> = (0..count).map(|i| graph.add_node(i)).collect();
        for (dependency, users) in dependents.iter().enumerate() {
            for &user in users {
                graph.add_edge(nodes[dependency], nodes[user], ());
            }
        }
        match toposort(&graph, None) {
            Ok(sorted) => Ok(Self { dependencies, dependents, order: sorted.iter().map(|n| graph[*n]).collect() }),
            Err(cycle) => Err(find_cycle(&dependencies, graph[cycle.node_id()])),
        }
    }

    pub fn len(&self) -> usize {
        self.dependencies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dependencies.is_empty()
    }

    /// Direct dependencies of `i`.
    pub fn dependencies(&self, i: usize) -> &[usize] {
        &self.dependencies[i]
    }

    /// Direct dependents of `i`.
    pub fn dependents(&self, i: usize) -> &[usize] {
        &self.dependents[i]
    }

    /// Every resource after all of its dependencies.
    pub fn topological(&self) -> &[usize] {
        &self.order
    }

    /// Everything that depends on `i`, directly or not, in topological order.
    pub fn transitive_dependents(&self, i: usize) -> Vec<usize> {
        let mut seen = vec![false; self.len()];
        let mut queue = VecDeque::from([i]);
        while let Some(n) = queue.pop_front() {
            for &d in &self.dependents[n] {
                if !std::mem::replace(&mut seen[d], true) {
                    queue.push_back(d);
                }
            }
        }
        self.order.iter().copied().filter(|&n| seen[n]).collect()
    }
}

/// The shortest cycle through `start`, following "depends on" edges: `[start, …, start]`.
fn find_cycle(dependencies: &[Vec<usize>], start: usize) -> Vec<usize> {
    let mut parent: Vec<Option<usize>> = vec![None; dependencies.len()];
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for &d in &dependencies[n] {
            if d == start {
                // Walk back from `n` to `start`, then read it forwards.
                let mut path = vec![start];
                let mut cur = n;
                while cur != start {
                    path.push(cur);
                    cur = parent[cur].expect("every visited node but the start has a parent");
                }
                path.push(start);
                path.reverse();
                return rotate_to_smallest(path);
            }
            if d != start && parent[d].is_none() {
                parent[d] = Some(n);
                queue.push_back(d);
            }
        }
    }
    unreachable!("toposort reported a cycle through {start}, so a path back to it exists")
}

/// The same cycle, starting (and ending) at its smallest index: stable messages whatever node
/// the sort stumbled on.
fn rotate_to_smallest(mut cycle: Vec<usize>) -> Vec<usize> {
    cycle.pop();
    let first = cycle.iter().enumerate().min_by_key(|(_, n)| **n).map_or(0, |(i, _)| i);
    cycle.rotate_left(first);
    cycle.push(cycle[0]);
    cycle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_follows_dependencies() {
        // 0 <- 1 <- 2, 3 independent, 2 also depends on 3.
        let g = DependencyGraph::build(4, &[(1, 0), (2, 1), (2, 3)]).unwrap();
        let pos = |n| g.topological().iter().position(|&x| x == n).unwrap();
        assert!(pos(0) < pos(1) && pos(1) < pos(2) && pos(3) < pos(2));
        assert_eq!(g.transitive_dependents(0), vec![1, 2]);
        assert_eq!(g.dependencies(2), &[1, 3]);
    }

    #[test]
    fn cycles_are_reported_in_dependency_order() {
        // a(0) depends on b(1), b depends on c(2), c depends on a.
        let cycle = DependencyGraph::build(3, &[(0, 1), (1, 2), (2, 0)]).unwrap_err();
        assert_eq!(cycle, vec![0, 1, 2, 0]);
    }

    #[test]
    fn a_self_dependency_is_a_cycle() {
        assert_eq!(DependencyGraph::build(2, &[(1, 1)]).unwrap_err(), vec![1, 1]);
    }

    #[test]
    fn a_two_cycle_beside_a_dag() {
        let cycle = DependencyGraph::build(4, &[(1, 0), (2, 3), (3, 2)]).unwrap_err();
        assert_eq!(cycle, vec![2, 3, 2]);
    }
}
