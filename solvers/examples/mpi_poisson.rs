//! The multigrid on patches across MPI ranks, checked on every rank: run
//! with `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does). Every rank
//! solves the problems of `tests/patched_multigrid.rs` twice with the same
//! patch layout: alone (one process owning every patch) and spread over
//! the ranks (owning its share). The residual history and every allocated
//! point of the patches it owns must have the same bits, for CG (whose
//! inner products add per-patch sums in patch order) as for V-cycles.
//! Exits 1 naming the rank, problem and point on the first difference
//! (`MPI_Abort` ends every rank).
//!
//! With `--bench N` it times instead (`scripts/bench-mpi.sh`): CG on a
//! triply periodic N^3 box, the whole domain's multigrid on every rank
//! (what a replicated projection costs) against the multigrid on 2 x 1 x 2
//! patches spread over the ranks, with each rank's exchange time.

#[path = "../tests/support/patched_poisson_case.rs"]
mod case;

use case::{Problem, channel, closed_box, floor_box, patch_fields, periodic_box, same_bits};
use mpi::traits::Communicator;
use std::rc::Rc;
use std::time::Instant;
use watershed_fields::Grid;
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::{RankLink, SingleProcess};
use watershed_fields::{GhostWidth, PatchLayout};
use watershed_solvers::{Multigrid, MultigridOptions, PatchedMultigrid, SpaceOrder};

/// Solves `problem` on `counts` patches alone and across `link`'s ranks;
/// returns how many points were compared.
fn check(
    problem: &Problem,
    counts: [usize; 3],
    cg: bool,
    link: Rc<dyn RankLink>,
) -> Result<usize, String> {
    let what = format!("{} on {counts:?}", problem.name);
    let fail = |e: watershed_solvers::SolverError| format!("{what}: {e}");
    let layout = PatchLayout::new(&problem.grid, counts, GhostWidth::uniform(1))
        .map_err(|e| format!("{what}: {e}"))?;
    let options = MultigridOptions {
        relative_tolerance: 1e-8,
        ..MultigridOptions::default()
    };
    let solve = |link: Rc<dyn RankLink>| -> Result<_, String> {
        let mut solver = PatchedMultigrid::new(
            &layout,
            link,
            problem.conditions.clone(),
            options,
            problem.order,
        )
        .map_err(fail)?;
        let (rhs, mut x) = patch_fields(problem, &layout, solver.owned());
        let report = if cg {
            solver.solve_preconditioned_cg(&rhs, &mut x)
        } else {
            solver.solve(&rhs, &mut x)
        }
        .map_err(fail)?;
        Ok((solver.owned(), x, report))
    };
    let (_, alone, alone_report) = solve(Rc::new(SingleProcess))?;
    let (owned, spread, report) = solve(link)?;
    let bits = |r: &[f64]| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    if bits(&report.residuals) != bits(&alone_report.residuals) {
        return Err(format!(
            "{what}: residuals {:?} across the ranks, {:?} alone",
            report.residuals, alone_report.residuals
        ));
    }
    let mut compared = 0;
    for (index, part) in owned.zip(&spread) {
        compared += same_bits(&alone[index], part, &format!("{what}, patch {index}"))?;
    }
    Ok(compared)
}

/// Times `solves` CG solves on an `n`^3 periodic box, whole and on
/// 2 x 1 x 2 patches across `link`'s ranks; prints this rank's figures.
fn bench(n: usize, link: Rc<dyn RankLink>) -> Result<(), String> {
    let solves = 5;
    let mut problem = periodic_box(SpaceOrder::Second);
    problem.grid = Grid::new([n; 3], [1.0; 3], [0.0; 3])
        .map_err(|e| e.to_string())?
        .with_periodic([true; 3]);
    let options = MultigridOptions::default();
    let patch = problem.grid.whole_domain(1);
    let rhs = case::cell_field(&patch, "b", problem.rhs);
    let mut x = case::cell_field(&patch, "x", |_| 0.0);
    let mut whole =
        Multigrid::new(&patch, problem.conditions.clone(), options).map_err(|e| e.to_string())?;
    whole
        .solve_preconditioned_cg(&rhs, &mut x)
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut iterations = 0;
    for _ in 0..solves {
        x.fill(0.0).map_err(|e| e.to_string())?;
        iterations = whole
            .solve_preconditioned_cg(&rhs, &mut x)
            .map_err(|e| e.to_string())?
            .iterations;
    }
    let whole_ms = started.elapsed().as_secs_f64() * 1e3 / solves as f64;
    let layout = PatchLayout::new(&problem.grid, [2, 1, 2], GhostWidth::uniform(1))
        .map_err(|e| e.to_string())?;
    let mut spread = PatchedMultigrid::new(
        &layout,
        link.clone(),
        problem.conditions.clone(),
        options,
        SpaceOrder::Second,
    )
    .map_err(|e| e.to_string())?;
    let (rhs, mut x) = patch_fields(&problem, &layout, spread.owned());
    spread
        .solve_preconditioned_cg(&rhs, &mut x)
        .map_err(|e| e.to_string())?;
    let exchanged = spread.exchange_time();
    let started = Instant::now();
    let mut spread_iterations = 0;
    for part in x.iter_mut() {
        part.fill(0.0).map_err(|e| e.to_string())?;
    }
    for _ in 0..solves {
        for part in x.iter_mut() {
            part.fill(0.0).map_err(|e| e.to_string())?;
        }
        spread_iterations = spread
            .solve_preconditioned_cg(&rhs, &mut x)
            .map_err(|e| e.to_string())?
            .iterations;
    }
    let spread_ms = started.elapsed().as_secs_f64() * 1e3 / solves as f64;
    let exchange_ms = (spread.exchange_time() - exchanged).as_secs_f64() * 1e3 / solves as f64;
    println!(
        "rank {} of {}: {n}^3 periodic, CG to 1e-8: whole domain {whole_ms:.1} ms/solve ({iterations} iterations); on 2x1x2 patches {spread_ms:.1} ms/solve ({spread_iterations} iterations, {} levels of {} on patches), of which exchanges and reductions {exchange_ms:.1} ms",
        link.rank(),
        link.ranks(),
        spread.decomposed_levels(),
        spread.levels()
    );
    Ok(())
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("MPI was initialised already");
        std::process::exit(1);
    };
    let world = universe.world();
    let (rank, ranks) = (world.rank(), world.size());
    let link: Rc<dyn RankLink> = Rc::new(MpiLink::new(world.duplicate()));
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--bench") {
        let n = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(32);
        if let Err(why) = bench(n, link) {
            eprintln!("rank {rank} of {ranks}: {why}");
            world.abort(1);
        }
        return;
    }
    let mut compared = 0;
    let mut solves = 0;
    let problems = [
        (channel(), false),
        (floor_box(), false),
        (closed_box(), true),
        (periodic_box(SpaceOrder::Second), true),
        (periodic_box(SpaceOrder::Fourth), true),
    ];
    for (problem, cg) in &problems {
        for &counts in &problem.layouts {
            match check(problem, counts, *cg, link.clone()) {
                Ok(n) => {
                    compared += n;
                    solves += 1;
                }
                Err(why) => {
                    eprintln!("rank {rank} of {ranks}: {why}");
                    world.abort(1);
                }
            }
        }
    }
    println!(
        "rank {rank} of {ranks}: {solves} Poisson solves on patches (V-cycles and CG) give the bits of one process: {compared} points and every residual"
    );
}
