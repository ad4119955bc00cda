//! Incompressible flows on patches across MPI ranks, checked on every
//! rank: run with `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does).
//! Every rank runs the cases of `tests/patched_flow.rs` (a cavity, the 3D
//! Taylor-Green vortex, a channel past an immersed disc, the cavity with a
//! disc) twice:
//!
//! * with the projection replicated: on the whole domain, and with the
//!   momentum of the patches it owns (the others' gathered across ranks);
//! * with the projection's Poisson solve on the patches too: alone (one
//!   process owning every patch) and spread over the ranks.
//!
//! After every step the time step, the velocity, pressure and projection
//! potential at every allocated point, the kinetic energy and the
//! enstrophy must be equal bit for bit. Exits 1 naming the rank, case and
//! point on the first difference (`MPI_Abort` ends every rank).

#[path = "../tests/support/patched_flow_case.rs"]
mod case;

use case::{
    Match, cavity, cavity_grid, cavity_with_disc, disc_channel_grid, past_a_disc, run_and_compare,
    set_taylor_green, taylor_green, taylor_green_grid,
};
use mpi::traits::Communicator;
use std::rc::Rc;
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::{RankLink, SingleProcess};
use watershed_fields::{GhostWidth, PatchLayout, YFace};
use watershed_solvers::{IncompressibleFlowBuilder, SpaceOrder};

/// Builds `builder` twice and compares 4 steps: with the projection
/// replicated, on the whole domain and with the momentum on `counts`
/// patches across the ranks of `link`; with the projection on the patches
/// too, alone and across the ranks.
fn check(
    build: impl Fn() -> IncompressibleFlowBuilder,
    grid: &watershed_fields::Grid,
    counts: [usize; 3],
    ghosts: usize,
    link: Rc<dyn RankLink>,
    taylor_green_start: bool,
    what: &str,
) -> Result<usize, String> {
    let layout = PatchLayout::new(grid, counts, GhostWidth::uniform(ghosts))
        .map_err(|e| format!("{what}: {e}"))?;
    let (replicated, decomposed) = (format!("{what}, replicated"), format!("{what}, decomposed"));
    let fail = |e: watershed_solvers::SolverError| format!("{what}: {e}");
    let mut whole = build().build().map_err(fail)?;
    let mut spread = build()
        .patches(layout.clone(), link.clone())
        .replicated_projection()
        .build()
        .map_err(fail)?;
    let mut alone = build()
        .patches(layout.clone(), Rc::new(SingleProcess))
        .build()
        .map_err(fail)?;
    let mut spread_solve = build().patches(layout, link).build().map_err(fail)?;
    if taylor_green_start {
        for flow in [&whole, &spread, &alone, &spread_solve] {
            set_taylor_green(flow);
        }
    }
    let compared = run_and_compare(&mut whole, &mut spread, 4, &replicated, Match::Bits)?;
    Ok(compared + run_and_compare(&mut alone, &mut spread_solve, 4, &decomposed, Match::Bits)?)
}

