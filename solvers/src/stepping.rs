//! The time loop and the stability limits both solvers share: advancing to
//! an end time with a fixed or a stability-limited `dt` (the last step
//! shortened to land on the end time), and the Courant and diffusion
//! limits that give that `dt`.

use crate::error::{SolverError, SolverResult};
use crate::integrator::TimeIntegrator;
use crate::staggered::SpaceOrder;
use watershed_fields::Grid;

/// How `dt` is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeStep {
    /// The same `dt` every step (the last step is shortened to land on the end time).
    Fixed(f64),
    /// The largest `dt` with `max|u| dt / h <= cfl` and
    /// `max Gamma dt / h^2 <= diffusion_number`, recomputed every step.
    Limited {
        /// Courant number.
        cfl: f64,
        /// Diffusion number.
        diffusion_number: f64,
    },
}

/// A solver that advances in time one step at a time.
pub(crate) trait Stepping {
    /// The current time.
    fn time(&self) -> f64;
    /// Steps taken so far.
    fn steps(&self) -> u64;
    /// The largest stable `dt` for these Courant and diffusion numbers.
    fn stable_time_step(&self, cfl: f64, diffusion_number: f64) -> SolverResult<f64>;
    /// Advances by `dt`.
    fn step(&mut self, dt: f64) -> SolverResult<()>;
}

/// Advances `solver` to `end_time`; returns the number of steps taken.
pub(crate) fn advance(
    solver: &mut impl Stepping,
    end_time: f64,
    step: TimeStep,
) -> SolverResult<u64> {
    check_advance(solver.time(), end_time, step)?;
    let first = solver.steps();
    let tolerance = 1e-12 * end_time.abs().max(1.0);
    while solver.time() < end_time - tolerance {
        let dt = match step {
            TimeStep::Fixed(dt) => dt,
            TimeStep::Limited {
                cfl,
                diffusion_number,
            } => solver.stable_time_step(cfl, diffusion_number)?,
        };
        solver.step(dt.min(end_time - solver.time()))?;
    }
    Ok(solver.steps() - first)
}

/// Refuses an end time or a time-step rule that cannot reach it.
pub(crate) fn check_advance(time: f64, end_time: f64, step: TimeStep) -> SolverResult<()> {
    if !end_time.is_finite() {
        return Err(SolverError::TimeStep(format!(
            "end_time = {end_time} must be finite"
        )));
    }
    if end_time < time {
        return Err(SolverError::TimeStep(format!(
            "end_time = {end_time} is before the current time {time}; time only moves forward"
        )));
    }
    match step {
        TimeStep::Fixed(dt) if !(dt.is_finite() && dt > 0.0) => Err(SolverError::TimeStep(
            format!("TimeStep::Fixed({dt}): dt must be finite and positive"),
        )),
        TimeStep::Limited {
            cfl,
            diffusion_number,
        } => match stability_problem(cfl, diffusion_number) {
            Some(problem) => Err(SolverError::TimeStep(format!(
                "TimeStep::Limited: {problem}"
            ))),
            None => Ok(()),
        },
        TimeStep::Fixed(_) => Ok(()),
    }
}

/// Refuses a Courant or diffusion number that is not finite and positive,
/// naming it.
pub(crate) fn check_stability_numbers(cfl: f64, diffusion_number: f64) -> SolverResult<()> {
    match stability_problem(cfl, diffusion_number) {
        Some(problem) => Err(SolverError::TimeStep(problem)),
        None => Ok(()),
    }
}

/// What is wrong with a Courant or diffusion number, if anything.
fn stability_problem(cfl: f64, diffusion_number: f64) -> Option<String> {
    [("cfl", cfl), ("diffusion_number", diffusion_number)]
        .into_iter()
        .find(|(_, value)| !(value.is_finite() && *value > 0.0))
        .map(|(name, value)| format!("{name} = {value} must be finite and positive"))
}

/// The smallest spacing over the grid's active axes.
pub(crate) fn smallest_spacing(grid: &Grid) -> f64 {
    (0..3)
        .filter(|&a| grid.active_dimensions()[a])
        .map(|a| grid.spacing()[a])
        .fold(f64::INFINITY, f64::min)
}

