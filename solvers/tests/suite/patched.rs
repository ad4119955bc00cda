//! Transport on the patches of a decomposed grid (`PatchedTransport`)
//! gives the whole domain's bits: a scalar diffused with a variable
//! coefficient and carried by a rotating velocity with a flux-limited
//! scheme (two ghost layers), periodic along x, a time-dependent Dirichlet
//! value on -y and a Neumann gradient on +y, SSP-RK3 with the stable time
//! step of each step. After every step each patch's every allocated point
//! (interior, seam ghosts, physical ghosts and the corners where they
//! meet) equals the whole domain's at the same global index, and so do
//! the time steps and the mass summed in patch order.

#[path = "../support/patched_case.rs"]
mod case;

use case::{EQUATIONS, assert_bitwise_equal, grid, initial, mass, recipe};
use std::rc::Rc;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{CellCentre, Device, GhostWidth, Grid, PatchLayout, SpatialField};
use watershed_solvers::*;

#[test]
fn patches_give_the_whole_domains_bits_at_every_step() {
    let grid = grid();
    for (counts, overlap) in [
        ([2, 1, 1], true),
        ([3, 2, 1], true),
        ([4, 3, 1], true),
        ([1, 3, 1], true),
        ([3, 2, 1], false),
    ] {
        let layout = PatchLayout::new(&grid, counts, GhostWidth::uniform(2)).unwrap();
        let mut whole = recipe(&grid.whole_domain(2)).unwrap();
        for (name, initial) in EQUATIONS {
            whole.set_initial_condition(name, initial).unwrap();
        }
        let mut patched = PatchedTransport::build(layout, Rc::new(SingleProcess), recipe).unwrap();
        // The seams exchanged while the next stage's interior runs, or
        // when each stage ends: the same bits.
        assert!(!patched.overlaps());
        patched.set_overlap(overlap).unwrap();
        assert_eq!(patched.overlaps(), overlap);
        for (name, initial) in EQUATIONS {
            patched.set_initial_condition(name, initial).unwrap();
        }
        let mut compared = 0;
        for step in 0..8 {
            let dt = whole.stable_time_step(0.4, 0.2).unwrap();
            let patched_dt = patched.stable_time_step(0.4, 0.2).unwrap();
            assert_eq!(
                dt.to_bits(),
                patched_dt.to_bits(),
                "{counts:?} step {step}: dt"
            );
            whole.step(dt).unwrap();
            patched.step(dt).unwrap();
            patched.settle().unwrap();
            assert_eq!(whole.time().to_bits(), patched.time().to_bits());
            for (name, _) in EQUATIONS {
                whole
                    .with_solution(name, |w| {
                        for solver in patched.solvers() {
                            solver
                                .with_solution(name, |p| {
                                    compared += assert_bitwise_equal(
                                        w,
                                        p,
                                        &format!("{name}, {counts:?} step {step}"),
                                    );
                                })
                                .unwrap();
                        }
                    })
                    .unwrap();
            }
        }
        // The mass in patch order equals the whole domain's only up to
        // rounding (another order of addition); each patch's partial is
        // its own interior's, and all cells are counted once.
        let whole_mass = mass(&whole).unwrap();
        let patched_mass = patched.sum_over_patches(|_, s| mass(s)).unwrap();
        assert!(
            (whole_mass - patched_mass).abs() <= 1e-12 * whole_mass.abs().max(1.0),
            "{counts:?}: mass {whole_mass} vs {patched_mass}"
        );
        let cells_with_ghosts = (24 + 4 * counts[0]) * (18 + 4 * counts[1]);
        assert_eq!(compared, 2 * 8 * cells_with_ghosts, "{counts:?}");
        // Overlapped, the interiors ran while the exchanges were in flight.
        assert_eq!(
            patched.interior_during_exchanges() > std::time::Duration::ZERO,
            overlap,
            "{counts:?}"
        );
        // The solution moved and stayed bounded.
        let moved = whole
            .with_solution("c", |w| {
                let l = w.layout();
                let values = w.values().unwrap();
                l.interior()
                    .iter()
                    .map(|i| {
                        let [x, y, z] = l.coordinate(i);
                        (values[l.linear_index(i)] - initial([x, y, z])).abs()
                    })
                    .fold(0.0, f64::max)
            })
            .unwrap();
        assert!(moved > 0.05 && moved < 3.0, "{counts:?}: moved by {moved}");
    }
}

#[test]
fn a_recipe_that_builds_on_another_patch_is_refused() {
    let grid = grid();
    let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(2)).unwrap();
    let whole = grid.whole_domain(2);
    let error =
        PatchedTransport::build(layout, Rc::new(SingleProcess), |_| recipe(&whole)).unwrap_err();
    assert!(
        matches!(error, SolverError::Setup { ref equation, ref reason }
            if equation == "c, d" && reason.contains("the recipe for patch 0 built a solver on cells [24, 18, 1]")),
        "{error}"
    );
}

