//! The solvers as users run them, measured side by side in one run:
//!
//! * the ExprLib test of the thesis (N PDEs, forward Euler) through a
//!   hand-built fused graph and through `TransportSolver` (the same
//!   equations: diffusion, independent or coupled sources, the coupled
//!   sum written out per equation or shared), in million
//!   PDE-point updates per second, 1 and 2 threads. Two hand-built graphs:
//!   one that only computes the updates (the thesis' benchmark graph),
//!   and one that takes real time steps as the solver does (periodic
//!   ghosts filled in the graph, then phi and phi_next rotated);
//! * the lid-driven cavity (`IncompressibleFlow`, Re 100): time per step
//!   with forward Euler at 64^2 and 128^2 and SSP-RK3 at 128^2;
//! * one multigrid V-cycle (as the CG preconditioner runs it) at 128^2 and
//!   256^2, through `Multigrid::solve` with one iteration.
//!
//! Every figure is the median of repeated timings after a warm-up. The
//! three ExprLib runs are interleaved: each round steps the graph, the
//! stepping graph and the solver once each, in rotating order.
//! Environment: `WATERSHED_SECTIONS` (comma-separated subset of
//! `exprlib,cavity,multigrid`, default all), `WATERSHED_PDES` (default 30), `WATERSHED_CELLS` (ExprLib
//! cells per side, default 32 and 64), `WATERSHED_VARIANTS` (subset of
//! `diffusion,independent,coupled,coupled-shared`, default the first three), `WATERSHED_THREADS` (default `1,2`), `WATERSHED_STEPS` (timed ExprLib steps,
//! rounds, default 15 at 64^3 and 30 below), `WATERSHED_GAMMA` (`field`, the
//! default, or a constant diffusivity such as the anchor's 0.1),
//! `WATERSHED_NODE_TIMES` (set: after each ExprLib row, the time the three
//! spent in their graphs' nodes and their slowest nodes). Run:
//! `cargo bench -p watershed-cases --bench solvers`.

use std::time::Instant;
use watershed_cases::cases::scalability::{
    ExprLibDiffusivity, VARIANTS, exprlib_graph_with, exprlib_solver_builder, gamma, gamma_value,
    initial_phi, phi, phi_next,
};
use watershed_exprgraph::ExecutionMode;
use watershed_fields::{CellCentre, Device, Grid, SpatialField};
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, IncompressibleFlowBuilder, Multigrid, MultigridOptions,
    TimeIntegrator,
};

const DT: f64 = 1e-6;

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn mode(threads: usize) -> ExecutionMode {
    if threads <= 1 {
        ExecutionMode::Serial
    } else {
        ExecutionMode::Threaded(threads)
    }
}

/// The ExprLib diffusivity: `WATERSHED_GAMMA=field` (default) or a
/// number, the constant of the Devito anchor (`benches/anchor.sh` sets 0.1).
fn diffusivity() -> ExprLibDiffusivity {
    match std::env::var("WATERSHED_GAMMA").ok().as_deref() {
        None | Some("") | Some("field") => ExprLibDiffusivity::Field,
        Some(text) => ExprLibDiffusivity::Constant(
            text.parse()
                .expect("WATERSHED_GAMMA is `field` or a number"),
        ),
    }
}

fn transport_solver(
    cells: usize,
    pdes: usize,
    variant: &str,
    threads: usize,
    diffusivity: ExprLibDiffusivity,
) -> watershed_solvers::TransportSolver {
    let grid = Grid::new([cells; 3], [1.0; 3], [0.0; 3])
        .expect("grid")
        .with_periodic([true; 3]);
    let builder = exprlib_solver_builder(&grid.whole_domain(1), pdes, variant, diffusivity)
        .expect("ExprLib equations");
    let field = diffusivity == ExprLibDiffusivity::Field;
    let solver = builder
        .integrator(TimeIntegrator::ForwardEuler)
        .mode(mode(threads))
        .build()
        .expect("solver");
    if field {
        solver
            .graph()
            .with_field_mut::<CellCentre, _>(&gamma(), |f| {
                let layout = f.layout().clone();
                let values = f.values_mut().expect("cpu");
                for index in layout.allocated() {
                    values[layout.linear_index(index)] = gamma_value(layout.coordinate(index));
                }
            })
            .expect("gamma");
    }
    for i in 0..pdes {
        solver
            .set_initial_condition(&format!("phi{i}"), initial_phi(i))
            .expect("initial condition");
    }
    solver
}