/// How far an integrator's stability region reaches along the negative
/// real axis (diffusion) and along the imaginary axis (central
/// convection): forward Euler and SSP-RK2 reach 2 and 0 (central
/// convection alone is unstable with them for every `dt`), SSP-RK3 2.5127
/// and sqrt(3).
pub(crate) fn stability_reach(integrator: TimeIntegrator) -> (f64, f64) {
    match integrator {
        TimeIntegrator::ForwardEuler | TimeIntegrator::SspRk2 => (2.0, 0.0),
        TimeIntegrator::SspRk3 => (2.512_745_3, 3f64.sqrt()),
    }
}

/// The largest eigenvalue magnitudes of the order's operators: the
/// Laplacian's per `1 / h^2` (4 at second order, 16/3 for the five-point
/// fourth-order one) and the central first derivative's per `1 / h` (1;
/// `9/8 sin t - 1/24 sin 3t` peaks at 7/6).
pub(crate) fn spectral_factors(order: SpaceOrder) -> (f64, f64) {
    match order {
        SpaceOrder::Second => (4.0, 1.0),
        SpaceOrder::Fourth => (16.0 / 3.0, 7.0 / 6.0),
    }
}

/// Stability limits on `dt` gathered one term at a time: the user's
/// Courant and diffusion numbers (`max |u| dt / h <= cfl`, `Gamma dt / h^2
/// <= diffusion_number`, `h` the smallest spacing), and the explicit limit
/// of the scheme itself ([`Self::scheme_limit`]), which the step never
/// exceeds whatever the numbers say.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StabilityLimit {
    h: f64,
    cfl: f64,
    diffusion_number: f64,
    dt: f64,
    /// The integrator's reach (real, imaginary), the order's factors.
    reach: (f64, f64),
    factors: (f64, f64),
    /// `sum_a 1 / h_a^2` and `1 / h_a` over the active axes.
    inverse_spacing: [f64; 3],
    /// The spectral radii gathered so far: diffusion and central convection.
    diffusion_radius: f64,
    convection_radius: f64,
}

impl StabilityLimit {
    /// No limit yet, for `grid`, the numbers (checked), and the scheme.
    pub(crate) fn new(
        grid: &Grid,
        cfl: f64,
        diffusion_number: f64,
        integrator: TimeIntegrator,
        order: SpaceOrder,
    ) -> SolverResult<Self> {
        check_stability_numbers(cfl, diffusion_number)?;
        let active = grid.active_dimensions();
        Ok(StabilityLimit {
            h: smallest_spacing(grid),
            cfl,
            diffusion_number,
            dt: f64::INFINITY,
            reach: stability_reach(integrator),
            factors: spectral_factors(order),
            inverse_spacing: [0, 1, 2].map(|a| {
                if active[a] {
                    1.0 / grid.spacing()[a]
                } else {
                    0.0
                }
            }),
            diffusion_radius: 0.0,
            convection_radius: 0.0,
        })
    }

    /// Limits by `max |u| dt / h <= cfl` (no limit when `speed` is 0).
    /// `speeds` are the largest velocity magnitudes per axis; with
    /// `central`, the convection is a central difference whose imaginary
    /// eigenvalues the integrator must reach.
    pub(crate) fn convection(&mut self, speeds: [f64; 3], central: bool) {
        let speed = speeds.iter().copied().fold(0.0, f64::max);
        if speed > 0.0 {
            self.dt = self.dt.min(self.cfl * self.h / speed);
        }
        if central {
            self.convection_radius += self.factors.1
                * (0..3)
                    .map(|a| speeds[a] * self.inverse_spacing[a])
                    .sum::<f64>();
        }
    }

