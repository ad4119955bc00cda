//! The cost of the Poisson solve on patches in one process against the
//! whole domain's (issue 51): the 3D Taylor-Green vortex's projection
//! problem (periodic 48^3, the flow's default options: CG preconditioned
//! by one V(3,3)-cycle to a relative residual of 1e-10), solved from a
//! zero guess by [`Multigrid::solve_preconditioned_cg`] and by
//! [`PatchedMultigrid::solve_preconditioned_cg`] on 1 x 1 x 1, 2 x 1 x 1
//! and 1 x 1 x 2 patches. Reported: ms per solve (the best of a few
//! rounds), CG iterations, and the share of the patched solve spent in
//! its seam exchanges, gathers and reductions. With every patch in one
//! process, the patched solve does the whole domain's arithmetic plus its
//! exchanges: the gap is their cost. Run:
//! `cargo bench -p watershed-solvers --bench poisson_patches` (add
//! `-- 2,1,1` to time the whole domain and one layout only, e.g. under a
//! profiler).

use std::f64::consts::PI;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{CellCentre, Device, GhostWidth, Grid, Patch, PatchLayout, SpatialField};
use watershed_solvers::incompressible::default_poisson_options;
use watershed_solvers::{BoundaryConditions, Multigrid, PatchedMultigrid, SpaceOrder};

const CELLS: usize = 48;
const ROUNDS: usize = 5;
const SOLVES: usize = 4;

/// A mean-free right-hand side: a few Fourier modes of the periodic box.
fn rhs_value(x: [f64; 3]) -> f64 {
    (x[0]).sin() * (2.0 * x[1]).cos() * (x[2]).cos()
        + 0.3 * (3.0 * x[0]).cos() * (x[1]).sin()
        + 0.1 * (2.0 * x[2]).sin()
}

fn fill(field: &mut SpatialField<CellCentre>) {
    let layout = field.layout().clone();
    let values = field.values_mut().expect("values");
    for index in layout.allocated() {
        values[layout.linear_index(index)] = rhs_value(layout.coordinate(index));
    }
}

fn grid() -> Grid {
    Grid::new([CELLS; 3], [2.0 * PI; 3], [0.0; 3])
        .expect("grid")
        .with_periodic([true; 3])
}

/// ms per solve (best round) and iterations, whole domain.
fn whole() -> (f64, usize) {
    let patch = Patch::new(&grid(), [0; 3], [CELLS; 3], GhostWidth::uniform(1)).expect("patch");
    let mut solver = Multigrid::with_order(
        &patch,
        BoundaryConditions::new(),
        default_poisson_options(3),
        SpaceOrder::Second,
    )
    .expect("multigrid");
    let mut b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).expect("b");
    fill(&mut b);
    let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).expect("x");
    let mut best = Duration::MAX;
    let mut iterations = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..SOLVES {
            x.fill(0.0).expect("zero");
            iterations = solver
                .solve_preconditioned_cg(&b, &mut x)
                .expect("solve")
                .iterations;
        }
        best = best.min(started.elapsed());
    }
    (best.as_secs_f64() * 1e3 / SOLVES as f64, iterations)
}

/// ms per solve (best round), iterations and exchange share on `counts`.
fn patched(counts: [usize; 3]) -> (f64, usize, f64) {
    let layout = PatchLayout::new(&grid(), counts, GhostWidth::uniform(1)).expect("layout");
    let mut solver = PatchedMultigrid::new(
        &layout,
        Rc::new(SingleProcess),
        BoundaryConditions::new(),
        default_poisson_options(3),
        SpaceOrder::Second,
    )
    .expect("multigrid");
    let mut rhs = Vec::new();
    let mut solution = Vec::new();
    for index in solver.owned() {
        let patch = layout.patch(index).expect("patch");
        let mut b = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).expect("b");
        fill(&mut b);
        rhs.push(b);
        solution.push(SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).expect("x"));
    }
    let mut best = Duration::MAX;
    let mut share = 0.0;
    let mut iterations = 0;
    for _ in 0..ROUNDS {
        let before = solver.exchange_time();
        let started = Instant::now();
        for _ in 0..SOLVES {
            for x in &mut solution {
                x.fill(0.0).expect("zero");
            }
            iterations = solver
                .solve_preconditioned_cg(&rhs, &mut solution)
                .expect("solve")
                .iterations;
        }
        let elapsed = started.elapsed();
        if elapsed < best {
            best = elapsed;
            share = (solver.exchange_time() - before).as_secs_f64() / elapsed.as_secs_f64();
        }
    }
    (best.as_secs_f64() * 1e3 / SOLVES as f64, iterations, share)
}

fn main() {
    println!(
        "Poisson solve, periodic {CELLS}^3, CG + V(3,3) to 1e-10 from zero, one process, rayon's global pool"
    );
    println!("| solver | ms per solve | iterations | exchange share | vs whole |");
    println!("| --- | --- | --- | --- | --- |");
    let only: Option<[usize; 3]> = std::env::args().skip(1).find_map(|a| {
        let counts: Vec<usize> = a.split(',').filter_map(|c| c.parse().ok()).collect();
        <[usize; 3]>::try_from(counts).ok()
    });
    let (whole_ms, whole_iterations) = whole();
    println!("| whole domain (`Multigrid`) | {whole_ms:.2} | {whole_iterations} | - | 1.00 |");
    let layouts = match only {
        Some(counts) => vec![counts],
        None => vec![[1, 1, 1], [2, 1, 1], [1, 1, 2], [2, 2, 1]],
    };
    for counts in layouts {
        let (ms, iterations, share) = patched(counts);
        println!(
            "| `PatchedMultigrid` {} x {} x {} | {ms:.2} | {iterations} | {:.1} % | {:.2} |",
            counts[0],
            counts[1],
            counts[2],
            100.0 * share,
            ms / whole_ms
        );
    }
}
