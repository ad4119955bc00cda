//! A premixed flame in one dimension: a progress variable `c` (0 fresh, 1
//! burnt) whose temperature `T = 1 + Q c` drives a one-step Arrhenius
//! source, written in the field language and compiled to C. The example
//! prints the generated C of the graph's kernels (the source's `exp` is
//! the engine's own vectorised one), then runs the flame and prints where
//! its front is.
//!
//! ```text
//! dc/dt = D d2c/dx2 + A (1 - c) exp(-Ta / (1 + Q c))
//! ```
//!
//! Run: `cargo run --release --example arrhenius`

use watershed::fields::{CellCentre, Grid};
use watershed::operators::{exp, vmath::Dialect};
use watershed::solvers::{
    BoundaryCondition, BoundaryConditions, Diffusivity, SolverSymbols, TimeIntegrator, TimeStep,
    TransportEquation, TransportSolver, TransportSolverBuilder,
};

/// Heat release (burnt temperature 1 + Q), activation temperature and
/// pre-exponential factor, non-dimensional.
const Q: f64 = 4.0;
const TA: f64 = 40.0;
const A: f64 = 3e5;

/// `cells` cells on [0, 1], diffusivity `d`, insulated ends, SSP-RK3,
/// started from `initial(x)`.
fn build(
    cells: usize,
    d: f64,
    initial: impl Fn(f64) -> f64,
) -> Result<TransportSolver, Box<dyn std::error::Error>> {
    let grid = Grid::new(
        [cells, 1, 1],
        [1.0, 1.0 / cells as f64, 1.0 / cells as f64],
        [0.0; 3],
    )?;
    let mut equation = TransportEquation::new("c")
        .source_expression(|s| {
            let c = s.solution::<CellCentre>("c");
            A * (1.0 - c.clone()) * exp(-TA / (1.0 + Q * c))
        })
        .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)));
    if d > 0.0 {
        equation = equation.diffusion(Diffusivity::Constant(d));
    }
    let solver = TransportSolverBuilder::new(&grid.whole_domain(1))
        .equation(equation)
        .integrator(TimeIntegrator::SspRk3)
        .build()?;
    solver.set_initial_condition("c", |[x, _, _]| initial(x))?;
    Ok(solver)
}

/// The interior values of `c`, x fastest.
fn profile(solver: &TransportSolver) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    // The interior as an ndarray view [i, j, k]; reversed axes iterate with
    // x fastest.
    solver.with_solution("c", |c| -> Result<Vec<f64>, Box<dyn std::error::Error>> {
        Ok(c.interior_view()?.t().iter().copied().collect())
    })?
}

/// Where `c` first falls below one half, by linear interpolation between
/// cell centres (the flame front), on a grid of `cells` cells on [0, 1].
fn front(c: &[f64]) -> f64 {
    let h = 1.0 / c.len() as f64;
    for i in 1..c.len() {
        if c[i] < 0.5 {
            let s = (c[i - 1] - 0.5) / (c[i - 1] - c[i]);
            return (i as f64 - 0.5 + s) * h;
        }
    }
    1.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Burnt gas on the left tenth, fresh gas elsewhere.
    let mut solver = build(400, 1e-3, |x| if x < 0.1 { 1.0 } else { 0.0 })?;
    println!("{}", solver.graph().generated_source(Dialect::C)?);
    let step = TimeStep::Limited {
        cfl: 0.5,
        diffusion_number: 0.2,
    };
    let mut last = (0.0, front(&profile(&solver)?));
    for k in 1..=8 {
        solver.advance(0.25 * k as f64, step)?;
        let now = (solver.time(), front(&profile(&solver)?));
        println!(
            "t = {:.2}: front at x = {:.4}, moving at {:.3}",
            now.0,
            now.1,
            (now.1 - last.1) / (now.0 - last.0)
        );
        last = now;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reaction rate at progress `c`, as the generated kernel computes it.
    fn rate(c: f64) -> f64 {
        A * (1.0 - c) * (-TA / (1.0 + Q * c)).exp()
    }

    /// Without diffusion every cell is a closed reactor: the graph's
    /// compiled source, stepped by SSP-RK3, is the ODE stepped by SSP-RK3
    /// written out here.
    #[test]
    fn each_cell_is_the_reactor_written_out() {
        let dt = 1e-3;
        let start = |x: f64| 0.3 + 0.6 * x;
        let mut solver = build(8, 0.0, start).unwrap();
        let steps = 400;
        solver
            .advance(dt * steps as f64, TimeStep::Fixed(dt))
            .unwrap();
        let ours = profile(&solver).unwrap();
        for (i, value) in ours.iter().enumerate() {
            let mut c = start((i as f64 + 0.5) / 8.0);
            for _ in 0..steps {
                let c1 = c + dt * rate(c);
                let c2 = 0.75 * c + 0.25 * (c1 + dt * rate(c1));
                c = c / 3.0 + 2.0 / 3.0 * (c2 + dt * rate(c2));
            }
            assert!((value - c).abs() < 1e-12, "cell {i}: {value} against {c}");
        }
        // The hottest cells have burnt through, the coldest barely started.
        assert!(ours[7] > 0.99 && ours[0] < 0.4, "{ours:?}");
    }

    /// The flame front moves into the fresh gas at a steady speed, with the
    /// progress variable between its bounds.
    #[test]
    fn the_front_travels_steadily() {
        let mut solver = build(200, 1e-3, |x| if x < 0.1 { 1.0 } else { 0.0 }).unwrap();
        let step = TimeStep::Limited {
            cfl: 0.5,
            diffusion_number: 0.2,
        };
        let mut fronts = Vec::new();
        for k in 1..=4 {
            solver.advance(0.25 * k as f64, step).unwrap();
            let c = profile(&solver).unwrap();
            assert!(c.iter().all(|v| (-1e-9..=1.0 + 1e-9).contains(v)), "{c:?}");
            fronts.push(front(&c));
        }
        let speeds: Vec<f64> = fronts.windows(2).map(|w| (w[1] - w[0]) / 0.25).collect();
        assert!(speeds.iter().all(|s| *s > 0.05), "fronts {fronts:?}");
        let (low, high) = speeds
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), s| (a.min(*s), b.max(*s)));
        assert!(high - low < 0.1 * high, "speeds {speeds:?}");
    }

    #[test]
    fn the_generated_c_holds_the_source() {
        let solver = build(16, 1e-3, |_| 0.0).unwrap();
        let source = solver.graph().generated_source(Dialect::C).unwrap();
        assert!(source.contains("rhs_c"), "{source}");
        assert!(source.contains("exp"), "{source}");
    }
}
