//! An incompressible flow on patches (`IncompressibleFlowBuilder::patches`).
//! With the projection replicated, its momentum stages on patches give the
//! bits of the same flow on the whole domain: every velocity component,
//! the pressure and the projection potential at every allocated point,
//! the time steps, the kinetic energy and the enstrophy, after every step,
//! on several layouts (2D cavity with a time-dependent lid, 3D
//! Taylor-Green at second and fourth order, a channel with a zero-gradient
//! or a convective outflow, a channel past an immersed disc, whose force
//! too keeps its bits). With the projection's Poisson solve on the patches
//! too (the default; the disc's faces closed on every patch's levels), the
//! flows agree with the whole domain's to the solver's tolerance, give its
//! bits on one patch, and restart with their own bits. What cannot be
//! decomposed is refused by name.

use crate::patched_flow_case::{
    Match, cavity, cavity_grid, cavity_with_disc, compare, disc_channel_grid, past_a_disc,
    run_and_compare, set_taylor_green, taylor_green, taylor_green_grid,
};
use std::rc::Rc;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{GhostWidth, Grid, PatchLayout, XFace, YFace};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, IncompressibleFlow, IncompressibleFlowBuilder, Outflow,
    SolverError, SpaceOrder, TimeIntegrator,
};

/// Copies a 2D flow's state (what a checkpoint holds: u, v, psi and the
/// clock) from `from` into `to`.
fn copy_state(from: &IncompressibleFlow, to: &mut IncompressibleFlow) {
    from.with_velocity::<XFace, _>(|u| {
        to.with_velocity_mut::<XFace, _>(|r| {
            r.values_mut().unwrap().copy_from_slice(u.values().unwrap())
        })
    })
    .unwrap()
    .unwrap();
    from.with_velocity::<YFace, _>(|v| {
        to.with_velocity_mut::<YFace, _>(|r| {
            r.values_mut().unwrap().copy_from_slice(v.values().unwrap())
        })
    })
    .unwrap()
    .unwrap();
    from.with_projection_potential(|p| {
        to.with_projection_potential_mut(|r| {
            r.values_mut().unwrap().copy_from_slice(p.values().unwrap())
        })
    })
    .unwrap()
    .unwrap();
    to.set_clock(from.time(), from.steps()).unwrap();
}

fn layout(grid: &Grid, counts: [usize; 3], ghosts: usize) -> PatchLayout {
    PatchLayout::new(grid, counts, GhostWidth::uniform(ghosts)).unwrap()
}

/// The cavity with its projection on 2 x 2 patches in one process.
fn cavity_on_2_by_2_patches() -> IncompressibleFlow {
    let grid = cavity_grid();
    cavity(&grid.whole_domain(1))
        .patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess))
        .build()
        .unwrap()
}

#[test]
fn a_cavity_on_patches_has_the_whole_domains_bits() {
    let grid = cavity_grid();
    for counts in [[2, 2, 1], [3, 1, 1], [1, 4, 1], [4, 2, 1]] {
        let patch = grid.whole_domain(1);
        let mut whole = cavity(&patch).build().unwrap();
        let mut parts = cavity(&patch)
            .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
            .replicated_projection()
            .build()
            .unwrap();
        assert_eq!(parts.owned_patches(), Some(0..counts.iter().product()));
        assert_eq!(parts.projection_levels(), None);
        let what = format!("cavity {counts:?}");
        let compared = run_and_compare(&mut whole, &mut parts, 6, &what, Match::Bits)
            .unwrap_or_else(|e| panic!("{e}"));
        // u, v, p and psi on 26 x 18 allocated points (u: one more face
        // along x, v along y), six times.
        assert_eq!(compared, 6 * (27 * 18 + 26 * 19 + 2 * 26 * 18));
        assert!(parts.exchange_time().is_some() && whole.exchange_time().is_none());
    }
}

