//! A decomposed flow's state read and written patch by patch (plan step 5
//! of issue 51): a flow whose state lives on patches, set, stepped, read
//! per patch and restored per patch, never allocates its whole-domain
//! fields, and every value it gives is the one a twin that reads the
//! whole domain gives, bit for bit.

use crate::patched_flow_case::{
    Match, cavity, cavity_grid, run_and_compare, set_taylor_green, taylor_green, taylor_green_grid,
};
use std::rc::Rc;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Location, PatchLayout, SpatialField, XFace, YFace, ZFace,
};
use watershed_solvers::{IncompressibleFlow, SolverError, SpaceOrder};

fn vortex_layout(grid: &Grid) -> PatchLayout {
    PatchLayout::new(grid, [2, 1, 2], GhostWidth::uniform(1)).unwrap()
}

fn vortex_on_patches() -> IncompressibleFlow {
    let grid = taylor_green_grid();
    taylor_green(&grid.whole_domain(1), SpaceOrder::Second)
        .patches(vortex_layout(&grid), Rc::new(SingleProcess))
        .build()
        .unwrap()
}

/// A copy of `field` (what a checkpoint keeps of it).
fn copy_of<L: Location>(field: &SpatialField<L>) -> SpatialField<L> {
    let mut copy =
        SpatialField::<L>::new(field.name(), field.layout().patch(), Device::Cpu).unwrap();
    copy.values_mut()
        .unwrap()
        .copy_from_slice(field.values().unwrap());
    copy
}

/// Every allocated point of `part` (a patch's field) against the same
/// point of `whole`, bit for bit; `interior` limits it to the interior.
fn same_as_whole<L: Location>(
    part: &SpatialField<L>,
    whole: &SpatialField<L>,
    interior: bool,
    what: &str,
) {
    let own = part.layout();
    let offset = own.patch().offset().map(|o| o as isize);
    let points = if interior {
        own.interior()
    } else {
        own.allocated()
    };
    let (values, all) = (part.values().unwrap(), whole.values().unwrap());
    for p in points.iter() {
        let global = [0, 1, 2].map(|a| p[a] + offset[a]);
        assert_eq!(
            values[own.linear_index(p)].to_bits(),
            all[whole.layout().linear_index(global)].to_bits(),
            "{what} at {p:?}"
        );
    }
}

/// Each owned patch's velocity, `psi` and pressure read per patch against
/// `whole`'s (a twin that reads the whole domain).
fn patches_equal_whole(flow: &IncompressibleFlow, whole: &IncompressibleFlow, what: &str) {
    flow.refresh_patches().unwrap();
    let layout = flow.patch_layout().unwrap().clone();
    for index in flow.owned_patches().unwrap() {
        let patch = layout.patch(index).unwrap();
        let read = |axis: usize| {
            let label = format!("{what}: component {axis} of patch {index}");
            match axis {
                0 => flow
                    .with_patch_velocity::<XFace, _>(&patch, |u| {
                        whole.with_velocity::<XFace, _>(|w| same_as_whole(u, w, false, &label))
                    })
                    .unwrap()
                    .unwrap()
                    .unwrap(),
                1 => flow
                    .with_patch_velocity::<YFace, _>(&patch, |u| {
                        whole.with_velocity::<YFace, _>(|w| same_as_whole(u, w, false, &label))
                    })
                    .unwrap()
                    .unwrap()
                    .unwrap(),
                _ => flow
                    .with_patch_velocity::<ZFace, _>(&patch, |u| {
                        whole.with_velocity::<ZFace, _>(|w| same_as_whole(u, w, false, &label))
                    })
                    .unwrap()
                    .unwrap()
                    .unwrap(),
            }
        };
        (0..3).for_each(read);
        flow.with_patch_projection_potential(&patch, |psi| {
            whole.with_projection_potential(|w| {
                same_as_whole(psi, w, true, &format!("{what}: psi of patch {index}"))
            })
        })
        .unwrap()
        .unwrap()
        .unwrap();
        flow.with_patch_pressure(&patch, |p| {
            whole.with_pressure(|w| {
                same_as_whole(p, w, true, &format!("{what}: p of patch {index}"))
            })
        })
        .unwrap()
        .unwrap()
        .unwrap();
    }
}

