//! Scalar parameters: named values that expressions read as IR leaves and
//! that can change between evaluations without rebuilding anything (time,
//! `dt`, the stage coefficients of a Runge-Kutta scheme, a viscosity, an
//! inflow amplitude).
//!
//! A [`Parameter`] is a shared handle: clones see the same value. Its value
//! is read once when an assignment or reduction starts, so every point of
//! one evaluation sees the same number even if another thread sets it
//! meanwhile. A kernel (`lower_cached` of `watershed-lowering`) reads the
//! parameter's slot, never its value, so one kernel serves every value.
//! Lowering keeps parameters symbolic where they scale linear forms: in
//! `phi + dt * rhs` the weights become values such as `1 - 6 c dt` that
//! every back end forms once per call, before its loops
//! (`watershed_lowering::kernel::Weight::Uniform`), so such a parameter
//! costs nothing per point; a nonlinear operation that reads one gets it
//! as a row filled once per block.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared state of a parameter.
pub struct ParameterCell {
    id: u64,
    name: Arc<str>,
    bits: AtomicU64,
}

impl ParameterCell {
    /// The current value.
    pub fn value(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Acquire))
    }

    /// The parameter's unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its name, for messages and printed IR.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl PartialEq for ParameterCell {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl fmt::Debug for ParameterCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.name, self.value())
    }
}

/// A named scalar read by expressions. The tree holds the parameter, not
/// its value: an assignment (`watershed_operators`) reads the value when
/// it starts, so setting it changes the next evaluation without building
/// or lowering anything again.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_language::{Parameter, field};
/// let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let u = SpatialField::<CellCentre>::new("u", &patch, Device::Cpu)?;
/// let dt = Parameter::new("dt", 0.5);
/// let rhs = field(&u) + dt.expr() * 2.0;
/// let before = rhs.node().structural_hash();
/// let shared = dt.clone();
/// shared.set(2.0); // clones share the value
/// assert_eq!(dt.get(), 2.0);
/// // The tree is unchanged: it reads the parameter's slot.
/// assert_eq!(rhs.node().structural_hash(), before);
/// assert!(rhs.node().to_string().contains("dt"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct Parameter {
    cell: Arc<ParameterCell>,
}

impl fmt::Debug for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Parameter({:?})", self.cell)
    }
}

impl Parameter {
    /// A new parameter named `name` holding `value`.
    pub fn new(name: &str, value: f64) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Parameter {
            cell: Arc::new(ParameterCell {
                id: NEXT.fetch_add(1, Ordering::Relaxed),
                name: name.into(),
                bits: AtomicU64::new(value.to_bits()),
            }),
        }
    }

    /// Sets the value every later evaluation reads.
    pub fn set(&self, value: f64) {
        self.cell.bits.store(value.to_bits(), Ordering::Release);
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        self.cell.value()
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.cell.name()
    }

    /// The unique id that IR leaves of this parameter carry.
    pub fn id(&self) -> u64 {
        self.cell.id()
    }

    /// The shared cell (what IR leaves hold).
    pub fn cell(&self) -> &Arc<ParameterCell> {
        &self.cell
    }
}
