//! Critical-path priorities, and the serial plan order.
//!
//! A node's priority is the cost of the longest path from it to a sink,
//! itself included. Starting the ready node with the highest priority first
//! keeps long chains moving while short branches fill idle threads: that is
//! what the threaded scheduler does.
//!
//! The serial *plan order* is different: it is depth-first (each sink right
//! after what it needs, dependencies in priority order), so that an
//! intermediate is consumed soon after it is produced. For N independent
//! equations this keeps one equation's fluxes alive at a time, where a
//! breadth-first (critical-path) order would keep all N equations' fluxes.
//! The memory plan, serial execution and the memory budget use it.

use std::cmp::Ordering;

/// Longest path (sum of `cost`) from each node to a sink, itself included.
pub fn priorities(children: &[Vec<usize>], cost: &[f64]) -> Vec<f64> {
    let n = children.len();
    let mut priority = vec![f64::NAN; n];
    // Iterative post-order DFS (graphs can be deep chains).
    for start in 0..n {
        if !priority[start].is_nan() {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if *next < children[node].len() {
                let child = children[node][*next];
                *next += 1;
                if priority[child].is_nan() {
                    stack.push((child, 0));
                }
            } else {
                let longest = children[node]
                    .iter()
                    .map(|&c| priority[c])
                    .fold(0.0, f64::max);
                priority[node] = cost[node] + longest;
                stack.pop();
            }
        }
    }
    priority
}

/// A ready node in a priority queue: highest priority first, then lowest index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ready {
    pub priority: f64,
    pub node: usize,
}

impl Eq for Ready {}

impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .total_cmp(&other.priority)
            .then_with(|| other.node.cmp(&self.node))
    }
}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The serial plan order: a depth-first post-order from the sinks (in index
/// order), visiting each node's parents by decreasing priority.
pub fn plan_order(parents: &[Vec<usize>], children: &[Vec<usize>], priority: &[f64]) -> Vec<usize> {
    let n = parents.len();
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut sorted_parents: Vec<Vec<usize>> = parents.to_vec();
    for list in &mut sorted_parents {
        list.sort_by(|&a, &b| priority[b].total_cmp(&priority[a]).then(a.cmp(&b)));
    }
    for sink in (0..n).filter(|&s| children[s].is_empty()) {
        if visited[sink] {
            continue;
        }
        visited[sink] = true;
        let mut stack = vec![(sink, 0usize)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&parent) = sorted_parents[node].get(*next) {
                *next += 1;
                if !visited[parent] {
                    visited[parent] = true;
                    stack.push((parent, 0));
                }
            } else {
                order.push(node);
                stack.pop();
            }
        }
    }
    order
}
