//! The time loop and the stability limits both solvers share: advancing to
//! an end time with a fixed or a stability-limited `dt` (the last step
//! shortened to land on the end time), and the Courant and diffusion
//! limits that give that `dt`.

use crate::error::{SolverError, SolverResult};
use crate::solver::TimeStep;
use watershed_fields::Grid;

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

/// Stability limits on `dt` gathered one term at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StabilityLimit {
    h: f64,
    cfl: f64,
    diffusion_number: f64,
    dt: f64,
}

impl StabilityLimit {
    /// No limit yet, for spacing `h` and the given numbers (checked).
    pub(crate) fn new(h: f64, cfl: f64, diffusion_number: f64) -> SolverResult<Self> {
        check_stability_numbers(cfl, diffusion_number)?;
        Ok(StabilityLimit {
            h,
            cfl,
            diffusion_number,
            dt: f64::INFINITY,
        })
    }

    /// Limits by `max |u| dt / h <= cfl` (no limit when `speed` is 0).
    pub(crate) fn convection(&mut self, speed: f64) {
        if speed > 0.0 {
            self.dt = self.dt.min(self.cfl * self.h / speed);
        }
    }

    /// Limits by `max Gamma dt / h^2 <= diffusion_number` (no limit when
    /// `diffusivity` is 0).
    pub(crate) fn diffusion(&mut self, diffusivity: f64) {
        if diffusivity > 0.0 {
            self.dt = self
                .dt
                .min(self.diffusion_number * self.h * self.h / diffusivity);
        }
    }

    /// The limit, or an error saying `unlimited` when nothing limited it
    /// (or a term was not finite).
    pub(crate) fn time_step(self, unlimited: &str) -> SolverResult<f64> {
        if self.dt.is_finite() {
            Ok(self.dt)
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

    #[test]
    fn the_limit_is_the_smallest_of_the_courant_and_diffusion_limits() {
        let mut limit = StabilityLimit::new(0.1, 0.5, 0.25).unwrap();
        limit.convection(2.0); // 0.5 * 0.1 / 2 = 0.025
        limit.diffusion(0.5); // 0.25 * 0.01 / 0.5 = 0.005
        limit.convection(0.0);
        assert!((limit.time_step("unlimited").unwrap() - 0.005).abs() < 1e-18);
        let still = StabilityLimit::new(0.1, 0.5, 0.25).unwrap();
        assert_eq!(
            still
                .time_step("nothing limits it")
                .unwrap_err()
                .to_string(),
            "time step: nothing limits it"
        );
        let error = StabilityLimit::new(0.1, f64::INFINITY, 0.25).unwrap_err();
        assert!(error.to_string().contains("cfl = inf"), "{error}");
    }
}
