//! The halo exchange across MPI ranks, checked on every rank: run with
//! `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does). Each rank fills
//! the interiors of the patches it owns with a value per global point and
//! its ghosts with NaN, exchanges, and checks every ghost point against
//! the whole domain: inside it (after periodic wraps) the value at that
//! point, bit for bit; outside it untouched. Layouts with more patches than
//! ranks (several per rank), all four locations, mixed periodicity, one
//! and two ghost layers; gathers in patch order; a message shorter than
//! its receiver's buffer refused by name. Exits 1 naming the rank, layout,
//! patch and point on the first difference.

use mpi::traits::Communicator;
use watershed_fields::halo_mpi::{MpiLink, exchange_ghosts_across};
use watershed_fields::ranks::RankLink;
use watershed_fields::{
    CellCentre, Device, FieldError, GhostWidth, Grid, Location, LocationKind, PatchLayout,
    SpatialField, XFace, YFace, ZFace,
};

/// The value every rank puts at global point `g` (distinct per point).
fn value_at(g: [isize; 3]) -> f64 {
    (g[0] * 10_000 + g[1] * 100 + g[2]) as f64 + 0.25
}

fn check<L: Location>(
    world: &impl Communicator,
    cells: [usize; 3],
    counts: [usize; 3],
    periodic: [bool; 3],
    ghosts: usize,
) -> Result<usize, String> {
    let (rank, ranks) = (world.rank() as usize, world.size() as usize);
    let grid = Grid::new(cells, [1.0; 3], [0.0; 3])
        .map_err(|e| e.to_string())?
        .with_periodic(periodic);
    let layout =
        PatchLayout::new(&grid, counts, GhostWidth::uniform(ghosts)).map_err(|e| e.to_string())?;
    let mine = layout.owned_by(rank, ranks).map_err(|e| e.to_string())?;
    let mut owned = Vec::new();
    for index in mine.clone() {
        let patch = layout.patch(index).map_err(|e| e.to_string())?;
        let mut field = SpatialField::<L, f64>::new(&format!("u{index}"), &patch, Device::Cpu)
            .map_err(|e| e.to_string())?;
        let fl = field.layout().clone();
        let data = field.values_mut().map_err(|e| e.to_string())?;
        for local in fl.allocated().iter() {
            let g = [0, 1, 2].map(|a| patch.offset()[a] as isize + local[a]);
            data[fl.linear_index(local)] = if fl.interior().contains(local) {
                value_at(g)
            } else {
                f64::NAN
            };
        }
        owned.push(field);
    }
    let written = exchange_ghosts_across(&layout, world, &mut owned).map_err(|e| e.to_string())?;
    let active = grid.active_dimensions();
    let normal = match L::KIND {
        LocationKind::XFace => 0,
        LocationKind::YFace => 1,
        LocationKind::ZFace => 2,
        LocationKind::CellCentre => 3,
    };
    for (field, index) in owned.iter().zip(mine) {
        let patch = layout.patch(index).map_err(|e| e.to_string())?;
        let fl = field.layout();
        let data = field.values().map_err(|e| e.to_string())?;
        for local in fl.allocated().iter() {
            let g = [0, 1, 2].map(|a| patch.offset()[a] as isize + local[a]);
            let mut wrapped = g;
            let mut inside = true;
            for a in (0..3).filter(|&a| active[a]) {
                if periodic[a] {
                    wrapped[a] = g[a].rem_euclid(cells[a] as isize);
                } else {
                    let last = cells[a] as isize - if normal == a { 0 } else { 1 };
                    inside &= g[a] >= 0 && g[a] <= last;
                }
            }
            let got = data[fl.linear_index(local)];
            let right = if inside {
                got.to_bits() == value_at(wrapped).to_bits()
            } else {
                got.is_nan()
            };
            if !right {
                return Err(format!(
                    "{:?} layout {counts:?} periodic {periodic:?}: patch {index} point {local:?} (global {g:?}) holds {got}, expected {}",
                    L::KIND,
                    if inside { value_at(wrapped) } else { f64::NAN }
                ));
            }
        }
    }
    Ok(written)
}

