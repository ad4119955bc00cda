//! Decomposed transport across MPI ranks, checked on every rank: run with
//! `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does). Every rank runs
//! the case of `tests/patched.rs` three ways: on the whole domain, on all
//! patches of the layout in one process, and on the patches it owns with
//! the seams exchanged across ranks. At every step the time step and
//! every allocated point of its patches must equal the whole domain's bit
//! for bit, and at the end the mass summed in patch order across ranks
//! must equal the one-process sum bit for bit. Exits 1 naming the rank,
//! layout and point on the first difference (`MPI_Abort` ends every rank).

#[path = "../tests/support/patched_case.rs"]
mod case;

use case::{EQUATIONS, assert_bitwise_equal, grid, mass, recipe};
use mpi::traits::Communicator;
use std::rc::Rc;
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::{RankLink, SingleProcess};
use watershed_fields::{GhostWidth, PatchLayout};
use watershed_solvers::PatchedTransport;

/// The three runs of one layout; the points compared.
fn check(counts: [usize; 3], link: Rc<dyn RankLink>) -> Result<usize, String> {
    let text = |e: watershed_solvers::SolverError| format!("layout {counts:?}: {e}");
    let grid = grid();
    let layout = PatchLayout::new(&grid, counts, GhostWidth::uniform(2))
        .map_err(|e| format!("layout {counts:?}: {e}"))?;
    let mut whole = recipe(&grid.whole_domain(2)).map_err(text)?;
    for (name, initial) in EQUATIONS {
        whole.set_initial_condition(name, initial).map_err(text)?;
    }
    let mut single =
        PatchedTransport::build(layout.clone(), Rc::new(SingleProcess), recipe).map_err(text)?;
    for (name, initial) in EQUATIONS {
        single.set_initial_condition(name, initial).map_err(text)?;
    }
    let mut spread = PatchedTransport::build(layout, link, recipe).map_err(text)?;
    // Across ranks, each stage's exchange overlapped with the next
    // stage's interior work (the one-process run exchanges when each
    // stage ends): the same bits.
    spread.set_overlap(true).map_err(text)?;
    for (name, initial) in EQUATIONS {
        spread.set_initial_condition(name, initial).map_err(text)?;
    }
    let mut compared = 0;
    for step in 0..8 {
        let dt = whole.stable_time_step(0.4, 0.2).map_err(text)?;
        let spread_dt = spread.stable_time_step(0.4, 0.2).map_err(text)?;
        if dt.to_bits() != spread_dt.to_bits() {
            return Err(format!(
                "layout {counts:?}, step {step}: dt {spread_dt:e} across ranks, {dt:e} on the whole domain"
            ));
        }
        whole.step(dt).map_err(text)?;
        single.step(dt).map_err(text)?;
        spread.step(dt).map_err(text)?;
        // The last stage's exchange waits for the next stage (overlapped
        // with its interior work): complete it to compare the ghosts.
        spread.settle().map_err(text)?;
        for (name, _) in EQUATIONS {
            whole
                .with_solution(name, |w| -> Result<(), String> {
                    for solver in spread.solvers() {
                        solver
                            .with_solution(name, |p| {
                                compared += assert_bitwise_equal(
                                    w,
                                    p,
                                    &format!("{name}, layout {counts:?}, step {step}"),
                                );
                            })
                            .map_err(text)?;
                    }
                    Ok(())
                })
                .map_err(text)??;
        }
    }
    let one_process = single.sum_over_patches(|_, s| mass(s)).map_err(text)?;
    let across = spread.sum_over_patches(|_, s| mass(s)).map_err(text)?;
    if one_process.to_bits() != across.to_bits() {
        return Err(format!(
            "layout {counts:?}: mass {across:e} summed across ranks, {one_process:e} in one process"
        ));
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
    for counts in [[4, 3, 1], [2, 2, 1], [4, 1, 1]] {
        match check(counts, link.clone()) {
            Ok(n) => compared += n,
            Err(why) => {
                eprintln!("rank {rank} of {ranks}: {why}");
                world.abort(1);
            }
        }
    }
    println!(
        "rank {rank} of {ranks}: {compared} points of its patches equal the whole domain's over 8 steps of 3 layouts; time steps and patch-order mass equal"
    );
}
