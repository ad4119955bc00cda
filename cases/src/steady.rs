//! The steady-state test of the flow cases that run until their flow
//! stops changing (the cavity, the channel): every `window` time units the
//! kinetic energy is compared with its value one window before; the flow is
//! steady when the relative change is at most `tolerance`. Its state is
//! three numbers, kept in checkpoints as the series `steady_controller`
//! so that a restart decides at the same step.

use crate::checkpoint::{load_series, save_series};
use crate::error::CaseResult;

/// The checkpoint series holding the test's state.
const SERIES: &str = "steady_controller";

/// The state of the steady-state test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyState {
    /// Relative change of the kinetic energy that counts as steady.
    tolerance: f64,
    /// Time between comparisons.
    window: f64,
    /// Time of the next comparison.
    next_check: f64,
    /// The kinetic energy at the last comparison.
    energy: f64,
    /// Whether the flow was found steady.
    steady: bool,
    /// What is compared, for messages ("kinetic energy", "c_D").
    quantity: &'static str,
}

impl SteadyState {
    /// A test of the kinetic energy every `window` time units, from t = 0.
    pub fn new(tolerance: f64, window: f64) -> Self {
        Self::of("kinetic energy", tolerance, window)
    }

    /// A test of another `quantity` (its name for messages).
    pub fn of(quantity: &'static str, tolerance: f64, window: f64) -> Self {
        SteadyState {
            tolerance,
            window,
            next_check: window,
            energy: 0.0,
            steady: false,
            quantity,
        }
    }

    /// After a step to `time`: compares the kinetic energy (`energy`,
    /// asked for only when a comparison is due) with the last one.
    pub fn observe(
        &mut self,
        time: f64,
        energy: impl FnOnce() -> CaseResult<f64>,
    ) -> CaseResult<()> {
        if time >= self.next_check * (1.0 - 1e-12) {
            let energy = energy()?;
            if (energy - self.energy).abs() <= self.tolerance * energy {
                self.steady = true;
            }
            self.next_check = time + self.window;
            self.energy = energy;
        }
        Ok(())
    }

    /// Whether the flow was found steady.
    pub fn is_steady(&self) -> bool {
        self.steady
    }

    /// The reason to stop, once steady.
    pub fn stop_reason(&self) -> Option<String> {
        self.steady.then(|| {
            format!(
                "steady state: {} changed by <= {:e} (relative) over {} time units",
                self.quantity, self.tolerance, self.window
            )
        })
    }

    /// The progress line's figure.
    pub fn status(&self) -> String {
        if self.quantity == "kinetic energy" {
            format!("KE = {:.6e}", self.energy)
        } else {
            format!("{} = {:.6e}", self.quantity, self.energy)
        }
    }

    /// Writes the state into a checkpoint.
    pub fn save(&self, group: &hdf5::Group) -> CaseResult<()> {
        let steady = if self.steady { 1.0 } else { 0.0 };
        save_series(group, SERIES, &[self.next_check, self.energy, steady])
    }

    /// Restores what [`Self::save`] wrote (a checkpoint without it leaves
    /// the state as it is).
    pub fn load(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        if let [next_check, energy, steady] = load_series(group, SERIES)?[..] {
            self.next_check = next_check;
            self.energy = energy;
            self.steady = steady != 0.0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_when_the_energy_changes_less_than_the_tolerance_over_a_window() {
        let mut test = SteadyState::new(1e-4, 1.0);
        let mut asked = 0;
        for (time, energy) in [
            (0.5, 9.0),
            (1.0, 2.0),
            (1.5, 7.0),
            (2.0, 2.001),
            (3.0, 2.0011),
        ] {
            test.observe(time, || {
                asked += 1;
                Ok(energy)
            })
            .unwrap();
            if time < 3.0 {
                assert!(!test.is_steady(), "t = {time}");
            }
        }
        // Asked at t = 1, 2 and 3 only; 2.0011 vs 2.001 is within 1e-4 (2.001
        // vs 2.0 was not).
        assert_eq!(asked, 3);
        assert!(test.is_steady());
        assert!(test.stop_reason().unwrap().contains("<= 1e-4"));
    }
}
