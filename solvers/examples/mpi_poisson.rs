//! The multigrid on patches across MPI ranks, checked on every rank: run
//! with `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does). Every rank
//! solves the problems of `tests/patched_multigrid.rs` twice with the same
//! patch layout: alone (one process owning every patch) and spread over
//! the ranks (owning its share). The residual history and every allocated
//! point of the patches it owns must have the same bits, for CG (whose
//! inner products add per-patch sums in patch order) as for V-cycles.
//! Exits 1 naming the rank, problem and point on the first difference
//! (`MPI_Abort` ends every rank).

#[path = "../tests/support/patched_poisson_case.rs"]
mod case;

use case::{Problem, channel, closed_box, floor_box, patch_fields, periodic_box, same_bits};
use mpi::traits::Communicator;
use std::rc::Rc;
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::{RankLink, SingleProcess};
use watershed_fields::{GhostWidth, PatchLayout};
use watershed_solvers::{MultigridOptions, PatchedMultigrid, SpaceOrder};

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

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("MPI was initialised already");
        std::process::exit(1);
    };
    let world = universe.world();
    let (rank, ranks) = (world.rank(), world.size());
    let link: Rc<dyn RankLink> = Rc::new(MpiLink::new(world.duplicate()));
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