/// Each rank contributes one value per patch it owns (the patch's index
/// plus a quarter); every rank must get all of them in patch order, and
/// rank 0 alone when gathered to it.
fn gathered_in_patch_order(world: &mpi::topology::SimpleCommunicator) -> Result<(), String> {
    let (rank, ranks) = (world.rank() as usize, world.size() as usize);
    let grid = Grid::new([24, 12, 1], [1.0; 3], [0.0; 3]).map_err(|e| e.to_string())?;
    let layout =
        PatchLayout::new(&grid, [6, 2, 1], GhostWidth::uniform(1)).map_err(|e| e.to_string())?;
    let counts = (0..ranks)
        .map(|r| layout.owned_by(r, ranks).map(|run| run.len()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mine: Vec<f64> = layout
        .owned_by(rank, ranks)
        .map_err(|e| e.to_string())?
        .map(|p| p as f64 + 0.25)
        .collect();
    let link = MpiLink::new(world.duplicate());
    let all = link
        .gather_in_rank_order(&mine, &counts)
        .map_err(|e| e.to_string())?;
    let expected: Vec<f64> = (0..layout.len()).map(|p| p as f64 + 0.25).collect();
    if all != expected {
        return Err(format!("gathered {all:?}, expected {expected:?}"));
    }
    // The same to rank 0 only.
    let rooted = link
        .gather_to_root(&mine, &counts)
        .map_err(|e| e.to_string())?;
    match (rank, rooted) {
        (0, Some(all)) if all == expected => Ok(()),
        (0, other) => Err(format!("rank 0 gathered {other:?}, expected {expected:?}")),
        (_, None) => Ok(()),
        (_, Some(all)) => Err(format!("rank {rank} received {all:?}; only rank 0 should")),
    }
}

/// A message shorter than the buffer its receiver posted is an error on
/// the receiver naming both counts and the sender, not ghosts left stale.
fn short_message_is_named(world: &mpi::topology::SimpleCommunicator) -> Result<(), String> {
    let (rank, ranks) = (world.rank() as usize, world.size() as usize);
    if ranks < 2 {
        return Ok(());
    }
    let link = MpiLink::new(world.duplicate());
    let mut outgoing = vec![Vec::new(); ranks];
    let mut incoming = vec![Vec::new(); ranks];
    if rank == 0 {
        outgoing[1] = vec![1.5; 3];
    }
    if rank == 1 {
        incoming[0] = vec![0.0; 5];
    }
    let result = link.swap_during(&outgoing, &mut incoming, &mut |_| Ok(()));
    match (rank, result) {
        (1, Err(FieldError::InvalidLayout { reason }))
            if reason.contains("expected 5 value(s) from rank 0 and received 3") =>
        {
            Ok(())
        }
        (1, other) => Err(format!(
            "a message of 3 values into a buffer of 5 gave {other:?}"
        )),
        (_, Ok(())) => Ok(()),
        (_, Err(error)) => Err(format!(
            "a swap that sent a short message failed here: {error}"
        )),
    }
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("MPI was initialised already");
        std::process::exit(1);
    };
    let world = universe.world();
    let (rank, ranks) = (world.rank(), world.size());
    let cases: Vec<Result<usize, String>> = vec![
        check::<CellCentre>(&world, [16, 12, 1], [4, 2, 1], [true, false, false], 1),
        check::<CellCentre>(&world, [12, 8, 6], [2, 2, 2], [true, true, true], 2),
        check::<XFace>(&world, [16, 12, 1], [4, 2, 1], [false, true, false], 2),
        check::<YFace>(&world, [8, 12, 4], [2, 4, 1], [false, false, true], 1),
        check::<ZFace>(&world, [8, 6, 8], [1, 2, 4], [true, false, false], 2),
    ];
    // Per-patch values gathered from every rank come back in patch order
    // (what reductions rely on for rank-independent sums).
    match gathered_in_patch_order(&world).and_then(|()| short_message_is_named(&world)) {
        Ok(()) => {}
        Err(why) => {
            eprintln!("rank {rank} of {ranks}: {why}");
            world.abort(1);
        }
    }
    let mut written = 0;
    for case in cases {
        match case {
            Ok(n) => written += n,
            Err(why) => {
                eprintln!("rank {rank} of {ranks}: {why}");
                world.abort(1);
            }
        }
    }
    println!("rank {rank} of {ranks}: {written} ghost points equal the whole domain's");
}
