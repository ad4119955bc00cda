//! The multigrid on patches (`PatchedMultigrid`): V-cycles equal the whole
//! domain's bit for bit at every allocated point (no reduction steers
//! them but the stopping test), CG equals it to rounding (its inner
//! products add per-patch sums in patch order), the levels it decomposes,
//! and its refusals. The same across MPI ranks: `examples/mpi_poisson.rs`.

#[path = "../support/patched_poisson_case.rs"]
mod case;

use case::{
    Problem, cell_field, channel, closed_box, floor_box, patch_fields, periodic_box, same_bits,
};
use std::rc::Rc;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{CellCentre, GhostWidth, Grid, PatchLayout, SpatialField};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, Multigrid, MultigridOptions, PatchedMultigrid,
    SolveReport, SolverError, SpaceOrder,
};

fn options() -> MultigridOptions {
    MultigridOptions {
        relative_tolerance: 1e-8,
        ..MultigridOptions::default()
    }
}

/// The whole domain's solve of `problem`: (solution, report).
fn whole(problem: &Problem, cg: bool) -> (SpatialField<CellCentre>, SolveReport) {
    let patch = problem.grid.whole_domain(1);
    let rhs = cell_field(&patch, "b", problem.rhs);
    let mut x = cell_field(&patch, "x", |_| 0.0);
    let mut multigrid =
        Multigrid::with_order(&patch, problem.conditions.clone(), options(), problem.order)
            .unwrap();
    let report = if cg {
        multigrid.solve_preconditioned_cg(&rhs, &mut x).unwrap()
    } else {
        multigrid.solve(&rhs, &mut x).unwrap()
    };
    (x, report)
}

/// The solve of `problem` on `counts` patches in one process.
fn on_patches(
    problem: &Problem,
    counts: [usize; 3],
    cg: bool,
) -> (PatchedMultigrid, Vec<SpatialField<CellCentre>>, SolveReport) {
    let layout = PatchLayout::new(&problem.grid, counts, GhostWidth::uniform(1)).unwrap();
    let mut solver = PatchedMultigrid::new(
        &layout,
        Rc::new(SingleProcess),
        problem.conditions.clone(),
        options(),
        problem.order,
    )
    .unwrap();
    let (rhs, mut x) = patch_fields(problem, &layout, solver.owned());
    let report = if cg {
        solver.solve_preconditioned_cg(&rhs, &mut x).unwrap()
    } else {
        solver.solve(&rhs, &mut x).unwrap()
    };
    (solver, x, report)
}

#[test]
fn v_cycles_on_patches_give_the_whole_domains_bits() {
    for problem in [channel(), floor_box()] {
        let (reference, whole_report) = whole(&problem, false);
        assert!(
            whole_report.iterations >= 4,
            "{}: too easy a test",
            problem.name
        );
        for &counts in &problem.layouts {
            let (solver, parts, report) = on_patches(&problem, counts, false);
            assert!(
                solver.decomposed_levels() >= 1,
                "{}: nothing decomposed",
                problem.name
            );
            assert_eq!(
                report.iterations, whole_report.iterations,
                "{} {counts:?}",
                problem.name
            );
            let mut compared = 0;
            for part in &parts {
                compared += same_bits(&reference, part, &format!("{} {counts:?}", problem.name))
                    .unwrap_or_else(|why| panic!("{why}"));
            }
            assert!(compared > problem.grid.cells().iter().product::<usize>());
        }
    }
}

#[test]
fn cg_on_patches_matches_the_whole_domain_to_rounding() {
    for problem in [
        closed_box(),
        periodic_box(SpaceOrder::Second),
        periodic_box(SpaceOrder::Fourth),
    ] {
        let (reference, whole_report) = whole(&problem, true);
        let scale = reference
            .values()
            .unwrap()
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            scale > 1e-3,
            "{}: a trivial solution ({scale})",
            problem.name
        );
        for &counts in &problem.layouts {
            let (_, parts, report) = on_patches(&problem, counts, true);
            assert!(
                report.iterations.abs_diff(whole_report.iterations) <= 1,
                "{} {counts:?}: {} CG iterations on patches, {} whole",
                problem.name,
                report.iterations,
                whole_report.iterations
            );
            assert!(report.residuals.last().unwrap() <= &(1e-8 * report.rhs_norm));
            let (w, wv) = (reference.layout(), reference.values().unwrap());
            for part in &parts {
                let (p, pv) = (part.layout(), part.values().unwrap());
                let offset = p.patch().offset().map(|o| o as isize);
                for local in p.interior().iter() {
                    let at = [0, 1, 2].map(|a| local[a] + offset[a]);
                    let (a, b) = (wv[w.linear_index(at)], pv[p.linear_index(local)]);
                    assert!(
                        (a - b).abs() <= 1e-8 * scale,
                        "{} {counts:?} at {at:?}: {b} on patches, {a} whole",
                        problem.name
                    );
                }
            }
        }
    }
}

#[test]
fn a_repeated_solve_gives_the_same_bits() {
    // Nothing a solve leaves behind (levels, CG vectors, kept kernels)
    // changes the next one.
    let problem = periodic_box(SpaceOrder::Fourth);
    let (mut solver, first, _) = on_patches(&problem, [2, 1, 2], true);
    let layout = solver.layout().clone();
    let (rhs, mut again) = patch_fields(&problem, &layout, solver.owned());
    solver.solve_preconditioned_cg(&rhs, &mut again).unwrap();
    for (a, b) in first.iter().zip(&again) {
        same_bits(a, b, "second solve").unwrap_or_else(|why| panic!("{why}"));
    }
}

