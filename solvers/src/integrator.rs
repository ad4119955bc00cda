//! Explicit time integrators in Shu-Osher form.
//!
//! Every stage is `u(s) = a u(n) + b (u(s-1) + dt L(u(s-1)))`, so one update
//! expression per equation, reading the stage's `a`, `b` and `dt`, serves
//! all three schemes. Forward Euler is first order; the strong-stability-
//! preserving Runge-Kutta schemes SSP-RK2 and SSP-RK3 (Shu and Osher 1988)
//! are second and third order and keep the TVD property of a spatial
//! operator that has it under forward Euler.

/// One stage: `u = a u(n) + b (u + dt L(u))`, evaluated at `time + c dt`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// Weight of the solution at the start of the step.
    pub a: f64,
    /// Weight of the forward-Euler update of the previous stage.
    pub b: f64,
    /// Fraction of the step at which the right-hand side is evaluated.
    pub c: f64,
}

/// An explicit scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeIntegrator {
    /// Forward Euler, first order.
    ForwardEuler,
    /// SSP-RK2 (Heun), second order.
    SspRk2,
    /// SSP-RK3, third order.
    #[default]
    SspRk3,
}

impl TimeIntegrator {
    /// The stages of one step.
    ///
    /// ```
    /// use watershed_solvers::TimeIntegrator;
    /// assert_eq!(TimeIntegrator::SspRk3.stages().len(), 3);
    /// ```
    pub fn stages(self) -> &'static [Stage] {
        match self {
            TimeIntegrator::ForwardEuler => &[Stage {
                a: 0.0,
                b: 1.0,
                c: 0.0,
            }],
            TimeIntegrator::SspRk2 => &[
                Stage {
                    a: 0.0,
                    b: 1.0,
                    c: 0.0,
                },
                Stage {
                    a: 0.5,
                    b: 0.5,
                    c: 1.0,
                },
            ],
            TimeIntegrator::SspRk3 => &[
                Stage {
                    a: 0.0,
                    b: 1.0,
                    c: 0.0,
                },
                Stage {
                    a: 0.75,
                    b: 0.25,
                    c: 1.0,
                },
                Stage {
                    a: 1.0 / 3.0,
                    b: 2.0 / 3.0,
                    c: 0.5,
                },
            ],
        }
    }

    /// Formal order of accuracy.
    pub fn order(self) -> usize {
        self.stages().len()
    }

    /// Whether a stage after the first reads the step's start value
    /// (`a != 0`); forward Euler's single stage never does.
    pub fn reads_start(self) -> bool {
        self.stages().iter().skip(1).any(|stage| stage.a != 0.0)
    }
}