fn exprlib(pdes: usize, cells_list: &[usize]) {
    let diffusivity = diffusivity();
    println!(
        "## ExprLib test: hand-built fused graph vs TransportSolver (forward Euler, {pdes} PDEs, Gamma {})",
        match diffusivity {
            ExprLibDiffusivity::Field => "field".to_string(),
            ExprLibDiffusivity::Constant(value) => format!("= {value}"),
        }
    );
    println!(
        "| variant | cells | threads | graph ms/step | stepping graph ms/step | solver ms/step | graph Mpts/s | solver Mpts/s | solver / graph | solver / stepping graph |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let variants = std::env::var("WATERSHED_VARIANTS")
        .unwrap_or_else(|_| "diffusion,independent,coupled".into());
    let threads_list: Vec<usize> = std::env::var("WATERSHED_THREADS")
        .ok()
        .map(|t| t.split(',').filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    for &cells in cells_list {
        let steps = std::env::var("WATERSHED_STEPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if cells >= 64 { 15 } else { 30 });
        for variant in VARIANTS {
            if !variants.split(',').any(|v| v == variant) {
                continue;
            }
            for &threads in &threads_list {
                let grid = Grid::new([cells; 3], [1.0; 3], [0.0; 3])
                    .expect("grid")
                    .with_periodic([true; 3]);
                let patch = grid.whole_domain(1);
                let graph = exprlib_graph_with(&patch, pdes, variant, DT, diffusivity, false)
                    .expect("graph");
                let stepping = exprlib_graph_with(&patch, pdes, variant, DT, diffusivity, true)
                    .expect("stepping graph");
                let mut solver = transport_solver(cells, pdes, variant, threads, diffusivity);
                let run_graph = || {
                    graph.execute(mode(threads)).expect("execute");
                };
                let step_graph = || {
                    stepping.execute(mode(threads)).expect("execute");
                    for i in 0..pdes {
                        stepping
                            .rotate_fields(&[phi(i), phi_next(i)])
                            .expect("rotate");
                    }
                };
                let mut step_solver = || solver.step(DT).expect("step");
                // The three run in turn, one step each per round (the
                // order rotating), so that the VM's drifts reach all three
                // alike; the first round is a warm-up.
                let mut times = [Vec::new(), Vec::new(), Vec::new()];
                for round in 0..=steps {
                    for k in 0..3 {
                        let which = (round + k) % 3;
                        let start = Instant::now();
                        match which {
                            0 => run_graph(),
                            1 => step_graph(),
                            _ => step_solver(),
                        }
                        if round > 0 {
                            times[which].push(start.elapsed().as_secs_f64());
                        }
                    }
                }
                let [graph_time, stepping_time, solver_time] = times.map(median);
                let points = (pdes * cells * cells * cells) as f64 / 1e6;
                println!(
                    "| {variant} | {cells}^3 | {threads} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
                    graph_time * 1e3,
                    stepping_time * 1e3,
                    solver_time * 1e3,
                    points / graph_time,
                    points / solver_time,
                    graph_time / solver_time,
                    stepping_time / solver_time
                );
                if std::env::var_os("WATERSHED_NODE_TIMES").is_some() {
                    for (name, table) in [
                        ("graph", graph.timing_table()),
                        ("stepping graph", stepping.timing_table()),
                        ("solver", solver.graph().timing_table()),
                    ] {
                        let total: f64 = table.0.iter().map(|row| row.total.as_secs_f64()).sum();
                        let calls = table.0.iter().map(|row| row.calls).max().unwrap_or(0);
                        println!(
                            "{name}: {} nodes, {:.2} ms per execution in nodes; slowest:",
                            table.0.len(),
                            total * 1e3 / calls.max(1) as f64
                        );
                        for row in table.0.iter().take(4) {
                            println!(
                                "  {} {} calls, {:.3} ms/call",
                                row.name,
                                row.calls,
                                row.mean.as_secs_f64() * 1e3
                            );
                        }
                    }
                }
            }
        }
    }
}

fn cavity(cells: usize, integrator: TimeIntegrator, steps: usize) -> (f64, usize) {
    let grid = Grid::new([cells, cells, 1], [1.0; 3], [0.0; 3]).expect("grid");
    let wall = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let mut flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
        .velocity_conditions(
            0,
            wall.clone().with(
                watershed_operators::Side::PLUS_Y,
                BoundaryCondition::Dirichlet(1.0),
            ),
        )
        .velocity_conditions(1, wall)
        .integrator(integrator)
        .build()
        .expect("flow");
    let dt = flow.stable_time_step(0.5, 0.2).expect("dt");
    for _ in 0..3 {
        flow.step(dt).expect("warm-up");
    }
    let mut iterations = 0;
    let time = median(
        (0..steps)
            .map(|_| {
                let start = Instant::now();
                flow.step(dt).expect("step");
                iterations = flow.last_projection().iterations;
                start.elapsed().as_secs_f64()
            })
            .collect(),
    );
    (time, iterations)
}

fn v_cycle(cells: usize) -> f64 {
    let grid = Grid::new([cells, cells, 1], [1.0 / cells as f64; 3], [0.0; 3]).expect("grid");
    let patch = grid.whole_domain(1);
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let options = MultigridOptions {
        relative_tolerance: 1e-300,
        max_iterations: 1,
        ..Default::default()
    };
    let mut solver = Multigrid::new(&patch, walls.clone(), options).expect("multigrid");
    let mut rhs = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).expect("b");
    let layout = rhs.layout().clone();
    let values = rhs.values_mut().expect("cpu");
    for index in layout.allocated() {
        let [x, y, _] = layout.coordinate(index);
        values[layout.linear_index(index)] = (3.0 * x).sin() * (2.0 * y).cos();
    }
    let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).expect("x");
    // One V-cycle plus the residual norms before and after it (the solve
    // gives up after one iteration; its error is expected and ignored).
    let mut run = || {
        x.fill(0.0).expect("fill");
        let start = Instant::now();
        let _ = solver.solve(&rhs, &mut x);
        start.elapsed().as_secs_f64()
    };
    run();
    median((0..15).map(|_| run()).collect())
}

fn main() {
    let pdes: usize = std::env::var("WATERSHED_PDES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let cells: Vec<usize> = std::env::var("WATERSHED_CELLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|c| vec![c])
        .unwrap_or_else(|| vec![32, 64]);
    let sections =
        std::env::var("WATERSHED_SECTIONS").unwrap_or_else(|_| "exprlib,cavity,multigrid".into());
    let wanted = |name: &str| sections.split(',').any(|s| s.trim() == name);
    if wanted("exprlib") {
        exprlib(pdes, &cells);
    }
    if wanted("cavity") {
        cavity_table();
    }
    if wanted("multigrid") {
        multigrid_table();
    }
}

fn cavity_table() {
    println!();
    println!("## Lid-driven cavity, Re 100 (one thread; median of steps after 3 warm-up steps)");
    println!("| integrator | cells | ms/step | CG iterations (last stage) |");
    println!("| --- | --- | --- | --- |");
    for (name, integrator, cells, steps) in [
        ("forward Euler", TimeIntegrator::ForwardEuler, 64, 41),
        ("forward Euler", TimeIntegrator::ForwardEuler, 128, 21),
        ("SSP-RK3", TimeIntegrator::SspRk3, 128, 11),
    ] {
        let (time, iterations) = cavity(cells, integrator, steps);
        println!("| {name} | {cells}^2 | {:.2} | {iterations} |", time * 1e3);
    }
}

fn multigrid_table() {
    println!();
    println!("## Multigrid V(3,3) cycle with its residual norms (one thread)");
    println!("| cells | ms per V-cycle |");
    println!("| --- | --- |");
    for cells in [128, 256] {
        println!("| {cells}^2 | {:.3} |", v_cycle(cells) * 1e3);
    }
}