#[test]
fn levels_are_decomposed_while_patches_stay_even_and_eight_cells_wide() {
    let grid = |cells: [usize; 3]| Grid::new(cells, [0.1; 3], [0.0; 3]).unwrap();
    let walls = || {
        let mut c = BoundaryConditions::new();
        for side in Side::ALL {
            c = c.with(side, BoundaryCondition::Dirichlet(0.0));
        }
        c
    };
    // (cells, counts, levels in all, levels on patches)
    for (cells, counts, levels, decomposed) in [
        // 64 -> 32 -> 16 -> 8 -> 4 -> 2: patches of 32, 16 and 8 cells.
        ([64, 64, 1], [2, 2, 1], 6, 3),
        // Patches of 8 x 64: 8 cells wide along x, then 4.
        ([64, 64, 1], [8, 1, 1], 6, 1),
        // Two whole levels always stay below: 16 -> 8 -> 4 -> 2.
        ([16, 16, 16], [1, 1, 1], 4, 2),
        // Patches of 18 cells: odd after one halving.
        ([72, 72, 1], [4, 1, 1], 4, 1),
        // Patches of 6 cells: agglomerated from the finest level.
        ([24, 24, 1], [4, 1, 1], 4, 0),
    ] {
        let layout = PatchLayout::new(&grid(cells), counts, GhostWidth::uniform(1)).unwrap();
        let solver = PatchedMultigrid::new(
            &layout,
            Rc::new(SingleProcess),
            walls(),
            options(),
            SpaceOrder::Second,
        )
        .unwrap();
        assert_eq!(
            (solver.levels(), solver.decomposed_levels()),
            (levels, decomposed),
            "{cells:?} on {counts:?}"
        );
    }
}

#[test]
fn agglomerating_from_the_finest_level_still_solves() {
    // Patches of 3 cells: no level on patches; the V-cycle is the whole
    // domain's on every rank, CG's vectors stay on the patches.
    let mut problem = closed_box();
    problem.grid = Grid::new([24, 24, 1], [1.0; 3], [0.0; 3]).unwrap();
    let (reference, _) = whole(&problem, true);
    let (solver, parts, _) = on_patches(&problem, [8, 1, 1], true);
    assert_eq!(solver.decomposed_levels(), 0);
    let (w, wv) = (reference.layout(), reference.values().unwrap());
    for part in &parts {
        let (p, pv) = (part.layout(), part.values().unwrap());
        let offset = p.patch().offset().map(|o| o as isize);
        for local in p.interior().iter() {
            let at = [0, 1, 2].map(|a| local[a] + offset[a]);
            assert!((wv[w.linear_index(at)] - pv[p.linear_index(local)]).abs() < 1e-9);
        }
    }
}

fn setup_reason(error: SolverError) -> String {
    match error {
        SolverError::Setup { equation, reason } => {
            assert_eq!(equation, "Poisson");
            reason
        }
        other => panic!("expected a setup error, got {other:?}"),
    }
}

#[test]
fn wrong_fields_and_settings_are_refused_by_name() {
    let problem = channel();
    let layout = PatchLayout::new(&problem.grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap();
    let build = |order| {
        PatchedMultigrid::new(
            &layout,
            Rc::new(SingleProcess),
            problem.conditions.clone(),
            options(),
            order,
        )
    };
    let mut solver = build(SpaceOrder::Second).unwrap();
    let (rhs, mut x) = patch_fields(&problem, &layout, solver.owned());
    // One field short.
    let reason = setup_reason(solver.solve(&rhs[..3], &mut x).unwrap_err());
    assert!(
        reason.contains("3 right-hand side field(s) given") && reason.contains("owns 4"),
        "{reason}"
    );
    // Patches in the wrong order: the field names its patch.
    let mut swapped = patch_fields(&problem, &layout, solver.owned()).0;
    swapped.swap(0, 1);
    let reason = setup_reason(solver.solve(&swapped, &mut x).unwrap_err());
    assert!(
        reason.contains("'b'") && reason.contains("offset"),
        "{reason}"
    );
    // V-cycles do not solve the fourth-order operator.
    let mut fourth = build(SpaceOrder::Fourth).unwrap();
    let reason = setup_reason(fourth.solve(&rhs, &mut x).unwrap_err());
    assert!(
        reason.contains("order-4") && reason.contains("solve_preconditioned_cg"),
        "{reason}"
    );
    // A side without a condition.
    let reason = setup_reason(
        PatchedMultigrid::new(
            &layout,
            Rc::new(SingleProcess),
            BoundaryConditions::new().with(Side::MINUS_Y, BoundaryCondition::Dirichlet(0.0)),
            options(),
            SpaceOrder::Second,
        )
        .unwrap_err(),
    );
    assert!(
        reason.contains("side +y has no boundary condition"),
        "{reason}"
    );
    // A right-hand side that is not finite names the field.
    let mut bad = patch_fields(&problem, &layout, solver.owned()).0;
    bad[2].values_mut().unwrap()[40] = f64::NAN;
    let reason = setup_reason(solver.solve(&bad, &mut x).unwrap_err());
    assert!(
        reason.contains("'b'") && reason.contains("not finite"),
        "{reason}"
    );
}
