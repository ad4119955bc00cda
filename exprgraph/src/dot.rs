//! The graph in Graphviz DOT: the execution graph (nodes by target, copies
//! between devices) and the dependency graph of the quantities.

use crate::expression::ExpressionKind;
use crate::graph::ExpressionGraph;
use crate::node::Target;
use std::fmt::Write;

impl ExpressionGraph {
    /// The execution graph in Graphviz DOT: one node per expression,
    /// labelled with its name and the tags it computes, filled by target
    /// (CPU light blue, GPUs green, khaki, pink, lavender), boxes for
    /// language expressions,
    /// ellipses for native ones, diamonds for modifiers, hexagons for
    /// reductions (an edge to each node reading their parameter); placeholders are
    /// grey notes; fused nodes have a double border and list the
    /// expressions inlined into them. Copies between devices
    /// ([`crate::placement::transfers`]) are dashed red edges from the
    /// writer (or placeholder) to each reader, labelled with the field, the
    /// devices and the bytes. A legend cluster explains the shapes.
    /// Render with `dot -Tpng`.
    pub fn to_dot(&self) -> String {
        let mut dot = String::from(
            "digraph watershed {\n  rankdir=BT;\n  node [style=filled, fontname=\"Helvetica\"];\n",
        );
        for (slot, field) in self.plan.fields.iter().enumerate() {
            if field.placeholder {
                let _ = writeln!(
                    dot,
                    "  f{slot} [label=\"{}\", shape=note, fillcolor=grey85];",
                    escape(&field.tag.to_string())
                );
            }
        }
        for (n, node) in self.plan.nodes.iter().enumerate() {
            let mut tags: Vec<String> = node
                .outputs
                .iter()
                .map(|&s| self.plan.fields[s].tag.to_string())
                .collect();
            if let Some(reduction) = node.form.reduction() {
                tags.push(format!(
                    "{:?} into parameter {}",
                    reduction.reduction(),
                    reduction.parameter().name()
                ));
            }
            let shape = match node.form.expression().kind() {
                _ if node.modifier => "diamond",
                ExpressionKind::Language => "box",
                ExpressionKind::Reduction => "hexagon",
                ExpressionKind::Native => "ellipse",
                ExpressionKind::IterativeSolve => "octagon",
            };
            let color = target_colour(node.target);
            if node.fused_from.is_empty() {
                let _ = writeln!(
                    dot,
                    "  n{n} [label=\"{}\\n{}\", shape={shape}, fillcolor={color}];",
                    escape(&node.name),
                    escape(&tags.join(", "))
                );
            } else {
                let _ = writeln!(
                    dot,
                    "  n{n} [label=\"{}\\n{}\\nfused: {}\", shape={shape}, peripheries=2, fillcolor={color}];",
                    escape(&node.name),
                    escape(&tags.join(", ")),
                    escape(&node.fused_from.join(", "))
                );
            }
            for &input in &node.inputs {
                if self.plan.fields[input].placeholder && !node.outputs.contains(&input) {
                    let _ = writeln!(dot, "  f{input} -> n{n};");
                }
            }
        }
        for (n, children) in self.plan.children.iter().enumerate() {
            for c in children {
                let _ = writeln!(dot, "  n{n} -> n{c};");
            }
        }
        // Copies between devices: dashed red edges from the writer (or
        // the placeholder) to each reader, labelled with what moves.
        for transfer in self.device_plan.transfers() {
            let from = match transfer.after_node {
                Some(w) => format!("n{w}"),
                None if self.plan.fields[transfer.slot].placeholder => {
                    format!("f{}", transfer.slot)
                }
                None => "start".to_string(),
            };
            if from == "start" && !dot.contains("  start [") {
                dot.push_str(
                    "  start [label=\"start of the execution\", shape=plaintext, style=\"\"];\n",
                );
            }
            for &reader in &transfer.before_nodes {
                let _ = writeln!(
                    dot,
                    "  {from} -> n{reader} [style=dashed, color=red, fontcolor=red, label=\"{}\\n{} -> {}, {} B\"];",
                    escape(&transfer.field.to_string()),
                    transfer.from,
                    transfer.to,
                    transfer.bytes
                );
            }
        }
        dot.push_str(concat!(
            "  subgraph cluster_legend {\n    label=\"legend\"; fontname=\"Helvetica\";\n",
            "    legend_language [label=\"language expression\", shape=box, fillcolor=lightblue];\n",
            "    legend_fused [label=\"fused expressions\\n(fused: the inlined ones)\", shape=box, peripheries=2, fillcolor=lightblue];\n",
            "    legend_native [label=\"native (CPU-only)\", shape=ellipse, fillcolor=lightblue];\n",
            "    legend_modifier [label=\"modifier\", shape=diamond, fillcolor=lightblue];\n",
            "    legend_reduction [label=\"reduction into a parameter\", shape=hexagon, fillcolor=lightblue];\n",
            "    legend_gpu [label=\"placed on a GPU\\n(GPU 0 green, 1 khaki, 2 pink, 3 lavender)\", shape=box, fillcolor=palegreen];\n",
            "    legend_copy_from [label=\"writer\", shape=box, fillcolor=palegreen];\n",
            "    legend_copy_to [label=\"reader on another device\", shape=ellipse, fillcolor=lightblue];\n",
            "    legend_copy_from -> legend_copy_to [style=dashed, color=red, fontcolor=red, label=\"copy: field,\\nfrom -> to, bytes\"];\n",
            "    legend_placeholder [label=\"placeholder\", shape=note, fillcolor=grey85];\n",
            "  }\n}\n"
        ));
        dot
    }

    /// The dependency graph of the quantities in Graphviz DOT: one node per
    /// field (placeholders grey, persistent fields bold, scratch fields
    /// dashed), an edge from each field an expression reads to each field it
    /// computes, labelled with the expression. Fused fields no longer appear.
    pub fn dependency_dot(&self) -> String {
        let mut dot = String::from(
            "digraph dependencies {\n  rankdir=BT;\n  node [fontname=\"Helvetica\"];\n",
        );
        for (slot, field) in self.plan.fields.iter().enumerate() {
            let style = if field.placeholder {
                "filled\", fillcolor=\"grey85"
            } else if field.persistent {
                "bold"
            } else {
                "dashed"
            };
            let _ = writeln!(
                dot,
                "  f{slot} [label=\"{}\\n{}\", style=\"{style}\"];",
                escape(&field.tag.to_string()),
                field.location
            );
        }
        for node in &self.plan.nodes {
            for &input in &node.inputs {
                for &output in &node.outputs {
                    let _ = writeln!(
                        dot,
                        "  f{input} -> f{output} [label=\"{}\"];",
                        escape(&node.name)
                    );
                }
            }
        }
        dot.push_str("}\n");
        dot
    }
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The DOT fill colour of a node on `target`.
fn target_colour(target: Target) -> &'static str {
    match target {
        Target::Cpu => "lightblue",
        Target::Gpu(k) => ["palegreen", "khaki", "pink", "lavender"][k % 4],
    }
}