    /// Limits by `max Gamma dt / h^2 <= diffusion_number` (no limit when
    /// `diffusivity` is 0).
    pub(crate) fn diffusion(&mut self, diffusivity: f64) {
        if diffusivity > 0.0 {
            self.dt = self
                .dt
                .min(self.diffusion_number * self.h * self.h / diffusivity);
            let sum: f64 = self.inverse_spacing.iter().map(|i| i * i).sum();
            self.diffusion_radius = self
                .diffusion_radius
                .max(self.factors.0 * diffusivity * sum);
        }
    }

    /// The explicit limit of the scheme: `dt (rho_d / R + rho_c / I) <= 1`
    /// with the spectral radii `rho` of diffusion and central convection
    /// and the integrator's reaches `R`, `I` (a sufficient estimate: the
    /// segment between `-R` and `i I` lies inside SSP-RK3's region). Where
    /// the integrator does not reach the imaginary axis (forward Euler,
    /// SSP-RK2), only diffusion counts; central convection is then stable
    /// only through the viscous damping of each mode. `None`: nothing
    /// limits it.
    pub(crate) fn scheme_limit(&self) -> Option<f64> {
        let (real, imaginary) = self.reach;
        let mut rate = self.diffusion_radius / real;
        if imaginary > 0.0 {
            rate += self.convection_radius / imaginary;
        }
        (rate > 0.0).then(|| 1.0 / rate)
    }

