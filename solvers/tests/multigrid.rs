//! Multigrid Poisson solver: residual reduction per V-cycle on the model
//! problem, iteration counts independent of resolution, CG with a multigrid
//! preconditioner, the singular (Neumann, periodic) cases, and second-order
//! accuracy of the solution.

#[path = "support/patched_poisson_case.rs"]
mod patched_case;

use std::f64::consts::PI;
use std::rc::Rc;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{CellCentre, Device, GhostWidth, Grid, Patch, PatchLayout, SpatialField};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, Multigrid, MultigridOptions, PatchedMultigrid,
    SpaceOrder,
};

/// `rhs = f(x, y)` on an n x n unit square.
fn problem(
    n: usize,
    periodic: bool,
    f: impl Fn(f64, f64) -> f64,
) -> (SpatialField<CellCentre>, SpatialField<CellCentre>) {
    let mut grid = Grid::new([n, n, 1], [1.0; 3], [0.0; 3]).unwrap();
    if periodic {
        grid = grid.with_periodic([true, true, false]);
    }
    let patch = grid.whole_domain(1);
    let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu).unwrap();
    let layout = rhs.layout().clone();
    let values = rhs.values_mut().unwrap();
    for index in layout.interior() {
        let [x, y, _] = layout.coordinate(index);
        values[layout.linear_index(index)] = f(x, y);
    }
    let solution = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
    (rhs, solution)
}

/// A cell field on `patch` with `f(x, y, z)` at each interior cell.
fn cell_field(patch: &Patch, f: impl Fn([f64; 3]) -> f64) -> SpatialField<CellCentre> {
    let mut field = SpatialField::<CellCentre>::new("rhs", patch, Device::Cpu).unwrap();
    let layout = field.layout().clone();
    let values = field.values_mut().unwrap();
    for index in layout.interior() {
        values[layout.linear_index(index)] = f(layout.coordinate(index));
    }
    field
}

fn max_error(
    u: &SpatialField<CellCentre>,
    exact: impl Fn(f64, f64) -> f64,
    remove_mean: bool,
) -> f64 {
    let layout = u.layout();
    let values = u.values().unwrap();
    let diffs: Vec<f64> = layout
        .interior()
        .iter()
        .map(|i| {
            let [x, y, _] = layout.coordinate(i);
            values[layout.linear_index(i)] - exact(x, y)
        })
        .collect();
    let mean = if remove_mean {
        diffs.iter().sum::<f64>() / diffs.len() as f64
    } else {
        0.0
    };
    diffs.iter().map(|d| (d - mean).abs()).fold(0.0, f64::max)
}

fn dirichlet() -> BoundaryConditions {
    BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))
}

fn model(x: f64, y: f64) -> f64 {
    -2.0 * PI * PI * (PI * x).sin() * (PI * y).sin()
}