#[test]
fn a_patch_that_diverges_is_named_with_global_cells() {
    let grid = grid();
    let layout = PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(2)).unwrap();
    let mut patched = PatchedTransport::build(layout, Rc::new(SingleProcess), recipe).unwrap();
    for (name, initial) in EQUATIONS {
        patched.set_initial_condition(name, initial).unwrap();
    }
    let dt = patched.stable_time_step(0.4, 0.2).unwrap();
    let error = (0..200)
        .find_map(|_| patched.step(5000.0 * dt).err())
        .expect("5000 times the stable step diverges");
    match error {
        SolverError::Diverged {
            equation,
            cell,
            cause,
            ..
        } => {
            assert_eq!(equation, "c");
            let patch = cause
                .rsplit("on patch ")
                .next()
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("the cause names no patch: {cause}"));
            let offset = patched.layout().patch(patch).unwrap().offset();
            let cells = patched.layout().patch_cells();
            for a in 0..2 {
                let range = offset[a] as isize..(offset[a] + cells[a]) as isize;
                assert!(
                    range.contains(&cell[a]),
                    "cell {cell:?} lies outside patch {patch} at {offset:?}"
                );
            }
        }
        other => panic!("expected Diverged, got {other}"),
    }
}

#[test]
fn a_solution_moves_between_layouts_through_the_whole_domain() {
    let grid = grid();
    let mut whole = recipe(&grid.whole_domain(2)).unwrap();
    for (name, initial) in EQUATIONS {
        whole.set_initial_condition(name, initial).unwrap();
    }
    let layout = |counts| PatchLayout::new(&grid, counts, GhostWidth::uniform(2)).unwrap();
    let mut before =
        PatchedTransport::build(layout([3, 2, 1]), Rc::new(SingleProcess), recipe).unwrap();
    for (name, initial) in EQUATIONS {
        before.set_initial_condition(name, initial).unwrap();
    }
    for _ in 0..4 {
        let dt = whole.stable_time_step(0.4, 0.2).unwrap();
        whole.step(dt).unwrap();
        before.step(dt).unwrap();
    }
    // What a checkpoint holds: the whole domain's field, ghosts included.
    let saved: Vec<_> = EQUATIONS
        .iter()
        .map(|(name, _)| before.whole_solution(name).unwrap())
        .collect();
    for ((name, _), saved) in EQUATIONS.iter().zip(&saved) {
        let compared = whole
            .with_solution(name, |w| assert_bitwise_equal(w, saved, "gathered"))
            .unwrap();
        assert_eq!(compared, (24 + 4) * (18 + 4));
        // Gathered to rank 0 (the only rank here): the same field.
        let rooted = before
            .gather_solution(name)
            .unwrap()
            .expect("rank 0 gets it");
        assert_bitwise_equal(saved, &rooted, "gathered to rank 0");
    }
    // A restart on another layout continues with the same bits.
    let mut after =
        PatchedTransport::build(layout([2, 3, 1]), Rc::new(SingleProcess), recipe).unwrap();
    // The clock first: the conditions refill the ghosts at its time.
    after.set_clock(before.time(), before.steps()).unwrap();
    for ((name, _), saved) in EQUATIONS.iter().zip(&saved) {
        after.set_whole_solution(name, saved).unwrap();
    }
    for step in 4..8 {
        let dt = whole.stable_time_step(0.4, 0.2).unwrap();
        assert_eq!(
            dt.to_bits(),
            after.stable_time_step(0.4, 0.2).unwrap().to_bits()
        );
        whole.step(dt).unwrap();
        after.step(dt).unwrap();
        after.settle().unwrap();
        for (name, _) in EQUATIONS {
            whole
                .with_solution(name, |w| {
                    for solver in after.solvers() {
                        solver
                            .with_solution(name, |p| {
                                assert_bitwise_equal(
                                    w,
                                    p,
                                    &format!("{name} after the restart, step {step}"),
                                )
                            })
                            .unwrap();
                    }
                })
                .unwrap();
        }
    }
    // A field of another grid is refused, naming it.
    let small = Grid::new([12, 18, 1], [0.5, 0.75, 1.0], [0.0; 3]).unwrap();
    let wrong = SpatialField::<CellCentre>::new("c", &small.whole_domain(2), Device::Cpu).unwrap();
    let error = after.set_whole_solution("c", &wrong).unwrap_err();
    assert!(
        matches!(error, SolverError::Setup { ref reason, .. }
            if reason.contains("the whole-domain field 'c' has [12, 18, 1] cells")),
        "{error}"
    );
}

#[test]
fn a_patch_with_fewer_ghost_layers_than_its_stencils_read_is_refused() {
    // The flux-limited scheme reads two cells upwind: one ghost layer is
    // too few, on a patch as on the whole domain.
    let grid = grid();
    let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1)).unwrap();
    let error = PatchedTransport::build(layout, Rc::new(SingleProcess), recipe).unwrap_err();
    assert!(
        matches!(
            error,
            SolverError::Graph(watershed_exprgraph::GraphError::MissingGhosts {
                ref tag,
                needed: 2,
                available: 1,
                ..
            }) if tag.name.as_ref() == "c"
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("give it at least 2 ghost layer(s)"),
        "{error}"
    );
}
