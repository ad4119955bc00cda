//! What a split execution (`execute_interior` + `execute_rim`, see
//! `watershed_exprgraph::overlap`) costs against one whole execution, for
//! a variable-coefficient diffusion update on one patch, with nothing
//! stale (one box per half), the y and z sides stale (a layout that does
//! not split x: four rim slabs) and every side stale (six, two of them
//! one point wide along x). Run with
//! `cargo run --release -p watershed-exprgraph --example split_cost`;
//! `scripts/bench-mpi.sh` runs it. Each figure is the mean over 3,000
//! executions after a warm-up, in one run.

use std::time::Instant;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::{CellCentre, Grid, LocationKind};
use watershed_operators::{div, grad, interp};

/// Mean microseconds per call of `f` over `n` calls.
fn mean_us(n: usize, mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        f();
    }
    started.elapsed().as_secs_f64() / n as f64 * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (phi, gamma, next) = (Tag::none("phi"), Tag::none("gamma"), Tag::none("next"));
    let mut factory = Factory::new();
    factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
    factory.placeholder(gamma.clone(), LocationKind::CellCentre)?;
    let (p, g) = (phi.clone(), gamma.clone());
    factory.register(LanguageExpression::new::<CellCentre>(
        next.clone(),
        move |s| {
            let q = s.field::<CellCentre>(&p);
            q.clone() + div(interp(s.field::<CellCentre>(&g)) * grad(q)) * 0.01
        },
    ))?;
    println!(
        "patch cells | whole | split, nothing stale | y, z stale | all sides stale (us per execution)"
    );
    for cells in [[32usize, 16, 16], [64, 64, 32]] {
        let patch = Grid::new(cells, [1.0; 3], [0.0; 3])?.whole_domain(1);
        let graph = ExpressionGraph::build(
            &factory,
            std::slice::from_ref(&next),
            &patch,
            &GraphOptions::default(),
        )?;
        graph.with_field_mut::<CellCentre, _>(&phi, |f| f.fill(1.0))??;
        graph.with_field_mut::<CellCentre, _>(&gamma, |f| f.fill(1.0))??;
        let exchanged = std::slice::from_ref(&phi);
        let plans = [
            graph.overlap_plan(&[])?,
            graph.overlap_plan_with_sides(exchanged, [[false; 2], [true; 2], [true; 2]])?,
            graph.overlap_plan(exchanged)?,
        ];
        let mode = ExecutionMode::Serial;
        let n = 3000;
        let mut failed = None;
        let mut whole_run = || {
            if let Err(e) = graph.execute(mode) {
                failed = Some(e);
            }
        };
        whole_run();
        let whole = mean_us(n, whole_run);
        let mut split = Vec::new();
        for plan in &plans {
            let mut halves = || {
                if let Err(e) = graph
                    .execute_interior(mode, plan)
                    .and_then(|()| graph.execute_rim(mode, plan))
                {
                    failed = Some(e);
                }
            };
            halves();
            split.push(mean_us(n, halves));
        }
        if let Some(error) = failed {
            return Err(error.into());
        }
        println!(
            "{cells:?} | {whole:.1} | {:.1} | {:.1} | {:.1}",
            split[0], split[1], split[2]
        );
    }
    Ok(())
}