#[test]
fn a_cavity_on_patches_with_forward_euler_and_a_restart_keeps_the_bits() {
    let grid = cavity_grid();
    let patch = grid.whole_domain(1);
    let build = |split: bool| {
        let builder = cavity(&patch).integrator(TimeIntegrator::ForwardEuler);
        match split {
            true => builder
                .patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess))
                .replicated_projection(),
            false => builder,
        }
        .build()
        .unwrap()
    };
    let (mut whole, mut parts) = (build(false), build(true));
    run_and_compare(&mut whole, &mut parts, 3, "forward Euler", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
    // A restart of the decomposed flow from the whole flow's state (what a
    // checkpoint holds) continues with the same bits.
    let mut restarted = build(true);
    copy_state(&whole, &mut restarted);
    run_and_compare(&mut whole, &mut restarted, 3, "restarted", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_taylor_green_vortex_on_patches_has_the_whole_domains_bits() {
    let grid = taylor_green_grid();
    for (order, ghosts, counts) in [
        (SpaceOrder::Second, 1, [2, 1, 2]),
        (SpaceOrder::Fourth, 3, [2, 2, 1]),
    ] {
        let patch = grid.whole_domain(ghosts);
        let mut whole = taylor_green(&patch, order).build().unwrap();
        let mut parts = taylor_green(&patch, order)
            .patches(layout(&grid, counts, ghosts), Rc::new(SingleProcess))
            .replicated_projection()
            .build()
            .unwrap();
        set_taylor_green(&whole);
        set_taylor_green(&parts);
        run_and_compare(
            &mut whole,
            &mut parts,
            3,
            &format!("Taylor-Green {order:?} {counts:?}"),
            Match::Bits,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(parts.enstrophy().unwrap().is_some_and(|e| e > 0.0));
    }
}

#[test]
fn a_channel_with_an_open_outflow_on_patches_has_the_whole_domains_bits() {
    let zero_gradient = Outflow::ZeroGradient;
    let (mut whole, mut parts) = (
        channel(None, false, zero_gradient),
        channel(Some([4, 1, 1]), true, zero_gradient),
    );
    run_and_compare(&mut whole, &mut parts, 5, "channel", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_convective_outflow_on_patches_has_the_whole_domains_bits() {
    // The outflow speed U_c is the mean over the whole outflow side, which
    // on [2, 2, 1] and [1, 4, 1] patches several patches share; the walls
    // slow the flow that leaves, so a mean over one patch's part of the
    // side would give other bits.
    for counts in [[4, 1, 1], [2, 2, 1], [1, 4, 1]] {
        let convective = Outflow::Convective;
        let (mut whole, mut parts) = (
            channel(None, false, convective),
            channel(Some(counts), true, convective),
        );
        let what = format!("convective outflow {counts:?}");
        run_and_compare(&mut whole, &mut parts, 6, &what, Match::Bits)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // With the projection on the patches too: the Poisson tolerance.
    let (mut whole, mut parts) = (
        channel(None, false, Outflow::Convective),
        channel(Some([2, 2, 1]), false, Outflow::Convective),
    );
    run_and_compare(
        &mut whole,
        &mut parts,
        4,
        "convective, solved on patches",
        Match::Within(1e-6),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A 16 x 8 channel with an open outflow of kind `outflow`, whole or on
/// `counts` patches, its projection replicated or on the patches.
fn channel(counts: Option<[usize; 3]>, replicated: bool, outflow: Outflow) -> IncompressibleFlow {
    let grid = Grid::new([16, 8, 1], [2.0, 1.0, 1.0], [0.0; 3]).unwrap();
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let builder = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.05)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::MINUS_X, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .outflow_of(Side::PLUS_X, outflow);
    match (counts, replicated) {
        (Some(counts), false) => builder.patches(layout(&grid, counts, 1), Rc::new(SingleProcess)),
        (Some(counts), true) => builder
            .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
            .replicated_projection(),
        (None, _) => builder,
    }
    .build()
    .unwrap()
}

#[test]
fn a_flow_past_a_body_on_patches_has_the_whole_domains_bits_and_force() {
    // The disc and its force band lie across the seams of [4, 2, 1]
    // (x = 0.5, y = 0.5) and [2, 4, 1] (y = 0.5, 0.75): its forcing and
    // its force reductions read several patches' velocity. With the
    // projection replicated, the bits of the whole flow.
    let grid = disc_channel_grid();
    let patch = grid.whole_domain(1);
    for counts in [[4, 2, 1], [2, 4, 1]] {
        let mut whole = past_a_disc(&patch).build().unwrap();
        let mut parts = past_a_disc(&patch)
            .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
            .replicated_projection()
            .build()
            .unwrap();
        assert_eq!(whole.force_unavailable("disc"), None);
        compare_with_force(
            &mut whole,
            &mut parts,
            5,
            &format!("past a disc {counts:?}"),
            Match::Bits,
        );
    }
}

#[test]
fn a_flow_past_a_body_with_its_projection_on_patches_matches_the_whole_flow() {
    // The solve on the patches closes the disc's faces on every patch's
    // levels; [2, 2, 1] (16 x 8 patches) smooths its finest level on the
    // patches and agglomerates the next, which is still a closed level
    // (taken from the whole hierarchy); [2, 1, 1] (16 x 16) smooths two
    // levels on the patches.
    let grid = disc_channel_grid();
    let patch = grid.whole_domain(1);
    for (counts, on_patches) in [([2, 2, 1], 1), ([2, 1, 1], 2)] {
        let mut whole = past_a_disc(&patch).build().unwrap();
        let mut parts = past_a_disc(&patch)
            .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
            .build()
            .unwrap();
        assert_eq!(
            parts.projection_levels().map(|(_, p)| p),
            Some(on_patches),
            "{counts:?}"
        );
        let what = format!("past a disc, solved on {counts:?}");
        compare_with_force(&mut whole, &mut parts, 5, &what, Match::Within(1e-8));
        // The projection removes the divergence (nine orders of magnitude
        // of its square here) as well as on the whole domain.
        let (p, w) = (parts.last_projection(), whole.last_projection());
        assert!(
            p.divergence_after <= 1e-9 * p.divergence_before
                && (p.divergence_after - w.divergence_after).abs() <= 0.1 * w.divergence_after,
            "{what}: |div u|^2 {:e} from {:e} on patches, {:e} whole",
            p.divergence_after,
            p.divergence_before,
            w.divergence_after
        );
    }
    // A closed box with a body has no Dirichlet side: the solve's means
    // are over every patch's fluid cells (the null space is a constant
    // there). The lid-driven cavity with a disc, on [2, 2, 1] (its next
    // level agglomerated and closed).
    let grid = cavity_grid();
    let whole_patch = grid.whole_domain(1);
    let with_disc = || cavity_with_disc(&whole_patch);
    let mut whole = with_disc().build().unwrap();
    let mut parts = with_disc()
        .patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess))
        .build()
        .unwrap();
    assert_eq!(parts.projection_levels(), Some((4, 1)));
    run_and_compare(
        &mut whole,
        &mut parts,
        5,
        "a disc in the cavity, solved on [2, 2, 1]",
        Match::Within(1e-8),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Steps both flows `steps` times, comparing every field as `how` says
/// after each step and the force on the disc (bit for bit, or to the same
/// relative tolerance of its largest component).
fn compare_with_force(
    whole: &mut IncompressibleFlow,
    parts: &mut IncompressibleFlow,
    steps: usize,
    what: &str,
    how: Match,
) {
    for step in 0..steps {
        // `run_and_compare` names its own step (0) after this one.
        let what = format!("{what}, round {step}");
        run_and_compare(whole, parts, 1, &what, how).unwrap_or_else(|e| panic!("{e}"));
        let (a, b) = (
            whole.body_force("disc").unwrap(),
            parts.body_force("disc").unwrap(),
        );
        let close = match how {
            Match::Bits => a.map(f64::to_bits) == b.map(f64::to_bits),
            Match::Within(tolerance) => {
                let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                a.iter()
                    .zip(&b)
                    .all(|(x, y)| (x - y).abs() <= tolerance * scale)
            }
        };
        assert!(close, "{what}: force {b:?} on patches, {a:?} whole");
        assert!(
            a[0] > 0.0,
            "{what}: the flow pushes the disc downstream ({a:?})"
        );
    }
}

#[test]
fn a_projection_on_one_patch_gives_the_whole_flows_bits() {
    // The decomposed path (the divergence graph, the windows, the solve on
    // patches, the gather of psi and its ghosts) with a single patch:
    // every reduction is then the whole domain's.
    let grid = cavity_grid();
    let patch = grid.whole_domain(1);
    let mut whole = cavity(&patch).build().unwrap();
    let mut parts = cavity(&patch)
        .patches(layout(&grid, [1, 1, 1], 1), Rc::new(SingleProcess))
        .build()
        .unwrap();
    assert!(parts.projection_levels().is_some());
    run_and_compare(&mut whole, &mut parts, 4, "cavity [1, 1, 1]", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
    let grid = taylor_green_grid();
    let patch = grid.whole_domain(3);
    let build = || taylor_green(&patch, SpaceOrder::Fourth);
    let mut whole = build().build().unwrap();
    let mut parts = build()
        .patches(layout(&grid, [1, 1, 1], 3), Rc::new(SingleProcess))
        .build()
        .unwrap();
    set_taylor_green(&whole);
    set_taylor_green(&parts);
    run_and_compare(
        &mut whole,
        &mut parts,
        2,
        "Taylor-Green [1, 1, 1]",
        Match::Bits,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (mut whole, mut parts) = (
        channel(None, false, Outflow::ZeroGradient),
        channel(Some([1, 1, 1]), false, Outflow::ZeroGradient),
    );
    run_and_compare(&mut whole, &mut parts, 3, "channel [1, 1, 1]", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn flows_with_their_projection_on_patches_match_the_whole_flow() {
    let close = Match::Within(1e-9);
    let grid = cavity_grid();
    let patch = grid.whole_domain(1);
    // 24 x 16 cells: patches of 12 x 8 and 8 x 16 smooth their finest
    // level on the patches; those of 6 x 8 are agglomerated at once.
    for (counts, on_patches) in [([2, 2, 1], 1), ([3, 1, 1], 1), ([4, 2, 1], 0)] {
        let mut whole = cavity(&patch).build().unwrap();
        let mut parts = cavity(&patch)
            .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
            .build()
            .unwrap();
        assert_eq!(
            parts.projection_levels(),
            Some((4, on_patches)),
            "{counts:?}"
        );
        run_and_compare(
            &mut whole,
            &mut parts,
            6,
            &format!("cavity {counts:?}"),
            close,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let grid = taylor_green_grid();
    for (order, ghosts, counts) in [
        (SpaceOrder::Second, 1, [2, 1, 2]),
        (SpaceOrder::Fourth, 3, [2, 2, 1]),
    ] {
        let patch = grid.whole_domain(ghosts);
        let mut whole = taylor_green(&patch, order).build().unwrap();
        let mut parts = taylor_green(&patch, order)
            .patches(layout(&grid, counts, ghosts), Rc::new(SingleProcess))
            .build()
            .unwrap();
        set_taylor_green(&whole);
        set_taylor_green(&parts);
        let what = format!("Taylor-Green {order:?} {counts:?}");
        run_and_compare(&mut whole, &mut parts, 3, &what, close).unwrap_or_else(|e| panic!("{e}"));
    }
    let (mut whole, mut parts) = (
        channel(None, false, Outflow::ZeroGradient),
        channel(Some([4, 1, 1]), false, Outflow::ZeroGradient),
    );
    run_and_compare(&mut whole, &mut parts, 5, "channel [4, 1, 1]", close)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_flow_with_its_projection_on_patches_restarts_with_its_own_bits() {
    // The Poisson guess is the flow's own psi, so a restart from the
    // state (what a checkpoint holds) continues with the same bits.
    let build = cavity_on_2_by_2_patches;
    let (mut first, mut twin) = (build(), build());
    run_and_compare(&mut first, &mut twin, 3, "twins", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut restarted = build();
    copy_state(&first, &mut restarted);
    run_and_compare(&mut first, &mut restarted, 3, "restarted", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_velocity_written_into_a_running_flow_on_patches_is_where_it_continues() {
    // With the projection on the patches the state lives on them; a
    // velocity and psi written into the flow between steps (a restart
    // into a flow that has already stepped) must be where the next step
    // starts from, not what the patches held.
    let build = cavity_on_2_by_2_patches;
    let (mut ahead, mut behind) = (build(), build());
    for _ in 0..3 {
        let dt = ahead.stable_time_step(0.5, 0.2).unwrap();
        ahead.step(dt).unwrap();
    }
    let dt = behind.stable_time_step(0.5, 0.2).unwrap();
    behind.step(dt).unwrap();
    copy_state(&ahead, &mut behind);
    run_and_compare(&mut ahead, &mut behind, 3, "written", Match::Bits)
        .unwrap_or_else(|e| panic!("{e}"));
    // Each patch's own velocity is the whole domain's there.
    for (index, graph) in behind.momentum_graphs() {
        let offset = layout(&cavity_grid(), [2, 2, 1], 1)
            .patch(index)
            .unwrap()
            .offset();
        let tag = watershed_exprgraph::Tag::new("u", watershed_exprgraph::Context::StateN);
        let (values, own) = graph
            .with_field::<XFace, _>(&tag, |u| (u.values().unwrap().to_vec(), u.layout().clone()))
            .unwrap();
        behind
            .with_velocity::<XFace, _>(|whole| {
                let at = whole.layout();
                for p in own.interior().iter() {
                    let global = [0, 1, 2].map(|a| p[a] + offset[a] as isize);
                    assert_eq!(
                        values[own.linear_index(p)].to_bits(),
                        whole.values().unwrap()[at.linear_index(global)].to_bits(),
                        "u of patch {index} at {p:?}"
                    );
                }
            })
            .unwrap();
    }
}

#[test]
fn a_flow_on_patches_that_diverges_names_the_grids_cell() {
    // A velocity spike written into a running flow on 2 x 2 patches, in
    // the last patch (cells 12.. along x, 8.. along y): the stage that
    // overflows names a cell of the grid near the spike, not the patch's
    // own numbering (which would put it near [6, 4]).
    let mut flow = cavity_on_2_by_2_patches();
    let dt = flow.stable_time_step(0.5, 0.2).unwrap();
    flow.step(dt).unwrap();
    let spike = [18isize, 12, 0];
    flow.with_velocity_mut::<XFace, _>(|u| {
        let at = u.layout().linear_index(spike);
        u.values_mut().unwrap()[at] = 1e200;
    })
    .unwrap();
    let error = flow.step(dt).unwrap_err();
    let SolverError::Diverged {
        equation,
        cell,
        step,
        ..
    } = &error
    else {
        panic!("expected Diverged, got {error:?}");
    };
    assert!(equation.starts_with("momentum ("), "{equation}");
    assert_eq!(*step, 2);
    assert!(
        (0..2).all(|a| (cell[a] - spike[a]).abs() <= 2),
        "the cell {cell:?} is not beside the spike at {spike:?}: {error}"
    );
}

/// The setup error of building `builder`, checked to name `words`.
fn refused(builder: IncompressibleFlowBuilder, words: &[&str]) {
    let error = builder.build().unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, SolverError::Setup { .. }), "{error:?}");
    for word in words {
        assert!(message.contains(word), "{message} does not name {word}");
    }
}

#[test]
fn what_does_not_decompose_is_refused_by_name() {
    let grid = cavity_grid();
    let whole = grid.whole_domain(1);
    let split = |builder: IncompressibleFlowBuilder| {
        builder.patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess))
    };
    let other = Grid::new([12, 16, 1], [1.5, 1.0, 1.0], [0.0; 3]).unwrap();
    refused(
        cavity(&whole).patches(layout(&other, [2, 2, 1], 1), Rc::new(SingleProcess)),
        &["[12, 16, 1]", "[24, 16, 1]"],
    );
    let part = layout(&grid, [2, 1, 1], 1).patch(1).unwrap();
    refused(split(cavity(&part)), &["not the whole domain"]);
    // Fourth order reads 3 layers; the patches have 1, the domain 3.
    refused(
        cavity(&grid.whole_domain(3))
            .space_order(SpaceOrder::Fourth)
            .patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess)),
        &["1 ghost layers", "at least the 3"],
    );
    // More ghost layers than the whole domain's: windows would not fit.
    refused(
        cavity(&whole).patches(layout(&grid, [2, 2, 1], 2), Rc::new(SingleProcess)),
        &["2 ghost layers", "at most the whole domain's 1"],
    );
}

#[test]
fn the_steps_reductions_on_patches_add_every_patchs_part() {
    // Four patches along x in one process, a velocity without symmetry
    // between them: the speeds, the energy, the enstrophy and the norms
    // of div(u*) and div(u) after each step are the whole domain's (to
    // the solver's tolerance), each patch's part counted once.
    let grid = taylor_green_grid();
    let patch = grid.whole_domain(1);
    let whole = taylor_green(&patch, SpaceOrder::Second).build().unwrap();
    let parts = taylor_green(&patch, SpaceOrder::Second)
        .patches(layout(&grid, [4, 1, 1], 1), Rc::new(SingleProcess))
        .build()
        .unwrap();
    for flow in [&whole, &parts] {
        set_taylor_green(flow);
        flow.set_velocity::<YFace>(|[x, y, z]| {
            -x.cos() * y.sin() * z.cos() + if x > 5.0 { 0.4 } else { 0.0 }
        })
        .unwrap();
    }
    let (mut whole, mut parts) = (whole, parts);
    for step in 0..3 {
        let dt = whole.stable_time_step(0.5, 0.2).unwrap();
        assert_eq!(
            dt.to_bits(),
            parts.stable_time_step(0.5, 0.2).unwrap().to_bits(),
            "step {step}: the speeds' maxima"
        );
        whole.step(dt).unwrap();
        parts.step(dt).unwrap();
        let close = |a: f64, b: f64, what: &str| {
            assert!(
                (a - b).abs() <= 1e-9 * a.abs(),
                "step {step}: {what} {b:e} on patches, {a:e} whole"
            );
        };
        close(
            whole.kinetic_energy().unwrap(),
            parts.kinetic_energy().unwrap(),
            "kinetic energy",
        );
        close(
            whole.enstrophy().unwrap().unwrap(),
            parts.enstrophy().unwrap().unwrap(),
            "enstrophy",
        );
        let (w, p) = (whole.last_projection(), parts.last_projection());
        close(w.divergence_before, p.divergence_before, "|div(u*)|");
        assert!(
            p.divergence_after <= 1e-6 * p.divergence_before,
            "step {step}: |div u| {:e} after {:e}",
            p.divergence_after,
            p.divergence_before
        );
    }
}

#[test]
fn a_flow_on_patches_gathers_its_whole_fields_only_when_they_are_read() {
    // Stepped and asked only for its time step and energy, the flow on
    // patches gathers nothing; read, it gathers once, and what it gives
    // has the bits of a twin read after every step.
    let grid = taylor_green_grid();
    let patch = grid.whole_domain(1);
    let build = || {
        let flow = taylor_green(&patch, SpaceOrder::Second)
            .patches(layout(&grid, [2, 1, 2], 1), Rc::new(SingleProcess))
            .build()
            .unwrap();
        set_taylor_green(&flow);
        flow
    };
    let gathers = |flow: &IncompressibleFlow| {
        flow.take_recording()
            .iter()
            .filter(|e| e.name == "gather of the velocity and psi")
            .count()
    };
    let (mut lazy, mut read) = (build(), build());
    let epoch = std::time::Instant::now();
    lazy.start_recording(epoch);
    read.start_recording(epoch);
    for _ in 0..3 {
        let dt = lazy.stable_time_step(0.5, 0.2).unwrap();
        lazy.step(dt).unwrap();
        lazy.kinetic_energy().unwrap();
        lazy.enstrophy().unwrap().unwrap();
        read.step(dt).unwrap();
        read.with_velocity::<XFace, _>(|_| ()).unwrap();
    }
    assert_eq!(gathers(&lazy), 0, "gathers while stepping");
    assert_eq!(gathers(&read), 3, "gathers of the twin read every step");
    lazy.start_recording(epoch);
    compare(&read, &lazy, "read at the end", Match::Bits).unwrap_or_else(|e| panic!("{e}"));
    compare(&read, &lazy, "read again", Match::Bits).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(gathers(&lazy), 1, "gathers of two reads after stepping");
    // A velocity written after stepping is where the next step starts
    // from (the write follows a gather, so nothing of the patches' state
    // is lost).
    for flow in [&read, &lazy] {
        flow.with_velocity_mut::<XFace, _>(|u| {
            let at = u.layout().linear_index([3, 4, 5]);
            u.values_mut().unwrap()[at] += 0.01;
        })
        .unwrap();
    }
    run_and_compare(
        &mut read,
        &mut lazy,
        2,
        "written after stepping",
        Match::Bits,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A body's force and a convective outflow's speed are reduced on the
    // patches too: such flows gather nothing while stepping either, and
    // agree with the whole domain's (the disc's force to the solver's
    // tolerance, as `compare_with_force` checks on more layouts).
    let grid = disc_channel_grid();
    let patch = grid.whole_domain(1);
    let mut whole = past_a_disc(&patch).build().unwrap();
    let mut disc = past_a_disc(&patch)
        .patches(layout(&grid, [2, 2, 1], 1), Rc::new(SingleProcess))
        .build()
        .unwrap();
    let mut outflow = channel(Some([2, 2, 1]), false, Outflow::Convective);
    let mut outflow_whole = channel(None, false, Outflow::Convective);
    disc.start_recording(epoch);
    outflow.start_recording(epoch);
    for step in 0..3 {
        let dt = whole.stable_time_step(0.5, 0.2).unwrap();
        whole.step(dt).unwrap();
        disc.step(dt).unwrap();
        let (a, b) = (
            whole.body_force("disc").unwrap(),
            disc.body_force("disc").unwrap(),
        );
        let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            (0..2).all(|k| (a[k] - b[k]).abs() <= 1e-8 * scale),
            "step {step}: force {b:?} on patches, {a:?} whole"
        );
        let dt = outflow_whole.stable_time_step(0.5, 0.2).unwrap();
        outflow_whole.step(dt).unwrap();
        outflow.step(dt).unwrap();
        let (a, b) = (
            outflow_whole.kinetic_energy().unwrap(),
            outflow.kinetic_energy().unwrap(),
        );
        assert!(
            (a - b).abs() <= 1e-9 * a,
            "step {step}: energy {b:e} with the outflow on patches, {a:e} whole"
        );
    }
    assert_eq!(gathers(&disc), 0, "gathers of the flow past a disc");
    assert_eq!(gathers(&outflow), 0, "gathers of the convective outflow");
}

#[test]
fn a_patchs_velocity_after_a_step_is_the_whole_domains_at_every_point() {
    // What a transport solver on the same patch carries without a gather
    // (`with_patch_velocity`): every allocated point of the patch, its
    // seams, corners and physical ghosts included, holds the whole
    // domain's value there; after a write into the flow, nothing.
    let check = |flow: &mut IncompressibleFlow, layout: &PatchLayout, what: &str| {
        for step in 0..2 {
            let dt = flow.stable_time_step(0.5, 0.2).unwrap();
            flow.step(dt).unwrap();
            for index in flow.owned_patches().unwrap() {
                let patch = layout.patch(index).unwrap();
                let offset = patch.offset().map(|o| o as isize);
                let part = flow
                    .with_patch_velocity::<XFace, _>(&patch, |u| {
                        (u.values().unwrap().to_vec(), u.layout().clone())
                    })
                    .unwrap()
                    .unwrap_or_else(|| panic!("{what}: no velocity of patch {index}"));
                flow.with_velocity::<XFace, _>(|whole| {
                    let (values, own) = &part;
                    let at = whole.layout();
                    for p in own.allocated().iter() {
                        let global = [0, 1, 2].map(|a| p[a] + offset[a]);
                        assert_eq!(
                            values[own.linear_index(p)].to_bits(),
                            whole.values().unwrap()[at.linear_index(global)].to_bits(),
                            "{what}, step {step}: u of patch {index} at {p:?}"
                        );
                    }
                })
                .unwrap();
            }
        }
        let patch = layout.patch(0).unwrap();
        flow.with_velocity_mut::<XFace, _>(|_| ()).unwrap();
        assert!(
            flow.with_patch_velocity::<XFace, _>(&patch, |_| ())
                .unwrap()
                .is_none(),
            "{what}: a patch's velocity after a write"
        );
    };
    let grid = cavity_grid();
    let mut cavity = cavity_on_2_by_2_patches();
    check(&mut cavity, &layout(&grid, [2, 2, 1], 1), "cavity");
    let grid = taylor_green_grid();
    let counts = [2, 1, 2];
    let mut vortex = taylor_green(&grid.whole_domain(1), SpaceOrder::Second)
        .patches(layout(&grid, counts, 1), Rc::new(SingleProcess))
        .build()
        .unwrap();
    set_taylor_green(&vortex);
    check(&mut vortex, &layout(&grid, counts, 1), "Taylor-Green");
}
