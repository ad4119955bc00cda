//! A term the field language cannot say, written in Rust as a native node
//! of the solver's graph: radiative cooling with an absorption coefficient
//! read from a table,
//!
//! ```text
//! dT/dt = D lap(T) - a(T) (T^4 - Tinf^4),   a(T) by linear interpolation in a table
//! ```
//!
//! The node declares what it computes (`radiation`) and what it reads (the
//! solution as the right-hand side reads it, `equation.solution_tag()`);
//! the graph schedules it before the right-hand side that adds it as a
//! source. A native node runs on the CPU, between the compiled kernels.
//!
//! Run: `cargo run --release --example native_node`

use watershed::exprgraph::{NativeExpression, Tag};
use watershed::fields::{CellCentre, Grid, LocationKind};
use watershed::solvers::{
    BoundaryCondition, BoundaryConditions, Diffusivity, TimeIntegrator, TimeStep,
    TransportEquation, TransportSolver, TransportSolverBuilder,
};

/// The absorption coefficient against temperature: (T, a) pairs, increasing
/// in T; outside the table the end values hold.
const ABSORPTION: [(f64, f64); 4] = [(0.0, 1.0), (1.0, 0.8), (2.0, 0.5), (3.0, 0.4)];
/// The surroundings' temperature.
const T_INF: f64 = 1.0;

/// The absorption coefficient at `t`.
fn absorption(t: f64) -> f64 {
    let (first, last) = (ABSORPTION[0], ABSORPTION[ABSORPTION.len() - 1]);
    if t <= first.0 {
        return first.1;
    }
    ABSORPTION
        .windows(2)
        .find(|w| t <= w[1].0)
        .map_or(last.1, |w| {
            let s = (t - w[0].0) / (w[1].0 - w[0].0);
            w[0].1 + s * (w[1].1 - w[0].1)
        })
}

/// The radiative source at temperature `t`.
fn radiation(t: f64) -> f64 {
    -absorption(t) * (t.powi(4) - T_INF.powi(4))
}

/// A 2D square of `cells`^2 cells, diffusivity `d`, insulated walls, the
/// radiation as a native node, forward Euler, from `initial([x, y, z])`.
fn build(
    cells: usize,
    d: f64,
    initial: impl Fn([f64; 3]) -> f64,
) -> Result<TransportSolver, Box<dyn std::error::Error>> {
    let grid = Grid::new([cells, cells, 1], [1.0, 1.0, 1.0 / cells as f64], [0.0; 3])?;
    let source = Tag::none("radiation");
    let mut equation = TransportEquation::new("T")
        .source(source.clone())
        .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)));
    if d > 0.0 {
        equation = equation.diffusion(Diffusivity::Constant(d));
    }
    let temperature = equation.solution_tag();
    let cooling = NativeExpression::new(
        "radiation",
        vec![(source.clone(), LocationKind::CellCentre)],
        vec![temperature.clone()],
        move |context| {
            let (t, q) =
                context.input_and_output::<CellCentre, CellCentre>(&temperature, &source)?;
            let layout = t.layout().clone();
            let (t, q) = (t.values()?, q.values_mut()?);
            // Every point the right-hand side reads: the interior.
            for index in layout.interior().iter() {
                let i = layout.linear_index(index);
                q[i] = radiation(t[i]);
            }
            Ok(())
        },
    );
    let mut builder = TransportSolverBuilder::new(&grid.whole_domain(1))
        .equation(equation)
        .integrator(TimeIntegrator::ForwardEuler);
    builder.factory_mut().register(cooling)?;
    let solver = builder.build()?;
    solver.set_initial_condition("T", initial)?;
    Ok(solver)
}

/// The interior values of T, x fastest.
fn temperatures(solver: &TransportSolver) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    // The interior as an ndarray view [i, j, k]; reversed axes iterate with
    // x fastest.
    solver.with_solution("T", |t| -> Result<Vec<f64>, Box<dyn std::error::Error>> {
        Ok(t.interior_view()?.t().iter().copied().collect())
    })?
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A hot disc in a cooler square.
    let hot = |[x, y, _]: [f64; 3]| {
        if (x - 0.5).powi(2) + (y - 0.5).powi(2) < 0.04 {
            3.0
        } else {
            1.5
        }
    };
    let mut solver = build(64, 1e-3, hot)?;
    println!(
        "graph: {} nodes after fusion, {} native",
        solver.graph().node_count(),
        solver.graph().native_node_count()
    );
    for k in 1..=5 {
        // Fixed: the radiation is stiffer (43 per unit time at T = 3) than
        // the diffusion limit (0.05 here) allows forward Euler.
        solver.advance(0.2 * k as f64, TimeStep::Fixed(0.01))?;
        let t = temperatures(&solver)?;
        let (low, high) = t
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        println!("t = {:.1}: T from {low:.4} to {high:.4}", solver.time());
    }
    println!("{}", solver.graph().timing_table());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_interpolates_and_holds_its_ends() {
        assert_eq!(absorption(-1.0), 1.0);
        assert_eq!(absorption(1.5), 0.65);
        assert_eq!(absorption(9.0), 0.4);
        assert_eq!(radiation(T_INF), 0.0);
    }

    /// Without diffusion each cell cools by itself: forward Euler on the
    /// tabulated ODE, written out.
    #[test]
    fn each_cell_cools_as_the_ode_written_out() {
        let start = |[x, y, _]: [f64; 3]| 1.2 + x + y;
        let mut solver = build(6, 0.0, start).unwrap();
        assert_eq!(solver.graph().native_node_count(), 1);
        let (dt, steps) = (2e-3, 300);
        solver
            .advance(dt * steps as f64, TimeStep::Fixed(dt))
            .unwrap();
        let ours = temperatures(&solver).unwrap();
        for (n, value) in ours.iter().enumerate() {
            let centre = |i: usize| (i as f64 + 0.5) / 6.0;
            let mut t = start([centre(n % 6), centre(n / 6), 0.0]);
            for _ in 0..steps {
                t += dt * radiation(t);
            }
            assert!((value - t).abs() < 1e-13, "cell {n}: {value} against {t}");
        }
    }

    /// With diffusion the hot disc cools towards the surroundings and
    /// spreads; nothing falls below them.
    #[test]
    fn the_hot_disc_cools_towards_the_surroundings() {
        let hot = |[x, y, _]: [f64; 3]| {
            if (x - 0.5).powi(2) + (y - 0.5).powi(2) < 0.04 {
                3.0
            } else {
                1.5
            }
        };
        let mut solver = build(24, 1e-3, hot).unwrap();
        solver.advance(1.0, TimeStep::Fixed(0.01)).unwrap();
        let t = temperatures(&solver).unwrap();
        let high = t.iter().copied().fold(f64::MIN, f64::max);
        assert!(high < 1.6, "the hottest cell is still at {high}");
        assert!(t.iter().all(|v| *v > T_INF), "{t:?}");
    }
}
