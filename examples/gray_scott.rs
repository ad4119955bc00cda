//! Gray-Scott reaction-diffusion: two species on a periodic square, the
//! pattern formation of Pearson (1993, "Complex patterns in a simple
//! system"):
//!
//! ```text
//! du/dt = Du lap(u) - u v^2 + F (1 - u)
//! dv/dt = Dv lap(v) + u v^2 - (F + k) v
//! ```
//!
//! with Pearson's Du = 2e-5, Dv = 1e-5 and spacing 2.5 / 256 (his square
//! of side 2.5 at 256 cells; fewer cells make a smaller square), started
//! from u = 1, v = 0 with a perturbed square of side 0.2 in the middle. Writes HDF5 +
//! XDMF dumps (open `gray-scott/gray-scott.xmf` in ParaView) and a PNG of
//! v at the end.
//!
//! Run: `cargo run --release --example gray_scott [-- F k cells steps]`
//! (default F = 0.04, k = 0.06 (spots and stripes), 256 cells, 10000 steps
//! of dt = 1; F = 0.025, k = 0.06 gives Pearson's moving spots).

use std::path::Path;
use watershed::fields::{CellCentre, Grid};
use watershed::io::DumpSeries;
use watershed::io::plot::{Plane, field_image};
use watershed::solvers::{
    Diffusivity, SolverSymbols, TimeIntegrator, TimeStep, TransportEquation, TransportSolver,
    TransportSolverBuilder,
};

/// Pearson's diffusivities and grid spacing.
const DU: f64 = 2e-5;
const DV: f64 = 1e-5;
const SPACING: f64 = 2.5 / 256.0;

/// The initial state on a square of side `side`: u = 1, v = 0, and in the
/// middle square of side 0.2 u = 1/2, v = 1/4, both perturbed by 1 %
/// noise that is a fixed function of the position (so that runs repeat).
fn initial(side: f64, species: char, [x, y, _]: [f64; 3]) -> f64 {
    let middle = (x - side / 2.0).abs() < 0.1 && (y - side / 2.0).abs() < 0.1;
    let noise = 0.01 * ((12.9898 * x + 78.233 * y).sin() * 43758.5453).fract();
    match (species, middle) {
        ('u', true) => 0.5 + noise,
        ('u', false) => 1.0,
        (_, true) => 0.25 + noise,
        (_, false) => 0.0,
    }
}

/// The two equations on a periodic `cells` x `cells` grid, forward Euler
/// (Pearson's scheme), set to the initial state.
fn build(
    cells: usize,
    feed: f64,
    kill: f64,
) -> Result<(Grid, TransportSolver), Box<dyn std::error::Error>> {
    let side = SPACING * cells as f64;
    let grid = Grid::new([cells, cells, 1], [side, side, SPACING], [0.0; 3])?
        .with_periodic([true, true, false]);
    let u = TransportEquation::new("u")
        .diffusion(Diffusivity::Constant(DU))
        .source_expression(move |s| {
            let (u, v) = (s.solution::<CellCentre>("u"), s.solution::<CellCentre>("v"));
            feed * (1.0 - u.clone()) - u * v.clone() * v
        });
    let v = TransportEquation::new("v")
        .diffusion(Diffusivity::Constant(DV))
        .source_expression(move |s| {
            let (u, v) = (s.solution::<CellCentre>("u"), s.solution::<CellCentre>("v"));
            u * v.clone() * v.clone() - (feed + kill) * v
        });
    let solver = TransportSolverBuilder::new(&grid.whole_domain(1))
        .equation(u)
        .equation(v)
        .integrator(TimeIntegrator::ForwardEuler)
        .build()?;
    solver.set_initial_condition("u", |p| initial(side, 'u', p))?;
    solver.set_initial_condition("v", |p| initial(side, 'v', p))?;
    Ok((grid, solver))
}