/// The 3D Taylor-Green vortex on 2 x 1 x 2 patches across the ranks of
/// `link`, set, stepped and read as a run writing one file per dump reads
/// it ([`IncompressibleFlow::on_root_with_whole`]): rank 0 gets the bits
/// of the same flow in one process at every point, and no other rank
/// forms a whole-domain field; a read of the whole domain on every rank
/// afterwards gathers it everywhere, with the same bits.
///
/// [`IncompressibleFlow::on_root_with_whole`]: watershed_solvers::IncompressibleFlow::on_root_with_whole
fn check_reads_on_rank_0(link: Rc<dyn RankLink>) -> Result<usize, String> {
    let grid = taylor_green_grid();
    let patch = grid.whole_domain(1);
    let layout = PatchLayout::new(&grid, [2, 1, 2], GhostWidth::uniform(1))
        .map_err(|e| format!("reads on rank 0: {e}"))?;
    let fail = |e: watershed_solvers::SolverError| format!("reads on rank 0: {e}");
    let alone = taylor_green(&patch, SpaceOrder::Second)
        .patches(layout.clone(), Rc::new(SingleProcess))
        .build()
        .map_err(fail)?;
    let rank = link.rank();
    let mut spread = taylor_green(&patch, SpaceOrder::Second)
        .patches(layout, link)
        .build()
        .map_err(fail)?;
    let mut alone = alone;
    set_taylor_green(&alone);
    set_taylor_green(&spread);
    for _ in 0..2 {
        let dt = alone.stable_time_step(0.5, 0.2).map_err(fail)?;
        alone.step(dt).map_err(fail)?;
        spread.step(dt).map_err(fail)?;
    }
    let on_root = spread
        .on_root_with_whole(|| {
            spread.with_velocity::<YFace, _>(|v| v.values().map(<[f64]>::to_vec))
        })
        .map_err(fail)?;
    let reference = alone
        .with_velocity::<YFace, _>(|v| v.values().map(<[f64]>::to_vec))
        .map_err(fail)?
        .map_err(|e| format!("reads on rank 0: {e}"))?;
    let compare = |values: &[f64], what: &str| -> Result<usize, String> {
        match values
            .iter()
            .zip(&reference)
            .position(|(a, b)| a.to_bits() != b.to_bits())
        {
            None if values.len() == reference.len() => Ok(values.len()),
            None => Err(format!(
                "{what}: {} points, {} in one process",
                values.len(),
                reference.len()
            )),
            Some(i) => Err(format!("{what}: point {i} differs from one process's")),
        }
    };
    let mut compared = 0;
    match on_root {
        Some(values) => {
            let values = values
                .map_err(fail)?
                .map_err(|e| format!("reads on rank 0: {e}"))?;
            compared += compare(&values, "v gathered onto rank 0")?;
        }
        None if rank == 0 => return Err("rank 0 got nothing to read".into()),
        None if spread.graph().holds_storage() => {
            return Err(format!(
                "rank {rank} formed the whole domain for rank 0's reads"
            ));
        }
        None => {}
    }
    // A read on every rank gathers onto every rank.
    let everywhere = spread
        .with_velocity::<YFace, _>(|v| v.values().map(<[f64]>::to_vec))
        .map_err(fail)?
        .map_err(|e| format!("reads on rank 0: {e}"))?;
    compared += compare(&everywhere, "v gathered onto every rank")?;
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
    let cavity_patch = cavity_grid().whole_domain(1);
    let tgv = taylor_green_grid();
    let tgv_patch = tgv.whole_domain(1);
    let mut compared = 0;
    let mut done = |result: Result<usize, String>| match result {
        Ok(n) => compared += n,
        Err(why) => {
            eprintln!("rank {rank} of {ranks}: {why}");
            world.abort(1);
        }
    };
    for counts in [[2, 2, 1], [4, 1, 1]] {
        let what = format!("cavity {counts:?}");
        let cavity_grid = cavity_grid();
        done(check(
            || cavity(&cavity_patch),
            &cavity_grid,
            counts,
            1,
            link.clone(),
            false,
            &what,
        ));
    }
    done(check(
        || taylor_green(&tgv_patch, SpaceOrder::Second),
        &tgv,
        [2, 1, 2],
        1,
        link.clone(),
        true,
        "Taylor-Green [2, 1, 2]",
    ));
    // An immersed disc behind a convective outflow: its forcing on the
    // gathered velocity, its faces closed on every patch's levels.
    let disc_grid = disc_channel_grid();
    let disc_patch = disc_grid.whole_domain(1);
    done(check(
        || past_a_disc(&disc_patch),
        &disc_grid,
        [2, 2, 1],
        1,
        link.clone(),
        false,
        "past a disc [2, 2, 1]",
    ));
    // The cavity with a disc: closed, so the solve's means are over every
    // patch's fluid cells, summed across ranks in patch order.
    done(check(
        || cavity_with_disc(&cavity_patch),
        &cavity_grid(),
        [2, 2, 1],
        1,
        link.clone(),
        false,
        "cavity with a disc [2, 2, 1]",
    ));
    done(check_reads_on_rank_0(link.clone()));
    println!(
        "rank {rank} of {ranks}: {compared} points of the flows on patches have the same bits over 4 steps of 5 cases (replicated projection against the whole domain, projection on patches against one process); time steps, kinetic energy and enstrophy equal; the vortex gathered onto rank 0 alone for its reads (no whole field elsewhere), then onto every rank, with one process's bits"
    );
}