#[test]
fn a_flow_on_patches_set_stepped_and_read_per_patch_forms_no_whole_field() {
    let (mut lazy, mut read) = (vortex_on_patches(), vortex_on_patches());
    set_taylor_green(&lazy);
    set_taylor_green(&read);
    assert!(
        !lazy.graph().holds_storage(),
        "the whole domain's fields after set_velocity"
    );
    // Before a step, the per-patch reads give what the whole domain
    // holds (the twin gathers it).
    patches_equal_whole(&lazy, &read, "set");
    for step in 0..3 {
        let dt = lazy.stable_time_step(0.5, 0.2).unwrap();
        assert_eq!(
            dt.to_bits(),
            read.stable_time_step(0.5, 0.2).unwrap().to_bits(),
            "dt of step {step}"
        );
        lazy.step(dt).unwrap();
        read.step(dt).unwrap();
        assert_eq!(
            lazy.kinetic_energy().unwrap().to_bits(),
            read.kinetic_energy().unwrap().to_bits()
        );
        assert_eq!(
            lazy.enstrophy().unwrap().map(f64::to_bits),
            read.enstrophy().unwrap().map(f64::to_bits)
        );
        patches_equal_whole(&lazy, &read, &format!("step {step}"));
    }
    assert!(
        !lazy.graph().holds_storage(),
        "the whole domain's fields after steps and per-patch reads"
    );
    assert!(
        read.graph().holds_storage(),
        "the twin read the whole domain"
    );
    // A read of the whole domain forms it, with the twin's bits.
    run_and_compare(
        &mut read,
        &mut lazy,
        1,
        "read whole after per-patch",
        Match::Bits,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(lazy.graph().holds_storage());
}

#[test]
fn a_flow_restored_patch_by_patch_continues_with_its_own_bits_and_no_whole_field() {
    // What a checkpoint per rank keeps (each patch's velocity with its
    // ghosts, `psi`, the pressure's scale), put back into a fresh flow
    // on the same layout: the next steps have the bits of the flow that
    // was never interrupted, and the restored flow forms no whole field.
    let mut straight = vortex_on_patches();
    set_taylor_green(&straight);
    for _ in 0..2 {
        let dt = straight.stable_time_step(0.5, 0.2).unwrap();
        straight.step(dt).unwrap();
    }
    let mut restored = vortex_on_patches();
    straight.refresh_patches().unwrap();
    let layout = straight.patch_layout().unwrap().clone();
    for index in straight.owned_patches().unwrap() {
        let patch = layout.patch(index).unwrap();
        let u = straight
            .with_patch_velocity::<XFace, _>(&patch, copy_of)
            .unwrap()
            .unwrap();
        restored.restore_patch_velocity(&u).unwrap();
        let v = straight
            .with_patch_velocity::<YFace, _>(&patch, copy_of)
            .unwrap()
            .unwrap();
        restored.restore_patch_velocity(&v).unwrap();
        let w = straight
            .with_patch_velocity::<ZFace, _>(&patch, copy_of)
            .unwrap()
            .unwrap();
        restored.restore_patch_velocity(&w).unwrap();
        let psi = straight
            .with_patch_projection_potential(&patch, copy_of)
            .unwrap()
            .unwrap();
        restored.restore_patch_projection_potential(&psi).unwrap();
    }
    restored
        .finish_patch_restore(straight.pressure_scale(), straight.time(), straight.steps())
        .unwrap();
    assert!(!restored.graph().holds_storage());
    for step in 0..3 {
        let dt = straight.stable_time_step(0.5, 0.2).unwrap();
        assert_eq!(
            dt.to_bits(),
            restored.stable_time_step(0.5, 0.2).unwrap().to_bits(),
            "dt of step {step} after the restart"
        );
        straight.step(dt).unwrap();
        restored.step(dt).unwrap();
        assert_eq!(
            straight.kinetic_energy().unwrap().to_bits(),
            restored.kinetic_energy().unwrap().to_bits(),
            "energy after step {step} of the restart"
        );
    }
    assert!(!restored.graph().holds_storage());
    run_and_compare(
        &mut straight,
        &mut restored,
        1,
        "restored per patch",
        Match::Bits,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_patch_restore_that_does_not_fit_is_refused_by_name() {
    let mut flow = vortex_on_patches();
    let grid = taylor_green_grid();
    // A patch of another layout.
    let other = PatchLayout::new(&grid, [1, 2, 1], GhostWidth::uniform(1))
        .unwrap()
        .patch(1)
        .unwrap();
    let stored = SpatialField::<XFace>::new("u", &other, Device::Cpu).unwrap();
    match flow.restore_patch_velocity(&stored) {
        Err(SolverError::Setup { reason, .. }) => {
            assert!(
                reason.contains("`u`") && reason.contains("owns no such patch"),
                "{reason}"
            );
        }
        other => panic!("a patch of another layout: {other:?}"),
    }
    // A flow whose state lives on the whole domain has no patches to
    // restore.
    let mut whole = taylor_green(&grid.whole_domain(1), SpaceOrder::Second)
        .build()
        .unwrap();
    let psi = SpatialField::<CellCentre>::new(
        "psi",
        &vortex_layout(&grid).patch(0).unwrap(),
        Device::Cpu,
    )
    .unwrap();
    match whole.restore_patch_projection_potential(&psi) {
        Err(SolverError::Setup { reason, .. }) => {
            assert!(
                reason.contains("`psi`") && reason.contains("does not live on patches"),
                "{reason}"
            );
        }
        other => panic!("an undecomposed flow: {other:?}"),
    }
    match flow.finish_patch_restore(f64::NAN, 1.0, 3) {
        Err(SolverError::Setup { reason, .. }) => {
            assert!(reason.contains("pressure's scale"), "{reason}");
        }
        other => panic!("a scale that is not finite: {other:?}"),
    }
}

#[test]
fn a_velocity_set_on_patches_that_is_not_finite_is_named_at_the_first_step() {
    let mut flow = vortex_on_patches();
    set_taylor_green(&flow);
    // One point of v, in the second patch along z.
    let bad = [3usize, 5, 12];
    let h = taylor_green_grid().spacing();
    // v's faces lie at (i + 1/2, j, k + 1/2) cell widths.
    let face = [bad[0] as f64 + 0.5, bad[1] as f64, bad[2] as f64 + 0.5];
    flow.set_velocity::<YFace>(move |x| {
        if (0..3).all(|a| (x[a] / h[a] - face[a]).abs() < 1e-9) {
            f64::NAN
        } else {
            0.1
        }
    })
    .unwrap();
    match flow.step(0.01) {
        Err(SolverError::NonFiniteInput { field, cell, .. }) => {
            assert_eq!(field, "v");
            assert_eq!(cell, bad.map(|c| c as isize));
        }
        other => panic!("a velocity with a NaN: {other:?}"),
    }
    assert!(!flow.graph().holds_storage());
}

#[test]
fn reads_on_rank_0_of_one_process_are_the_whole_domains() {
    // One process is rank 0: `on_root_with_whole` runs its closure with
    // the whole domain gathered, and a later read on every rank (here the
    // same one) finds it gathered again, with the same bits.
    let (mut flow, mut twin) = (vortex_on_patches(), vortex_on_patches());
    set_taylor_green(&flow);
    set_taylor_green(&twin);
    let dt = flow.stable_time_step(0.5, 0.2).unwrap();
    flow.step(dt).unwrap();
    twin.step(dt).unwrap();
    assert!(!flow.graph().holds_storage());
    let on_root = flow
        .on_root_with_whole(|| {
            flow.with_pressure(|p| p.values().unwrap().to_vec())
                .unwrap()
        })
        .unwrap()
        .expect("one process is rank 0");
    let whole = twin
        .with_pressure(|p| p.values().unwrap().to_vec())
        .unwrap();
    assert_eq!(
        on_root.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    run_and_compare(
        &mut twin,
        &mut flow,
        1,
        "after a read on rank 0",
        Match::Bits,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_window_of_a_flow_on_patches_is_the_whole_domains_box_without_forming_it() {
    // Lines and rows across several patches (what the cases read for
    // their checks), gathered from the patches: the whole domain's values
    // at every interior point of the box, and no whole field formed.
    let (mut lazy, mut twin) = (vortex_on_patches(), vortex_on_patches());
    set_taylor_green(&lazy);
    set_taylor_green(&twin);
    for _ in 0..2 {
        let dt = twin.stable_time_step(0.5, 0.2).unwrap();
        twin.step(dt).unwrap();
        lazy.step(dt).unwrap();
    }
    let boxes = [
        ([8, 0, 3], [1, 16, 1]),
        ([0, 5, 0], [16, 2, 16]),
        ([6, 6, 6], [5, 3, 4]),
    ];
    for (offset, cells) in boxes {
        let what = format!("{cells:?} cells from {offset:?}");
        let part = lazy
            .with_velocity_window::<XFace, _>(offset, cells, |u| {
                (u.values().unwrap().to_vec(), u.layout().clone())
            })
            .unwrap();
        twin.with_velocity::<XFace, _>(|whole| {
            let (values, layout) = &part;
            // Periodic along x: no face after the box's last cell.
            assert_eq!(layout.interior().extent(), cells);
            for p in layout.interior().iter() {
                let global = [0, 1, 2].map(|a| p[a] + offset[a] as isize);
                assert_eq!(
                    values[layout.linear_index(p)].to_bits(),
                    whole.values().unwrap()[whole.layout().linear_index(global)].to_bits(),
                    "u, {what}, at {p:?}"
                );
            }
        })
        .unwrap();
        let pressure = lazy
            .with_pressure_window(offset, cells, |p| {
                (p.values().unwrap().to_vec(), p.layout().clone())
            })
            .unwrap();
        twin.with_pressure(|whole| {
            let (values, layout) = &pressure;
            for p in layout.interior().iter() {
                let global = [0, 1, 2].map(|a| p[a] + offset[a] as isize);
                assert_eq!(
                    values[layout.linear_index(p)].to_bits(),
                    whole.values().unwrap()[whole.layout().linear_index(global)].to_bits(),
                    "p, {what}, at {p:?}"
                );
            }
        })
        .unwrap();
    }
    assert!(!lazy.graph().holds_storage());
    match lazy.with_velocity_window::<YFace, _>([10, 0, 0], [8, 1, 1], |_| ()) {
        Err(SolverError::Field(error)) => {
            let text = error.to_string();
            assert!(text.contains("10") && text.contains('8'), "{text}");
        }
        other => panic!("a box beyond the grid: {other:?}"),
    }
}

#[test]
fn a_flow_on_patches_starting_at_rest_steps_without_forming_the_whole_domain() {
    // The cavity is never set: its first time step takes the largest
    // speed from the patches (and the lid's), the whole domain's bits.
    let grid = cavity_grid();
    let mut whole = cavity(&grid.whole_domain(1)).build().unwrap();
    let mut parts = cavity(&grid.whole_domain(1))
        .patches(
            PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap(),
            Rc::new(SingleProcess),
        )
        .build()
        .unwrap();
    for step in 0..3 {
        let dt = whole.stable_time_step(0.5, 0.2).unwrap();
        assert_eq!(
            dt.to_bits(),
            parts.stable_time_step(0.5, 0.2).unwrap().to_bits(),
            "dt of step {step}"
        );
        whole.step(dt).unwrap();
        parts.step(dt).unwrap();
    }
    assert!(!parts.graph().holds_storage());
    run_and_compare(
        &mut whole,
        &mut parts,
        1,
        "the cavity from rest",
        Match::Within(1e-9),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