/// Runs `steps` steps of dt = 1 (dumping u and v ten times) into `folder`,
/// draws v into `gray-scott_v.png`, and returns the solver.
fn run(
    folder: &Path,
    cells: usize,
    steps: u64,
    feed: f64,
    kill: f64,
) -> Result<TransportSolver, Box<dyn std::error::Error>> {
    let (grid, mut solver) = build(cells, feed, kill)?;
    let mut series = DumpSeries::create(folder, "gray-scott", &grid, true, None)?;
    let every = (steps / 10).max(1);
    for step in 0..=steps {
        if step > 0 {
            solver.advance(step as f64, TimeStep::Fixed(1.0))?;
        }
        if step % every == 0 || step == steps {
            solver.with_solution("u", |u| {
                solver.with_solution("v", |v| {
                    series.write(solver.time(), step, &[("u", u), ("v", v)])
                })
            })???;
        }
    }
    let title = format!(
        "Gray-Scott v, F = {feed}, k = {kill}, t = {}",
        solver.time()
    );
    solver.with_solution("v", |v| {
        field_image(
            &folder.join("gray-scott_v.png"),
            &title,
            v,
            Plane::Xy { z: 0 },
        )
    })??;
    Ok(solver)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: f64| -> Result<f64, String> {
        arguments.get(i).map_or(Ok(default), |a| {
            a.parse()
                .map_err(|_| format!("argument {} `{a}` is not a number", i + 1))
        })
    };
    let (feed, kill) = (number(0, 0.04)?, number(1, 0.06)?);
    let (cells, steps) = (number(2, 256.0)? as usize, number(3, 10000.0)? as u64);
    let folder = Path::new("gray-scott");
    let started = std::time::Instant::now();
    let solver = run(folder, cells, steps, feed, kill)?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{steps} steps on {cells}^2 in {seconds:.2} s ({:.2} ns per cell-step); dumps in {}/gray-scott.xmf, image {}/gray-scott_v.png",
        seconds * 1e9 / (steps as f64 * (cells * cells) as f64),
        folder.display(),
        folder.display()
    );
    let _ = solver;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interior values of species `name`, x fastest.
    fn interior(solver: &TransportSolver, name: &str) -> Vec<f64> {
        solver
            .with_solution(name, |f| {
                // [i, j, k] reversed: x fastest.
                let view = f.interior_view().expect("on the CPU");
                view.t().iter().copied().collect::<Vec<f64>>()
            })
            .expect("the species exists")
    }

    /// Forward Euler with the five-point Laplacian, written out: what the
    /// graph's fused kernels must compute.
    fn reference(cells: usize, steps: usize, feed: f64, kill: f64) -> (Vec<f64>, Vec<f64>) {
        let h = SPACING;
        let side = h * cells as f64;
        let centre = |i: usize| (i as f64 + 0.5) * h;
        let at = |i: usize, j: usize| i + cells * j;
        let (mut u, mut v) = (vec![0.0; cells * cells], vec![0.0; cells * cells]);
        for j in 0..cells {
            for i in 0..cells {
                u[at(i, j)] = initial(side, 'u', [centre(i), centre(j), 0.0]);
                v[at(i, j)] = initial(side, 'v', [centre(i), centre(j), 0.0]);
            }
        }
        let laplacian = |f: &[f64], i: usize, j: usize| {
            let (e, w) = ((i + 1) % cells, (i + cells - 1) % cells);
            let (n, s) = ((j + 1) % cells, (j + cells - 1) % cells);
            (f[at(e, j)] - 2.0 * f[at(i, j)] + f[at(w, j)]) / (h * h)
                + (f[at(i, n)] - 2.0 * f[at(i, j)] + f[at(i, s)]) / (h * h)
        };
        for _ in 0..steps {
            let (mut un, mut vn) = (u.clone(), v.clone());
            for j in 0..cells {
                for i in 0..cells {
                    let (a, b) = (u[at(i, j)], v[at(i, j)]);
                    un[at(i, j)] = a + DU * laplacian(&u, i, j) - a * b * b + feed * (1.0 - a);
                    vn[at(i, j)] = b + DV * laplacian(&v, i, j) + a * b * b - (feed + kill) * b;
                }
            }
            (u, v) = (un, vn);
        }
        (u, v)
    }

    #[test]
    fn the_graph_steps_as_the_written_out_scheme() {
        let (cells, steps) = (32, 40);
        let folder = tempfile::tempdir().unwrap();
        let solver = run(folder.path(), cells, steps as u64, 0.04, 0.06).unwrap();
        let (u, v) = reference(cells, steps, 0.04, 0.06);
        for (name, ours, theirs) in [
            ("u", interior(&solver, "u"), u),
            ("v", interior(&solver, "v"), v),
        ] {
            let worst = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(worst < 1e-13, "{name}: largest difference {worst:e}");
        }
        // Ten dumps and the last, each whole, and the image.
        let series = std::fs::read_to_string(folder.path().join("gray-scott.xmf")).unwrap();
        assert_eq!(series.matches("<Time Value=").count(), 11, "{series}");
        let png = std::fs::read(folder.path().join("gray-scott_v.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }

    #[test]
    fn the_seed_grows_into_a_pattern() {
        // A 64^2 grid (side 0.625) for 3000 steps: the seed has spread well
        // beyond its square, split into structure, and stays bounded.
        let folder = tempfile::tempdir().unwrap();
        let solver = run(folder.path(), 64, 3000, 0.04, 0.06).unwrap();
        let v = interior(&solver, "v");
        let u = interior(&solver, "u");
        assert!(u.iter().chain(&v).all(|x| (0.0..=1.0).contains(x)));
        let active = v.iter().filter(|&&x| x > 0.1).count();
        // The seed covered 20 x 20 cells.
        eprintln!("v > 0.1 in {active} cells");
        assert!(active > 800, "v > 0.1 in {active} cells");
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let spread = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        eprintln!("v: mean {mean}, standard deviation {spread}");
        assert!(
            spread > 0.05,
            "v is almost uniform: mean {mean}, standard deviation {spread}"
        );
    }
}
