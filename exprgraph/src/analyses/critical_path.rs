//! Critical-path priorities and the serial plan order.
//!
//! A node's priority is the cost of the longest path from it to a sink,
//! itself included. Starting the ready node with the highest priority first
//! keeps long chains moving while short branches fill idle threads.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

/// The order a single thread runs the nodes in: repeatedly the ready node of
/// highest priority.
pub fn list_order(parents: &[Vec<usize>], children: &[Vec<usize>], priority: &[f64]) -> Vec<usize> {
    let mut pending: Vec<usize> = parents.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Ready> = (0..parents.len())
        .filter(|&n| pending[n] == 0)
        .map(|node| Ready {
            priority: priority[node],
            node,
        })
        .collect();
    let mut order = Vec::with_capacity(parents.len());
    while let Some(Ready { node, .. }) = ready.pop() {
        order.push(node);
        for &child in &children[node] {
            pending[child] -= 1;
            if pending[child] == 0 {
                ready.push(Ready {
                    priority: priority[child],
                    node: child,
                });
            }
        }
    }
    order
}