#[test]
fn a_v_cycle_reduces_the_residual_more_than_fivefold() {
    let (rhs, mut x) = problem(64, false, model);
    let mut mg = Multigrid::new(
        rhs.layout().patch(),
        dirichlet(),
        MultigridOptions::default(),
    )
    .unwrap();
    assert!(mg.levels() >= 5);
    let report = mg.solve(&rhs, &mut x).unwrap();
    let factor = report.reduction_per_iteration();
    eprintln!(
        "64^2: {} V-cycles, mean reduction {factor:.3}, residuals {:?}",
        report.iterations, report.residuals
    );
    assert!(factor < 0.2, "reduction per V-cycle {factor}");
    for pair in report.residuals.windows(2) {
        assert!(
            pair[1] < 0.2 * pair[0],
            "a V-cycle reduced the residual only from {} to {}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn iteration_counts_do_not_grow_with_resolution() {
    let mut counts = Vec::new();
    for n in [64, 128, 256] {
        let (rhs, mut x) = problem(n, false, model);
        let options = MultigridOptions {
            relative_tolerance: 1e-8,
            ..Default::default()
        };
        let mut mg = Multigrid::new(rhs.layout().patch(), dirichlet(), options).unwrap();
        let report = mg.solve(&rhs, &mut x).unwrap();
        eprintln!(
            "{n}^2: {} V-cycles (reduction {:.3})",
            report.iterations,
            report.reduction_per_iteration()
        );
        counts.push(report.iterations);
    }
    assert!(
        counts[2] <= counts[0] + 1 && counts[1] <= counts[0] + 1,
        "V-cycles per resolution: {counts:?}"
    );
}

#[test]
fn preconditioned_cg_converges_faster_than_plain_v_cycles() {
    let (rhs, mut x) = problem(128, false, model);
    let options = MultigridOptions {
        relative_tolerance: 1e-10,
        ..Default::default()
    };
    let mut mg = Multigrid::new(rhs.layout().patch(), dirichlet(), options).unwrap();
    let plain = mg.solve(&rhs, &mut x).unwrap();
    let mut y = SpatialField::<CellCentre>::new("y", rhs.layout().patch(), Device::Cpu).unwrap();
    let cg = mg.solve_preconditioned_cg(&rhs, &mut y).unwrap();
    eprintln!("V-cycles {} vs PCG {}", plain.iterations, cg.iterations);
    assert!(
        cg.iterations <= plain.iterations,
        "PCG {} vs multigrid {}",
        cg.iterations,
        plain.iterations
    );
    assert!(cg.residuals.last().unwrap() <= &(1e-10 * cg.rhs_norm));
    // Both give the same discrete solution.
    let (a, b) = (x.values().unwrap(), y.values().unwrap());
    let layout = x.layout();
    for i in layout.interior() {
        let at = layout.linear_index(i);
        assert!(
            (a[at] - b[at]).abs() < 1e-8,
            "{i:?}: {} vs {}",
            a[at],
            b[at]
        );
    }
}

#[test]
fn the_solution_is_second_order_accurate() {
    let mut errors = Vec::new();
    for n in [16, 32, 64] {
        let (rhs, mut x) = problem(n, false, model);
        let mut mg = Multigrid::new(
            rhs.layout().patch(),
            dirichlet(),
            MultigridOptions::default(),
        )
        .unwrap();
        mg.solve(&rhs, &mut x).unwrap();
        errors.push(max_error(&x, |x, y| (PI * x).sin() * (PI * y).sin(), false));
    }
    for pair in errors.windows(2) {
        let p = (pair[0] / pair[1]).log2();
        assert!((p - 2.0).abs() < 0.1, "order {p} from {errors:?}");
    }
}

#[test]
fn neumann_and_periodic_problems_are_solved_up_to_a_constant() {
    // Neumann: cos(pi x) cos(pi y) has zero normal derivative on the walls.
    let (rhs, mut x) = problem(64, false, |x, y| {
        -2.0 * PI * PI * (PI * x).cos() * (PI * y).cos()
    });
    let neumann = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
    let mut mg =
        Multigrid::new(rhs.layout().patch(), neumann, MultigridOptions::default()).unwrap();
    assert!(mg.is_singular());
    let report = mg.solve(&rhs, &mut x).unwrap();
    assert!(report.reduction_per_iteration() < 0.3, "{report:?}");
    let error = max_error(&x, |x, y| (PI * x).cos() * (PI * y).cos(), true);
    assert!(error < 1e-3, "Neumann error {error}");

    // Periodic: sin(2 pi x) sin(2 pi y).
    let (rhs, mut x) = problem(64, true, |x, y| {
        -8.0 * PI * PI * (2.0 * PI * x).sin() * (2.0 * PI * y).sin()
    });
    let mut mg = Multigrid::new(
        rhs.layout().patch(),
        BoundaryConditions::new(),
        MultigridOptions::default(),
    )
    .unwrap();
    let report = mg.solve_preconditioned_cg(&rhs, &mut x).unwrap();
    assert!(report.iterations < 20, "{report:?}");
    let error = max_error(&x, |x, y| (2.0 * PI * x).sin() * (2.0 * PI * y).sin(), true);
    assert!(error < 2e-3, "periodic error {error}");
}

#[test]
fn a_side_without_a_condition_is_refused() {
    let (rhs, _) = problem(16, false, model);
    let partial = BoundaryConditions::new().with(Side::MINUS_X, BoundaryCondition::Dirichlet(0.0));
    let err =
        Multigrid::new(rhs.layout().patch(), partial, MultigridOptions::default()).unwrap_err();
    assert!(err.to_string().contains("+x"), "{err}");
}

/// The steps of the coarsest level's exact solve are the inverses of the
/// distinct non-zero eigenvalues of its `D^-1 A`, worked out by hand for
/// the 2 x 2 (x 2) levels of power-of-two grids, largest eigenvalue first
/// and then each the farthest from those taken.
#[test]
fn the_coarsest_level_is_solved_in_as_many_steps_as_it_has_distinct_eigenvalues() {
    let neumann = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
    let steps = |n: [usize; 3], conditions: BoundaryConditions, periodic: bool, sweeps: usize| {
        let mut grid = Grid::new(n, [1.0; 3], [0.0; 3]).unwrap();
        if periodic {
            grid = grid.with_periodic([true, true, n[2] > 1]);
        }
        let options = MultigridOptions {
            coarsest_sweeps: sweeps,
            ..Default::default()
        };
        let mg = Multigrid::new(&grid.whole_domain(1), conditions, options).unwrap();
        assert!(mg.levels() > 1);
        mg.coarsest_steps().map(<[f64]>::to_vec)
    };
    let close = |found: Option<Vec<f64>>, expected: &[f64]| {
        let found = found.expect("an exact coarsest solve");
        assert_eq!(found.len(), expected.len(), "{found:?} vs {expected:?}");
        for (f, e) in found.iter().zip(expected) {
            assert!((f - e).abs() < 1e-12, "{found:?} vs {expected:?}");
        }
    };
    // 2D Neumann: 0, 1/2 (twice), 1.
    close(steps([32, 32, 1], neumann.clone(), false, 30), &[1.0, 2.0]);
    // 2D Dirichlet (ghost = -cell): (4, 6, 6, 8) / 4.
    close(
        steps([32, 32, 1], dirichlet(), false, 30),
        &[0.5, 1.0, 2.0 / 3.0],
    );
    // 2D periodic: each neighbour is the other cell twice: 0, 1, 1, 2.
    close(
        steps([32, 32, 1], BoundaryConditions::new(), true, 30),
        &[0.5, 1.0],
    );
    // 3D Neumann: 0, 1/3 (3 times), 2/3 (3 times), 1.
    close(
        steps([16, 16, 16], neumann.clone(), false, 30),
        &[1.0, 3.0, 1.5],
    );
    // No fewer eigenvalues than the sweeps allowed (2): 2 Chebyshev steps
    // on [1/2, 1] instead, at 3/4 + cos(pi/4) / 4 and 3/4 - cos(pi/4) / 4,
    // the larger first.
    let root = std::f64::consts::FRAC_1_SQRT_2 / 4.0;
    close(
        steps([32, 32, 1], neumann, false, 2),
        &[1.0 / (0.75 + root), 1.0 / (0.75 - root)],
    );
}

/// On a 3D Neumann problem, whose coarsest level takes 3 exact steps,
/// V-cycles converge as fast with 3 coarsest sweeps allowed (too few for
/// the exact schedule: 3 Chebyshev steps on [1/3, 1] instead) as with the
/// exact solve: the coarse error Chebyshev leaves is far below what the
/// cycle's smoothing leaves on the fine grid.
#[test]
fn chebyshev_coarsest_steps_converge_as_fast_as_the_exact_solve() {
    let grid = Grid::new([16, 16, 16], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let rhs = cell_field(&patch, |[x, y, z]| {
        -3.0 * PI * PI * (PI * x).cos() * (PI * y).cos() * (PI * z).cos()
    });
    let neumann = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
    let mut reductions = Vec::new();
    for sweeps in [3, 30] {
        let options = MultigridOptions {
            coarsest_sweeps: sweeps,
            weight: 6.0 / 7.0,
            ..Default::default()
        };
        let mut mg = Multigrid::new(&patch, neumann.clone(), options).unwrap();
        assert_eq!(mg.coarsest_steps().map(<[f64]>::len), Some(3));
        let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let report = mg.solve(&rhs, &mut x).unwrap();
        eprintln!("coarsest sweeps {sweeps}: {report:?}");
        reductions.push(report.reduction_per_iteration());
    }
    assert!(
        reductions.iter().all(|&r| r < 0.2) && (reductions[0] / reductions[1] - 1.0).abs() < 0.05,
        "3 Chebyshev steps {} vs the exact coarsest solve {}",
        reductions[0],
        reductions[1]
    );
}

/// A grid whose coarsest level is large (20 x 14 cells: two levels, the
/// coarsest 10 x 7 with 70 distinct eigenvalues) gets Chebyshev steps
/// there, and CG preconditioned with V-cycles converges in a few
/// iterations where 30 Jacobi sweeps left the coarse error almost
/// untouched (with them V(3,3) took 13 iterations, V(2,2) 43, and V(1,1)
/// did not converge in 100).
#[test]
fn a_large_coarsest_level_gets_chebyshev_steps_and_light_cycles_converge() {
    let grid = Grid::new([20, 14, 1], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let mut rhs = cell_field(&patch, |[x, y, _]| {
        (3.0 * x).sin() * (5.0 * y).cos() + x * y
    });
    // Of zero mean, as a singular problem's right-hand side must be.
    let layout = rhs.layout().clone();
    let values = rhs.values_mut().unwrap();
    let interior = layout.interior();
    let mean = interior
        .iter()
        .map(|i| values[layout.linear_index(i)])
        .sum::<f64>()
        / interior.len() as f64;
    for index in interior.iter() {
        values[layout.linear_index(index)] -= mean;
    }
    let mut iterations = Vec::new();
    for smoothing in [1, 2, 3] {
        let options = MultigridOptions {
            pre_smoothing: smoothing,
            post_smoothing: smoothing,
            ..Default::default()
        };
        let neumann = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
        let mut mg = Multigrid::new(&patch, neumann, options).unwrap();
        assert_eq!(mg.levels(), 2);
        assert_eq!(mg.coarsest_steps().map(<[f64]>::len), Some(30));
        let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let report = mg.solve_preconditioned_cg(&rhs, &mut x).unwrap();
        let last = report.residuals.last().copied().unwrap();
        assert!(last <= 1e-10 * report.rhs_norm, "{report:?}");
        iterations.push(report.iterations);
    }
    eprintln!("V(1,1), V(2,2), V(3,3): {iterations:?} CG iterations");
    assert!(iterations[1] <= 15 && iterations[2] <= 10, "{iterations:?}");
}

/// A copy of `field` whose only location is `device`.
fn moved(field: &SpatialField<CellCentre>, device: Device) -> SpatialField<CellCentre> {
    let patch = field.layout().patch().clone();
    let mut copy = SpatialField::<CellCentre>::new(field.name(), &patch, Device::Cpu).unwrap();
    copy.values_mut()
        .unwrap()
        .copy_from_slice(field.values().unwrap());
    copy.validate_on(device).unwrap();
    copy.set_active(device).unwrap();
    copy.remove_location(Device::Cpu).unwrap();
    copy
}

/// A solver moved to a GPU solves there with every kernel on its stream,
/// and gives the CPU's bits (Dirichlet, singular Neumann and periodic
/// problems, V-cycles and CG). Without a GPU the move is refused, naming
/// the GPU, and the solver still solves on the CPU; fields on another
/// device than the solver's are refused by name.
#[test]
fn a_solver_moved_to_a_gpu_gives_the_cpus_bits() {
    let neumann = BoundaryConditions::all(BoundaryCondition::Neumann(0.0));
    let cases = [
        (false, dirichlet(), "Dirichlet"),
        (false, neumann.clone(), "Neumann"),
        (true, neumann, "periodic"),
    ];
    for (periodic, conditions, name) in cases {
        let (rhs, start) = problem(32, periodic, |x, y| {
            (2.0 * PI * x).sin() * (PI * y).cos() + x * y
        });
        let patch = rhs.layout().patch().clone();
        let mut on_cpu =
            Multigrid::new(&patch, conditions.clone(), MultigridOptions::default()).unwrap();
        let mut on_gpu = Multigrid::new(&patch, conditions, MultigridOptions::default()).unwrap();
        assert_eq!(on_gpu.device(), Device::Cpu);
        let mut cpu_solution = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let cg = on_cpu
            .solve_preconditioned_cg(&rhs, &mut cpu_solution)
            .unwrap();
        let mut cpu_cycles = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let cycles = on_cpu.solve(&rhs, &mut cpu_cycles).unwrap();
        // Moving to where it is changes nothing.
        on_cpu.move_to(Device::Cpu).unwrap();
        let Some(gpu) =
            watershed_fields::gpu::gpu_for_tests("a_solver_moved_to_a_gpu_gives_the_cpus_bits")
        else {
            let error = on_gpu.move_to(Device::Gpu(0)).unwrap_err();
            assert!(
                matches!(error, watershed_solvers::SolverError::Field(_)),
                "{error:?}"
            );
            assert!(error.to_string().contains("GPU 0"), "{error}");
            // Still usable, still on the CPU, with the same bits.
            assert_eq!(on_gpu.device(), Device::Cpu);
            let mut again = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
            on_gpu.solve_preconditioned_cg(&rhs, &mut again).unwrap();
            assert_eq!(again.values().unwrap(), cpu_solution.values().unwrap());
            continue;
        };
        let device = Device::Gpu(gpu);
        on_gpu.move_to(device).unwrap();
        assert_eq!(on_gpu.device(), device);
        // A right-hand side only on the CPU is refused by name.
        let mut solution = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
        let error = on_gpu
            .solve_preconditioned_cg(&rhs, &mut solution)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("'rhs'") && error.contains("move_to"),
            "{error}"
        );
        let mut rhs_there = moved(&rhs, device);
        let mut solution = moved(&start, device);
        let report = on_gpu
            .solve_preconditioned_cg(&rhs_there, &mut solution)
            .unwrap();
        assert_eq!(report.residuals, cg.residuals, "{name}: CG residuals");
        assert_eq!(
            solution.values_on(device).unwrap(),
            cpu_solution.values().unwrap().to_vec(),
            "{name}: CG solution"
        );
        let mut solution = moved(&start, device);
        let report = on_gpu.solve(&rhs_there, &mut solution).unwrap();
        assert_eq!(
            report.residuals, cycles.residuals,
            "{name}: V-cycle residuals"
        );
        assert_eq!(
            solution.values_on(device).unwrap(),
            cpu_cycles.values().unwrap().to_vec(),
            "{name}: V-cycle solution"
        );
        // A right-hand side that is not finite is found on the host.
        rhs_there.validate_on(Device::Cpu).unwrap();
        rhs_there.set_active(Device::Cpu).unwrap();
        let at = rhs_there.layout().linear_index([3, 5, 0]);
        rhs_there.values_mut().unwrap()[at] = f64::NAN;
        rhs_there.validate_on(device).unwrap();
        rhs_there.set_active(device).unwrap();
        rhs_there.remove_location(Device::Cpu).unwrap();
        let error = on_gpu
            .solve(&rhs_there, &mut solution)
            .unwrap_err()
            .to_string();
        assert!(error.contains("[3, 5, 0]"), "{name}: {error}");
    }
}

/// The multigrid on patches moved to a GPU (`PatchedMultigrid::move_to`):
/// every patch's solution has the CPU's bits, and so do the residuals,
/// for V-cycles on a channel (Dirichlet and Neumann sides, a periodic
/// axis) and CG on a periodic box (second and fourth order) and on a box
/// with a Dirichlet floor; two to four patches on one GPU, so seams are
/// copied there, physical sides refilled there, and the coarse levels
/// agglomerated on the host. Without a GPU the move is refused naming
/// the GPU and the solver still solves on the CPU; fields left on the
/// CPU are refused by name.
#[test]
fn a_multigrid_on_patches_moved_to_a_gpu_gives_the_cpus_bits() {
    use patched_case::{channel, floor_box, patch_fields, periodic_box};
    let options = MultigridOptions {
        relative_tolerance: 1e-8,
        ..MultigridOptions::default()
    };
    let cases = [
        (channel(), false, [2, 2, 1]),
        (periodic_box(SpaceOrder::Second), true, [2, 1, 2]),
        (periodic_box(SpaceOrder::Fourth), true, [2, 1, 1]),
        (floor_box(), true, [1, 2, 2]),
    ];
    for (problem, cg, counts) in cases {
        let name = format!("{} on {counts:?}", problem.name);
        let layout = PatchLayout::new(&problem.grid, counts, GhostWidth::uniform(1)).unwrap();
        let make = || {
            PatchedMultigrid::new(
                &layout,
                Rc::new(SingleProcess),
                problem.conditions.clone(),
                options,
                problem.order,
            )
            .unwrap()
        };
        let solve = |solver: &mut PatchedMultigrid,
                     rhs: &[SpatialField<CellCentre>],
                     x: &mut [SpatialField<CellCentre>]| {
            if cg {
                solver.solve_preconditioned_cg(rhs, x)
            } else {
                solver.solve(rhs, x)
            }
        };
        let mut on_cpu = make();
        let (rhs, mut cpu_solution) = patch_fields(&problem, &layout, on_cpu.owned());
        let cpu_report = solve(&mut on_cpu, &rhs, &mut cpu_solution).unwrap();
        let mut on_gpu = make();
        let Some(gpu) = watershed_fields::gpu::gpu_for_tests(
            "a_multigrid_on_patches_moved_to_a_gpu_gives_the_cpus_bits",
        ) else {
            let error = on_gpu.move_to(Device::Gpu(0)).unwrap_err();
            assert!(
                matches!(error, watershed_solvers::SolverError::Field(_)),
                "{error:?}"
            );
            assert!(error.to_string().contains("GPU 0"), "{error}");
            assert_eq!(on_gpu.device(), Device::Cpu);
            let (_, mut again) = patch_fields(&problem, &layout, on_gpu.owned());
            solve(&mut on_gpu, &rhs, &mut again).unwrap();
            for (a, b) in again.iter().zip(&cpu_solution) {
                assert_eq!(a.values().unwrap(), b.values().unwrap(), "{name}");
            }
            continue;
        };
        let device = Device::Gpu(gpu);
        on_gpu.move_to(device).unwrap();
        assert_eq!(on_gpu.device(), device);
        // Fields left on the CPU are refused, naming the field.
        let (_, mut on_host) = patch_fields(&problem, &layout, on_gpu.owned());
        let error = solve(&mut on_gpu, &rhs, &mut on_host)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("'b'") && error.contains("move_to"),
            "{name}: {error}"
        );
        let rhs_there: Vec<_> = rhs.iter().map(|f| moved(f, device)).collect();
        let (_, zero) = patch_fields(&problem, &layout, on_gpu.owned());
        let mut solution: Vec<_> = zero.iter().map(|f| moved(f, device)).collect();
        let report = solve(&mut on_gpu, &rhs_there, &mut solution).unwrap();
        assert_eq!(report.residuals, cpu_report.residuals, "{name}: residuals");
        for (k, (there, here)) in solution.iter().zip(&cpu_solution).enumerate() {
            assert_eq!(
                there.values_on(device).unwrap(),
                here.values().unwrap().to_vec(),
                "{name}: patch {k}'s solution, ghosts included"
            );
        }
        // Moved back, it solves on the CPU with the same bits.
        on_gpu.move_to(Device::Cpu).unwrap();
        let (_, mut back) = patch_fields(&problem, &layout, on_gpu.owned());
        solve(&mut on_gpu, &rhs, &mut back).unwrap();
        for (a, b) in back.iter().zip(&cpu_solution) {
            assert_eq!(
                a.values().unwrap(),
                b.values().unwrap(),
                "{name}: back on the CPU"
            );
        }
    }
}
