//! The generated source of a graph: every kernel its language nodes and
//! modifiers run, in execution order, in C or CUDA C, under one copy of the
//! helpers (Devito's `print(op)`; the CLI's `watershed run CASE --emit c`).
//! What the listing shows is what the back ends compile: the same emitter,
//! the same lowering (from the kernel cache).

use crate::error::GraphResult;
use crate::expression::LanguageExpression;
use crate::graph::ExpressionGraph;
use crate::plan::GraphPlan;
use std::fmt::Write;
use watershed_fields::{FieldLayout, IndexBox};
use watershed_operators::codegen::{emit, kernel_source};
use watershed_operators::ir::Node;
use watershed_operators::vmath::Dialect;

/// A kernel's root with the heading comment that says where it comes from.
pub(crate) type HeadedKernel = (String, std::sync::Arc<Node>);

/// Longest expression text quoted in a kernel's heading comment.
const QUOTED: usize = 160;

impl ExpressionGraph {
    /// The source of every kernel of this graph, in execution order, in
    /// `dialect`: a heading comment per kernel (node, fused producers,
    /// target, region, expression) and the function the back end compiles.
    /// A kernel the emitter does not support says so and why (it runs on
    /// the row interpreter); a native node says it has no generated source.
    ///
    /// ```
    /// use watershed_exprgraph::{ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
    /// use watershed_fields::{CellCentre, Grid, LocationKind};
    /// use watershed_operators::{exp, vmath::Dialect};
    /// let (phi, rhs) = (Tag::none("phi"), Tag::none("rhs"));
    /// let mut factory = Factory::new();
    /// factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
    /// let p = phi.clone();
    /// factory.register(LanguageExpression::new::<CellCentre>(rhs.clone(), move |s| {
    ///     exp(s.field::<CellCentre>(&p)) * 2.0
    /// }))?;
    /// let patch = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?.whole_domain(1);
    /// let graph = ExpressionGraph::build(&factory, &[rhs], &patch, &GraphOptions::default())?;
    /// let c = graph.generated_source(Dialect::C)?;
    /// assert!(c.contains("long long k0_rhs(") && c.contains("ws_exp("));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn generated_source(&self, dialect: Dialect) -> GraphResult<String> {
        let language = match dialect {
            Dialect::C => "C",
            Dialect::Cuda => "CUDA C",
        };
        let mut functions = String::new();
        let mut count = 0;
        for &n in &self.plan.order {
            let Some(kernels) = self.plan.node_kernels(n)? else {
                let _ = writeln!(
                    functions,
                    "\n/* node `{}`: native Rust code, no generated source */",
                    self.plan.nodes[n].name
                );
                continue;
            };
            let node = &self.plan.nodes[n];
            for (heading, root) in kernels {
                let name = format!("k{count}_{}", identifier(&node.name));
                count += 1;
                let _ = writeln!(functions, "\n/* {heading}\n   = {} */", quoted(&root));
                match kernel_source(&root, &self.plan.patch, dialect, &name) {
                    Ok(function) => functions.push_str(&function),
                    Err(why) => {
                        let _ = writeln!(functions, "/* not generated: {why} */");
                    }
                }
            }
        }
        Ok(format!(
            "/* Watershed: the {count} kernel(s) of this graph in {language}, in execution order */\n{}{functions}",
            emit::prelude(dialect)
        ))
    }
}

impl GraphPlan {
    /// Every kernel node `n` runs, each under a heading comment, in the
    /// order it runs them; `None` for a native node (no generated source).
    pub(crate) fn node_kernels(&self, n: usize) -> GraphResult<Option<Vec<HeadedKernel>>> {
        let node = &self.nodes[n];
        let mut kernels: Vec<HeadedKernel> = Vec::new();
        let region = node.region.map_or_else(|| "its interior".into(), describe);
        if let Some(expression) = node.form.language() {
            let mut heading = format!(
                "node `{}`: {} over {region}",
                node.name,
                expression.target()
            );
            if !node.fused_from.is_empty() {
                let _ = write!(heading, " (fused from {})", node.fused_from.join(", "));
            }
            self.language_kernels(heading, &node.name, expression, &mut kernels)?;
        } else if let Some(group) = node.form.group() {
            for (m, expression) in group.members().enumerate() {
                let heading = format!(
                    "node `{}`, member {} of {} (one loop nest): {} over {region}",
                    node.name,
                    m + 1,
                    group.len(),
                    expression.target()
                );
                self.language_kernels(heading, &node.name, expression, &mut kernels)?;
            }
        } else if let Some(modifier) = node.form.modifier() {
            let layout = FieldLayout::new(&self.patch, self.fields[node.outputs[0]].location);
            let assignments = modifier.assignments(&layout)?;
            for (k, (region, root)) in assignments.iter().enumerate() {
                let heading = format!(
                    "modifier `{}`, assignment {} of {} over {}",
                    node.name,
                    k + 1,
                    assignments.len(),
                    describe(*region)
                );
                kernels.push((heading, root.clone()));
            }
        } else {
            return Ok(None);
        }
        Ok(Some(kernels))
    }

    /// The kernels of one language expression: its own (under `heading`)
    /// and those of the modifiers fused into it.
    fn language_kernels(
        &self,
        heading: String,
        node: &str,
        expression: &LanguageExpression,
        kernels: &mut Vec<HeadedKernel>,
    ) -> GraphResult<()> {
        let target = expression.target();
        kernels.push((heading, expression.root().clone()));
        let layout = FieldLayout::new(&self.patch, expression.location());
        let then = expression.fused_assignments(&layout)?;
        for (k, (region, root)) in then.iter().enumerate() {
            let heading = format!(
                "node `{node}`, fused modifier assignment {} of {}: {target} over {}",
                k + 1,
                then.len(),
                describe(*region)
            );
            kernels.push((heading, root.clone()));
        }
        Ok(())
    }
}

/// `[lo, hi)` of a box.
fn describe(region: IndexBox) -> String {
    format!("[{:?}, {:?})", region.lo, region.hi)
}

/// A C identifier made of `name`'s letters, digits and underscores.
fn identifier(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect::<String>()
        .trim_matches('_')
        .to_string()
}

/// The expression's text, shortened to [`QUOTED`] characters, with no
/// comment terminator in it.
fn quoted(root: &Node) -> String {
    let text = root.to_string().replace("*/", "* /");
    match text.char_indices().nth(QUOTED) {
        Some((cut, _)) => format!("{} ...", &text[..cut]),
        None => text,
    }
}