    /// The limit, or an error saying `unlimited` when nothing limited it
    /// (or a term was not finite).
    pub(crate) fn time_step(self, unlimited: &str) -> SolverResult<f64> {
        let dt = match self.scheme_limit() {
            Some(scheme) => self.dt.min(scheme),
            None => self.dt,
        };
        if dt.is_finite() {
            Ok(dt)
        } else {
            Err(SolverError::TimeStep(unlimited.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock whose stable step is `limit`, recording the steps it took.
    struct Clock {
        time: f64,
        taken: Vec<f64>,
        limit: f64,
    }

    impl Stepping for Clock {
        fn time(&self) -> f64 {
            self.time
        }
        fn steps(&self) -> u64 {
            self.taken.len() as u64
        }
        fn stable_time_step(&self, cfl: f64, _diffusion_number: f64) -> SolverResult<f64> {
            Ok(cfl * self.limit)
        }
        fn step(&mut self, dt: f64) -> SolverResult<()> {
            self.time += dt;
            self.taken.push(dt);
            Ok(())
        }
    }

    #[test]
    fn the_last_step_is_shortened_to_land_on_the_end_time() {
        let mut clock = Clock {
            time: 0.0,
            taken: Vec::new(),
            limit: 0.3,
        };
        assert_eq!(advance(&mut clock, 1.0, TimeStep::Fixed(0.3)).unwrap(), 4);
        assert!((clock.taken[3] - 0.1).abs() < 1e-15, "{:?}", clock.taken);
        assert!((clock.time - 1.0).abs() < 1e-15);
        let steps = advance(
            &mut clock,
            2.0,
            TimeStep::Limited {
                cfl: 0.5,
                diffusion_number: 1.0,
            },
        )
        .unwrap();
        assert_eq!(steps, 7, "0.15 per step over 1.0: {:?}", clock.taken);
        // Already there: no step.
        assert_eq!(advance(&mut clock, 2.0, TimeStep::Fixed(0.1)).unwrap(), 0);
    }

    #[test]
    fn bad_end_times_and_numbers_are_refused_by_name() {
        let mut clock = Clock {
            time: 1.0,
            taken: Vec::new(),
            limit: 1.0,
        };
        let message = |e: SolverError| e.to_string();
        assert!(
            message(advance(&mut clock, 0.5, TimeStep::Fixed(0.1)).unwrap_err())
                .contains("before the current time")
        );
        assert!(
            message(advance(&mut clock, f64::NAN, TimeStep::Fixed(0.1)).unwrap_err())
                .contains("end_time = NaN")
        );
        assert!(
            message(advance(&mut clock, 2.0, TimeStep::Fixed(0.0)).unwrap_err())
                .contains("TimeStep::Fixed(0)")
        );
        let limited = TimeStep::Limited {
            cfl: 1.0,
            diffusion_number: -1.0,
        };
        assert!(
            message(advance(&mut clock, 2.0, limited).unwrap_err())
                .contains("TimeStep::Limited: diffusion_number = -1")
        );
        assert!(clock.taken.is_empty());
    }

    fn grid(dimensions: usize) -> Grid {
        let cells = [
            10,
            if dimensions > 1 { 10 } else { 1 },
            if dimensions > 2 { 10 } else { 1 },
        ];
        Grid::new(cells, [1.0; 3], [0.0; 3]).unwrap()
    }

    #[test]
    fn the_limit_is_the_smallest_of_the_courant_and_diffusion_limits() {
        let (fe, second) = (TimeIntegrator::ForwardEuler, SpaceOrder::Second);
        let mut limit = StabilityLimit::new(&grid(1), 0.5, 0.25, fe, second).unwrap();
        limit.convection([2.0, 0.0, 0.0], false); // 0.5 * 0.1 / 2 = 0.025
        limit.diffusion(0.5); // 0.25 * 0.01 / 0.5 = 0.005
        limit.convection([0.0; 3], false);
        assert!((limit.time_step("unlimited").unwrap() - 0.005).abs() < 1e-18);
        let still = StabilityLimit::new(&grid(1), 0.5, 0.25, fe, second).unwrap();
        assert_eq!(
            still
                .time_step("nothing limits it")
                .unwrap_err()
                .to_string(),
            "time step: nothing limits it"
        );
        let error = StabilityLimit::new(&grid(1), f64::INFINITY, 0.25, fe, second).unwrap_err();
        assert!(error.to_string().contains("cfl = inf"), "{error}");
    }

    /// Forward Euler's diffusion limit is h^2 / (2 d Gamma): a diffusion
    /// number of 0.5 is stable in 1D and capped to 1/4 in 2D, 1/6 in 3D;
    /// SSP-RK3 reaches 2.5127 / 2 times further; the fourth-order Laplacian
    /// (radius 16/3 instead of 4 per axis) shortens it by 3/4.
    #[test]
    fn the_scheme_limit_knows_the_integrator_dimension_and_order() {
        let h2 = 0.01;
        let diffusion = |d, integrator, order| {
            let mut limit = StabilityLimit::new(&grid(d), 1.0, 0.5, integrator, order).unwrap();
            limit.diffusion(1.0);
            limit.time_step("").unwrap() / h2
        };
        let (fe, rk3) = (TimeIntegrator::ForwardEuler, TimeIntegrator::SspRk3);
        let (second, fourth) = (SpaceOrder::Second, SpaceOrder::Fourth);
        for (d, expected) in [(1, 0.5), (2, 0.25), (3, 1.0 / 6.0)] {
            let got = diffusion(d, fe, second);
            assert!((got - expected).abs() < 1e-12, "{d}D: {got}");
        }
        let rk3_3d = diffusion(3, rk3, second);
        assert!(
            (rk3_3d - 0.5f64.min(2.5127453 / 12.0)).abs() < 1e-9,
            "{rk3_3d}"
        );
        let fourth_3d = diffusion(3, fe, fourth);
        assert!((fourth_3d - 0.125).abs() < 1e-12, "{fourth_3d}");
        // Central convection: SSP-RK3 reaches sqrt(3) on the imaginary
        // axis; with speeds (1, 1, 1) on h = 0.1 the radius is 30.
        let mut limit = StabilityLimit::new(&grid(3), 1.0, 0.5, rk3, second).unwrap();
        limit.convection([1.0; 3], true);
        let scheme = limit.scheme_limit().unwrap();
        assert!((scheme - 3f64.sqrt() / 30.0).abs() < 1e-15, "{scheme}");
        // Forward Euler does not reach the imaginary axis: no convective
        // scheme limit, only the Courant number's.
        let mut limit = StabilityLimit::new(&grid(3), 1.0, 0.5, fe, second).unwrap();
        limit.convection([1.0; 3], true);
        assert_eq!(limit.scheme_limit(), None);
        assert!((limit.time_step("").unwrap() - 0.1).abs() < 1e-15);
    }
}
