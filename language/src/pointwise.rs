//! Every pointwise operation, declared once: its name, its CPU function and
//! its CUDA C spelling side by side, so the evaluator and the code generator
//! cannot disagree.

/// A function of one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-a`
    Negate,
    /// `e^a`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// hyperbolic tangent
    Tanh,
    /// absolute value
    Abs,
    /// logical not of a boolean (1.0 / 0.0)
    Not,
}

impl UnaryOp {
    /// Name in printed IR.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Negate => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Abs => "abs",
            UnaryOp::Not => "not",
        }
    }

    /// The CPU implementation.
    #[inline(always)]
    pub fn apply(self, a: f64) -> f64 {
        match self {
            UnaryOp::Negate => -a,
            UnaryOp::Exp => crate::vmath::exp(a),
            UnaryOp::Log => crate::vmath::log(a),
            UnaryOp::Sqrt => a.sqrt(),
            UnaryOp::Sin => crate::vmath::sin(a),
            UnaryOp::Cos => crate::vmath::cos(a),
            UnaryOp::Tanh => crate::vmath::tanh(a),
            UnaryOp::Abs => a.abs(),
            UnaryOp::Not => f64::from(a == 0.0),
        }
    }
}

/// A function of two values. Comparisons and logical operations yield 1.0
/// (true) or 0.0 (false).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Subtract,
    /// `a * b`
    Multiply,
    /// `a / b`
    Divide,
    /// `a^b`
    Pow,
    /// smaller of the two (`b` if either is NaN, as `f64::min` does not)
    Min,
    /// larger of the two
    Max,
    /// `a < b`
    Less,
    /// `a <= b`
    LessEqual,
    /// `a > b`
    Greater,
    /// `a >= b`
    GreaterEqual,
    /// `a == b`
    Equal,
    /// `a != b`
    NotEqual,
    /// both true
    And,
    /// either true
    Or,
}

impl BinaryOp {
    /// Name in printed IR.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Subtract => "-",
            BinaryOp::Multiply => "*",
            BinaryOp::Divide => "/",
            BinaryOp::Pow => "pow",
            BinaryOp::Min => "min",
            BinaryOp::Max => "max",
            BinaryOp::Less => "<",
            BinaryOp::LessEqual => "<=",
            BinaryOp::Greater => ">",
            BinaryOp::GreaterEqual => ">=",
            BinaryOp::Equal => "==",
            BinaryOp::NotEqual => "!=",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
        }
    }

    /// True for operations printed between their arguments.
    pub fn is_infix(self) -> bool {
        !matches!(self, BinaryOp::Pow | BinaryOp::Min | BinaryOp::Max)
    }

    /// True when the result is a boolean (1.0 / 0.0).
    pub fn is_boolean(self) -> bool {
        !matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Subtract
                | BinaryOp::Multiply
                | BinaryOp::Divide
                | BinaryOp::Pow
                | BinaryOp::Min
                | BinaryOp::Max
        )
    }

    /// The CPU implementation.
    #[inline(always)]
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Subtract => a - b,
            BinaryOp::Multiply => a * b,
            BinaryOp::Divide => a / b,
            BinaryOp::Pow => crate::vmath::pow(a, b),
            BinaryOp::Min => {
                if a < b {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Max => {
                if a > b {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Less => f64::from(a < b),
            BinaryOp::LessEqual => f64::from(a <= b),
            BinaryOp::Greater => f64::from(a > b),
            BinaryOp::GreaterEqual => f64::from(a >= b),
            BinaryOp::Equal => f64::from(a == b),
            BinaryOp::NotEqual => f64::from(a != b),
            BinaryOp::And => f64::from(a != 0.0 && b != 0.0),
            BinaryOp::Or => f64::from(a != 0.0 || b != 0.0),
        }
    }
}

/// Flux limiters for limited interpolation: `psi(r)` of the ratio of
/// consecutive gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limiter {
    /// `max(0, min(1, r))`: the most diffusive TVD limiter.
    Minmod,
    /// `(r + |r|) / (1 + |r|)`: smooth.
    VanLeer,
    /// `max(0, min(2r, 1), min(r, 2))`: the most compressive TVD limiter.
    Superbee,
}

impl Limiter {
    /// Name in printed IR.
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Minmod => "minmod",
            Limiter::VanLeer => "vanleer",
            Limiter::Superbee => "superbee",
        }
    }

    /// `psi(r)`.
    #[inline(always)]
    // `min`/`max` rather than `clamp`: clamp would turn a NaN ratio into a
    // NaN limiter value, changing results.
    #[allow(clippy::manual_clamp)]
    pub fn psi(self, r: f64) -> f64 {
        match self {
            Limiter::Minmod => r.min(1.0).max(0.0),
            Limiter::VanLeer => (r + r.abs()) / (1.0 + r.abs()),
            Limiter::Superbee => (2.0 * r).min(1.0).max(r.min(2.0)).max(0.0),
        }
    }

    /// The limited face value from the far-upwind, upwind and downwind
    /// cell values: `u + psi(r) (d - u) / 2` with `r = (u - uu) / (d - u)`
    /// (and the upwind value where `d == u`).
    #[inline(always)]
    pub fn face_value(self, far_upwind: f64, upwind: f64, downwind: f64) -> f64 {
        let jump = downwind - upwind;
        if jump == 0.0 {
            return upwind;
        }
        let r = (upwind - far_upwind) / jump;
        upwind + 0.5 * self.psi(r) * jump
    }
}
