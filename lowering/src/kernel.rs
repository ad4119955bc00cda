//! The row program ([`Kernel`]) an IR tree is lowered to (by
//! [`crate::lower`]), the fused form
//! the CPU executor runs over rows of the fastest (x) index.
//!
//! Lowering keeps linear algebra symbolic: sums, differences, scaling and the
//! linear stencils (gradient, divergence, interpolants, Laplacian) combine
//! into *linear forms* `c + sum_t w_t * source_t[i + shift_t]` whose sources
//! are field rows (read in place, at any offset) or registers. Only nonlinear
//! operations (products, functions, comparisons, selections, limiters)
//! become instructions, each writing one register: a row buffer that stays in
//! L1. Small linear forms (one or two terms) are evaluated inline by the
//! instruction that consumes them. Weights are pulled out of products
//! (`(wa A)(wb B) = wa wb (A B)`), and a product whose only readers are linear
//! combinations is evaluated inline by each of them (at the reader's shift),
//! as a hand-written loop computes a face flux on the fly for each cell. So
//! `div(interp(gamma) * grad(phi))` in 3D is one instruction: the sum of six
//! products `(gamma_a + gamma_b) * (phi_a - phi_b)` written to the target.
//!
//! A weight or constant is a number or a *uniform value* ([`Weight`]): a
//! parameter, or sums, products and quotients of parameters and numbers,
//! listed in [`Kernel::uniforms`] and formed once per call by every back
//! end. So a run-time `dt` scales a form as a literal would:
//! `phi + dt (c sum - 6c phi)` is one form with weights `1 - 6c dt` and
//! `c dt`, not a product and an addition per point.
//!
//! A stencil offset along y or z re-lowers its argument for that neighbouring
//! row (memoised, so each row's flux is computed once); an offset along x
//! shifts the argument's sources. After lowering, a backward pass computes how
//! far beyond the tile each register must be evaluated, and from that the
//! exact box of offsets at which each field is read, which the evaluator
//! checks against the fields' ghost layers.

use crate::mask::PointSet;
use crate::parameter::ParameterCell;
use crate::pointwise::{BinaryOp, Limiter, UnaryOp};
use crate::stencil::{StencilOp, axis_name};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use watershed_fields::LocationKind;

/// Largest offset of a [`shift`](watershed_language::shift) along any axis (a periodic image
/// is a whole domain away; no field is this large along one axis).
pub const MAX_SHIFT: isize = 1 << 24;

/// A register number. [`OUTPUT`] is the target row.
pub type Register = u16;

/// The register that stands for the target's row.
pub const OUTPUT: Register = Register::MAX;

/// Where values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Field `slot` read at `offset` from the point being computed.
    Field {
        /// Index into the kernel's field list.
        slot: u16,
        /// Offset (x, y, z).
        offset: [isize; 3],
    },
    /// A register, read `shift` points along x from the point.
    Register {
        /// The register.
        register: Register,
        /// Shift along x.
        shift: isize,
    },
}

impl Source {
    pub(crate) fn renamed(self, rename: &impl Fn(Register) -> Register) -> Source {
        match self {
            Source::Register { register, shift } => Source::Register {
                register: rename(register),
                shift,
            },
            field => field,
        }
    }

    pub(crate) fn shifted_x(self, by: isize) -> Source {
        match self {
            Source::Field { slot, mut offset } => {
                offset[0] += by;
                Source::Field { slot, offset }
            }
            Source::Register { register, shift } => Source::Register {
                register,
                shift: shift + by,
            },
        }
    }
}

/// A weight or the constant of a [`LinearForm`]: a number, or a value that
/// is the same at every point of one evaluation but known only when it
/// starts (a parameter such as `dt`, or an expression of parameters and
/// numbers), which every back end computes once per call from the
/// kernel's [`uniforms`](Kernel::uniforms) before its loops.
///
/// Keeping such values symbolic lets lowering distribute a run-time scalar
/// over a linear form as it distributes a number: `phi + dt (a sum - b phi)`
/// becomes `(1 - b dt) phi + (a dt) sum`, two weights formed once per call,
/// instead of a product and an addition per point.
#[derive(Debug, Clone, Copy)]
pub enum Weight {
    /// A number known when the kernel is lowered.
    Number(f64),
    /// Entry `k` of the kernel's [`uniforms`](Kernel::uniforms).
    Uniform(u16),
}

impl Weight {
    /// The number, when the weight is one.
    pub fn number(self) -> Option<f64> {
        match self {
            Weight::Number(value) => Some(value),
            Weight::Uniform(_) => None,
        }
    }

    /// Whether the weight is the number `value` (`0.0 == -0.0`).
    pub fn is(self, value: f64) -> bool {
        self.number() == Some(value)
    }

    /// Whether two weights are the same value in every evaluation: numbers
    /// with the same bits, or the same uniform entry.
    pub fn same(self, other: Weight) -> bool {
        match (self, other) {
            (Weight::Number(a), Weight::Number(b)) => a.to_bits() == b.to_bits(),
            (Weight::Uniform(a), Weight::Uniform(b)) => a == b,
            _ => false,
        }
    }

    /// The weight's value given the values of the kernel's uniforms
    /// ([`Kernel::uniform_values`]).
    pub fn value(self, uniforms: &[f64]) -> f64 {
        match self {
            Weight::Number(value) => value,
            Weight::Uniform(k) => uniforms.get(k as usize).copied().unwrap_or(f64::NAN),
        }
    }
}

impl PartialEq for Weight {
    fn eq(&self, other: &Weight) -> bool {
        self.same(*other)
    }
}

impl PartialEq<f64> for Weight {
    fn eq(&self, other: &f64) -> bool {
        self.is(*other)
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Weight::Number(value) => write!(f, "{value:?}"),
            Weight::Uniform(k) => write!(f, "u{k}"),
        }
    }
}

/// How a kernel's uniform value `k` is computed, once per call, from the
/// parameters and the uniforms before it (one IEEE operation each, so
/// that every back end gives the same bits).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UniformValue {
    /// The value of parameter `slot`.
    Parameter(u16),
    /// `a + b`.
    Sum(Weight, Weight),
    /// `a * b`.
    Product(Weight, Weight),
    /// `a / b`.
    Quotient(Weight, Weight),
}

/// The uniform values of a kernel under construction: each distinct
/// computation once, numbers folded as lowering always folded them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Uniforms {
    pub(crate) values: Vec<UniformValue>,
}

impl Uniforms {
    fn intern(&mut self, value: UniformValue) -> Weight {
        let k = match self.values.iter().position(|v| *v == value) {
            Some(k) => k,
            None => {
                self.values.push(value);
                self.values.len() - 1
            }
        };
        Weight::Uniform(k as u16)
    }

    /// Parameter `slot`'s value.
    pub(crate) fn parameter(&mut self, slot: u16) -> Weight {
        self.intern(UniformValue::Parameter(slot))
    }

    /// `a * b`; numbers multiply, and a factor of exactly 1 leaves the
    /// other as it is (`1 * v` is `v` for every `v`).
    pub(crate) fn product(&mut self, a: Weight, b: Weight) -> Weight {
        match (a, b) {
            (Weight::Number(x), Weight::Number(y)) => Weight::Number(x * y),
            (Weight::Number(one), other) | (other, Weight::Number(one)) if one == 1.0 => other,
            _ => self.intern(UniformValue::Product(a, b)),
        }
    }

    /// `a + b`; numbers add.
    pub(crate) fn sum(&mut self, a: Weight, b: Weight) -> Weight {
        match (a, b) {
            (Weight::Number(x), Weight::Number(y)) => Weight::Number(x + y),
            _ => self.intern(UniformValue::Sum(a, b)),
        }
    }

    /// `a / b`; numbers divide.
    pub(crate) fn quotient(&mut self, a: Weight, b: Weight) -> Weight {
        match (a, b) {
            (Weight::Number(x), Weight::Number(y)) => Weight::Number(x / y),
            _ => self.intern(UniformValue::Quotient(a, b)),
        }
    }
}

/// `constant + sum weight * source`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearForm {
    /// The constant part.
    pub constant: Weight,
    /// The terms, in evaluation order.
    pub terms: SmallVec<[(Source, Weight); 4]>,
}

impl LinearForm {
    pub(crate) fn constant(value: Weight) -> Self {
        LinearForm {
            constant: value,
            terms: SmallVec::new(),
        }
    }

    pub(crate) fn number(value: f64) -> Self {
        Self::constant(Weight::Number(value))
    }

    pub(crate) fn source(source: Source) -> Self {
        LinearForm {
            constant: Weight::Number(0.0),
            terms: SmallVec::from_iter([(source, Weight::Number(1.0))]),
        }
    }

    pub(crate) fn as_constant(&self) -> Option<Weight> {
        self.terms.is_empty().then_some(self.constant)
    }

    /// Whether the form has no constant part (a constant of either zero).
    pub fn has_no_constant(&self) -> bool {
        self.constant.is(0.0)
    }

    pub(crate) fn scaled(mut self, by: Weight, uniforms: &mut Uniforms) -> Self {
        // A zero constant is no term at all: `v / 0` is `inf * v`, not
        // `0 * inf + inf * v` (which would be NaN for every v).
        if !self.has_no_constant() {
            self.constant = uniforms.product(self.constant, by);
        }
        for term in &mut self.terms {
            term.1 = uniforms.product(term.1, by);
        }
        self
    }

    pub(crate) fn shifted_x(mut self, by: isize) -> Self {
        for term in &mut self.terms {
            term.0 = term.0.shifted_x(by);
        }
        self
    }

    /// `self + by * other`, merging terms that read the same source.
    pub(crate) fn add_scaled(
        mut self,
        other: &LinearForm,
        by: Weight,
        uniforms: &mut Uniforms,
    ) -> Self {
        if !other.has_no_constant() {
            let scaled = uniforms.product(by, other.constant);
            self.constant = if self.has_no_constant() && scaled.number().is_none() {
                scaled
            } else {
                uniforms.sum(self.constant, scaled)
            };
        }
        for &(source, weight) in &other.terms {
            let scaled = uniforms.product(by, weight);
            match self.terms.iter_mut().find(|(s, _)| *s == source) {
                Some(term) => term.1 = uniforms.sum(term.1, scaled),
                None => self.terms.push((source, scaled)),
            }
        }
        // Terms whose weights cancel stay, with weight 0: evaluation then
        // computes 0 * value, which is NaN where the value is not finite,
        // exactly as the unsimplified expression would (`phi - phi` with
        // phi = inf is NaN, never 0).
        self
    }
}

/// The most sources one [`WeightGroup`] sums as one tree; a longer run of
/// equal weights becomes several groups.
pub const MAX_GROUP_SOURCES: usize = 8;

/// Sources of a [`LinearForm`] that share one weight: evaluated as
/// `weight * pairwise_sum(sources)`, one multiplication for the group.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightGroup {
    /// The shared weight.
    pub weight: Weight,
    /// The sources, in the form's term order (one to [`MAX_GROUP_SOURCES`]).
    pub sources: SmallVec<[Source; MAX_GROUP_SOURCES]>,
}

impl LinearForm {
    /// Whether every back end evaluates this form as differences,
    /// `sum_p w_p (b_p - a_p)` over consecutive term pairs `(a, -w), (b, w)`
    /// (a divergence of fluxes): no constant, an even number of terms, each
    /// pair's weights opposite.
    pub fn is_differences(&self) -> bool {
        self.has_no_constant()
            && self.terms.len() >= 2
            && self.terms.len().is_multiple_of(2)
            && self.terms.chunks(2).all(|p| match (p[0].1, p[1].1) {
                (Weight::Number(a), Weight::Number(b)) => a == -b,
                _ => false,
            })
    }

    /// Whether two terms have the same weight ([`Weight::same`]): then
    /// [`groups`](Self::groups) has fewer groups than the form has terms.
    /// Allocation-free, for evaluators that decide per call.
    pub fn shares_weights(&self) -> bool {
        let terms = &self.terms;
        (1..terms.len()).any(|i| terms[..i].iter().any(|t| t.1.same(terms[i].1)))
    }

    /// The form's terms grouped by weight, in the order every back end
    /// evaluates a form that is not [`differences`](Self::is_differences):
    /// `constant + w_1 * T_1 + w_2 * T_2 + ...`, added left to right (a
    /// zero constant is left out: the sum starts at `w_1 * T_1`), where
    /// group `g` holds the terms whose weight is the same as `w_g`,
    /// groups ordered by their first term, and `T_g` is the
    /// [`pairwise_sum`] of the group's sources in term order. A run longer
    /// than [`MAX_GROUP_SOURCES`] is split into consecutive groups of that
    /// size. Summing first and multiplying once is what a hand-written
    /// stencil does (`c * u + w * (u_w + u_e + u_s + u_n)`): fewer
    /// multiplications and a shorter dependency chain than
    /// `c + w_1 s_1 + w_2 s_2 + ...` term by term. Where no two weights are
    /// equal every group is one term and the two orders are the same.
    pub fn groups(&self) -> SmallVec<[WeightGroup; 4]> {
        let mut groups: SmallVec<[WeightGroup; 4]> = SmallVec::new();
        let mut open: SmallVec<[(Weight, usize); 4]> = SmallVec::new();
        for &(source, weight) in &self.terms {
            match open.iter_mut().find(|(w, _)| w.same(weight)) {
                Some((_, at)) if groups[*at].sources.len() < MAX_GROUP_SOURCES => {
                    groups[*at].sources.push(source);
                }
                found => {
                    let at = groups.len();
                    groups.push(WeightGroup {
                        weight,
                        sources: SmallVec::from_iter([source]),
                    });
                    match found {
                        Some(entry) => entry.1 = at,
                        None => open.push((weight, at)),
                    }
                }
            }
        }
        groups
    }
}

/// The sum of `items` in the order every back end adds a [`WeightGroup`]'s
/// sources: neighbours in pairs, level by level, an odd last item carried
/// to the next level (`((a + b) + (c + d)) + e` for five). `None` when
/// `items` is empty.
pub fn pairwise_sum<T>(items: impl IntoIterator<Item = T>, add: impl Fn(T, T) -> T) -> Option<T> {
    let mut level: SmallVec<[T; MAX_GROUP_SOURCES]> = items.into_iter().collect();
    while level.len() > 1 {
        let mut next: SmallVec<[T; MAX_GROUP_SOURCES]> = SmallVec::new();
        let mut items = level.into_iter();
        while let Some(a) = items.next() {
            match items.next() {
                Some(b) => next.push(add(a, b)),
                None => next.push(a),
            }
        }
        level = next;
    }
    level.into_iter().next()
}

/// The weight's number when it can be divided out of a product and
/// multiplied back in without changing non-finite results (a number, not
/// 0, not infinite, not NaN).
pub(crate) fn usable_weight(weight: Weight) -> Option<f64> {
    weight
        .number()
        .filter(|weight| *weight != 0.0 && weight.is_finite())
}

/// An instruction operand: a constant or a linear form of one or two terms,
/// evaluated inline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operand {
    /// The same value everywhere.
    Constant(f64),
    /// `w * s[i]`.
    One(Source, f64),
    /// `w0 * s0[i] + w1 * s1[i]`.
    Two(Source, f64, Source, f64),
}

/// True for the operand shapes fused products are specialised for: `a`,
/// `a + b`, `a - b` (the shapes weight factoring produces).
pub fn fusable_factor(operand: &Operand) -> bool {
    matches!(operand, Operand::One(_, w) if *w == 1.0)
        || matches!(operand, Operand::Two(_, w0, _, w1) if *w0 == 1.0 && w1.abs() == 1.0)
}

impl Operand {
    pub(crate) fn renamed(self, rename: &impl Fn(Register) -> Register) -> Operand {
        match self {
            Operand::Constant(c) => Operand::Constant(c),
            Operand::One(s, w) => Operand::One(s.renamed(rename), w),
            Operand::Two(s0, w0, s1, w1) => {
                Operand::Two(s0.renamed(rename), w0, s1.renamed(rename), w1)
            }
        }
    }

    pub(crate) fn shifted_x(self, by: isize) -> Operand {
        match self {
            Operand::Constant(c) => Operand::Constant(c),
            Operand::One(s, w) => Operand::One(s.shifted_x(by), w),
            Operand::Two(s0, w0, s1, w1) => {
                Operand::Two(s0.shifted_x(by), w0, s1.shifted_x(by), w1)
            }
        }
    }

    /// The sources this operand reads (none for a constant).
    pub fn sources(&self) -> SmallVec<[Source; 2]> {
        match *self {
            Operand::Constant(_) => SmallVec::new(),
            Operand::One(s, _) => SmallVec::from_iter([s]),
            Operand::Two(s0, _, s1, _) => SmallVec::from_iter([s0, s1]),
        }
    }
}

/// One step of a row program. Each writes register `out` over its range.
#[derive(Debug, Clone, PartialEq)]
pub enum Instruction {
    /// `out = form + sum_k w_k * left_k * right_k`: a linear combination in
    /// which products read only here are evaluated inline (fused), saving
    /// their store and reload.
    Linear {
        /// Destination.
        out: Register,
        /// The linear form.
        form: LinearForm,
        /// Fused products `(w, left, right)`.
        products: Vec<(Weight, Operand, Operand)>,
    },
    /// `out = op(arg)`.
    Unary {
        /// The function.
        op: UnaryOp,
        /// Destination.
        out: Register,
        /// Argument.
        arg: Operand,
    },
    /// `out = op(left, right)`.
    Binary {
        /// The function.
        op: BinaryOp,
        /// Destination.
        out: Register,
        /// First argument.
        left: Operand,
        /// Second argument.
        right: Operand,
    },
    /// `out = condition != 0 ? if_true : if_false`.
    Select {
        /// Destination.
        out: Register,
        /// The condition.
        condition: Operand,
        /// Value where it holds.
        if_true: Operand,
        /// Value elsewhere.
        if_false: Operand,
    },
    /// `out = coordinate` of the points of `location`, on the row `row_offset`
    /// (y, z) away from the one being computed.
    Coordinate {
        /// Destination.
        out: Register,
        /// 0, 1, 2.
        axis: usize,
        /// Location of the points.
        location: LocationKind,
        /// (dy, dz) of the row.
        row_offset: [isize; 2],
    },
    /// `out = 1.0` on the points of `set`, else 0.0.
    Mask {
        /// Destination.
        out: Register,
        /// The points.
        set: Arc<PointSet>,
        /// Location of the points.
        location: LocationKind,
        /// (dy, dz) of the row.
        row_offset: [isize; 2],
    },
    /// `out =` uniform value `uniform` ([`Kernel::uniforms`]) at every
    /// point: a parameter, or an expression of parameters, that a
    /// nonlinear operation reads.
    Uniform {
        /// Destination.
        out: Register,
        /// Index into the kernel's uniforms.
        uniform: u16,
    },
    /// `out =` restriction or prolongation ([`StencilOp::Restrict`],
    /// [`StencilOp::Prolongate`]) of field `slot`, which lives on another
    /// grid, on the row `row_offset` (y, z) away from the one computed.
    Transfer {
        /// Destination.
        out: Register,
        /// The inter-grid operator.
        op: StencilOp,
        /// Index into the kernel's field list.
        slot: u16,
        /// (dy, dz) of the row.
        row_offset: [isize; 2],
    },
    /// Flux-limited face value from `cells` at offsets -2, -1, 0, +1 along
    /// the face normal, upwinded by `velocity`.
    Limited {
        /// Destination.
        out: Register,
        /// The limiter.
        limiter: Limiter,
        /// Face velocity.
        velocity: Operand,
        /// Cell values at offsets -2, -1, 0, +1 along the normal.
        cells: [Operand; 4],
    },
}

impl Instruction {
    /// The register written.
    pub fn out(&self) -> Register {
        match self {
            Instruction::Linear { out, .. }
            | Instruction::Unary { out, .. }
            | Instruction::Binary { out, .. }
            | Instruction::Select { out, .. }
            | Instruction::Coordinate { out, .. }
            | Instruction::Mask { out, .. }
            | Instruction::Uniform { out, .. }
            | Instruction::Transfer { out, .. }
            | Instruction::Limited { out, .. } => *out,
        }
    }

    pub(crate) fn out_mut(&mut self) -> &mut Register {
        match self {
            Instruction::Linear { out, .. }
            | Instruction::Unary { out, .. }
            | Instruction::Binary { out, .. }
            | Instruction::Select { out, .. }
            | Instruction::Coordinate { out, .. }
            | Instruction::Mask { out, .. }
            | Instruction::Uniform { out, .. }
            | Instruction::Transfer { out, .. }
            | Instruction::Limited { out, .. } => out,
        }
    }

    /// Every source read.
    pub fn sources(&self) -> SmallVec<[Source; 8]> {
        let mut all = SmallVec::new();
        match self {
            Instruction::Linear { form, products, .. } => {
                all.extend(form.terms.iter().map(|(s, _)| *s));
                for (_, left, right) in products {
                    all.extend(left.sources());
                    all.extend(right.sources());
                }
            }
            Instruction::Unary { arg, .. } => all.extend(arg.sources()),
            Instruction::Binary { left, right, .. } => {
                all.extend(left.sources());
                all.extend(right.sources());
            }
            Instruction::Select {
                condition,
                if_true,
                if_false,
                ..
            } => {
                for o in [condition, if_true, if_false] {
                    all.extend(o.sources());
                }
            }
            Instruction::Coordinate { .. }
            | Instruction::Mask { .. }
            | Instruction::Uniform { .. }
            | Instruction::Transfer { .. } => {}
            Instruction::Limited {
                velocity, cells, ..
            } => {
                all.extend(velocity.sources());
                for c in cells {
                    all.extend(c.sources());
                }
            }
        }
        all
    }
}

/// The box of offsets at which a field is read, relative to the region
/// being computed: points `[lo + min, hi + max)` along each axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadExtent {
    /// Lowest offset per axis.
    pub min: [isize; 3],
    /// Highest offset per axis.
    pub max: [isize; 3],
}

/// A field a kernel reads.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelField {
    /// [`watershed_fields::SpatialField::id`].
    pub id: u64,
    /// Name, for messages.
    pub name: Arc<str>,
    /// Location.
    pub location: LocationKind,
    /// Where it is read, relative to the computed region (for a field read
    /// through `transfer`: where the transfer's result is needed).
    pub extent: ReadExtent,
    /// The inter-grid operator through which the field is read, when it
    /// lives on another grid ([`StencilOp::transfer_reads`] maps the
    /// extent to its indices).
    pub transfer: Option<StencilOp>,
}

/// A fused row program for one expression on one patch.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Instructions in execution order.
    pub instructions: Vec<Instruction>,
    /// Per register: how far beyond the tile (lo, hi along x) it is computed.
    pub extensions: Vec<(isize, isize)>,
    /// Number of registers.
    pub registers: usize,
    /// Largest extension beyond the tile.
    pub halo: isize,
    /// The fields read, by slot.
    pub fields: Vec<KernelField>,
    /// The parameters read, by slot (those of the tree it was lowered from;
    /// [`lower_cached`](crate::lower_cached) maps them to another tree's).
    pub parameters: Vec<Arc<ParameterCell>>,
    /// The values that are the same at every point of a call (the weights
    /// [`Weight::Uniform`] names), in the order they are computed: each
    /// reads parameters and the entries before it.
    pub uniforms: Vec<UniformValue>,
    /// Location of the result (`None`: a constant).
    pub location: Option<LocationKind>,
    /// Register holding the result when the kernel does not write the
    /// target directly (reductions).
    pub result: Register,
    /// This kernel's identity in the process, from
    /// [`Kernel::next_identity`]: never given to another kernel, so the
    /// back ends key the forms they compile from it by it (lowering knows
    /// nothing of them). Code that builds a kernel by hand, or changes one
    /// after lowering, gives it a new identity.
    pub identity: u64,
}

impl Kernel {
    /// A process-wide identity no kernel had before (see
    /// [`Kernel::identity`]).
    pub fn next_identity() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The values of [`uniforms`](Self::uniforms) for the parameter
    /// values `parameters` (by slot; a missing one reads as NaN): what
    /// every back end computes once per call, one IEEE operation each.
    pub fn uniform_values(&self, parameters: &[f64]) -> SmallVec<[f64; 8]> {
        let mut values: SmallVec<[f64; 8]> = SmallVec::with_capacity(self.uniforms.len());
        for uniform in &self.uniforms {
            let value = match *uniform {
                UniformValue::Parameter(slot) => {
                    parameters.get(slot as usize).copied().unwrap_or(f64::NAN)
                }
                UniformValue::Sum(a, b) => a.value(&values) + b.value(&values),
                UniformValue::Product(a, b) => a.value(&values) * b.value(&values),
                UniformValue::Quotient(a, b) => a.value(&values) / b.value(&values),
            };
            values.push(value);
        }
        values
    }

    /// Number of instructions run per row.
    pub fn len(&self) -> usize {
        self.instructions.len()
    }

    /// True for a kernel without instructions (never produced by `compile`).
    pub fn is_empty(&self) -> bool {
        self.instructions.is_empty()
    }
}

fn describe_source(source: &Source, kernel: &Kernel) -> String {
    match source {
        Source::Field { slot, offset } => {
            let name = &kernel.fields[*slot as usize].name;
            if *offset == [0; 3] {
                name.to_string()
            } else {
                format!("{name}{offset:?}")
            }
        }
        Source::Register { register, shift } => {
            let r = if *register == OUTPUT {
                "out".to_string()
            } else {
                format!("r{register}")
            };
            if *shift == 0 {
                r
            } else {
                format!("{r}[{shift:+}]")
            }
        }
    }
}

fn describe_operand(operand: &Operand, kernel: &Kernel) -> String {
    match operand {
        Operand::Constant(c) => format!("{c:?}"),
        Operand::One(s, w) if *w == 1.0 => describe_source(s, kernel),
        Operand::One(s, w) => format!("{w:?}*{}", describe_source(s, kernel)),
        Operand::Two(s0, w0, s1, w1) => format!(
            "({w0:?}*{} + {w1:?}*{})",
            describe_source(s0, kernel),
            describe_source(s1, kernel)
        ),
    }
}

impl fmt::Display for Kernel {
    /// One line per instruction, e.g. `r0 = mul((0.5*gamma[-1, 0, 0] + 0.5*gamma), ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |r: Register| {
            if r == OUTPUT {
                "out".to_string()
            } else {
                format!("r{r}")
            }
        };
        for (k, uniform) in self.uniforms.iter().enumerate() {
            match uniform {
                UniformValue::Parameter(slot) => writeln!(
                    f,
                    "u{k} = parameter {}",
                    self.parameters
                        .get(*slot as usize)
                        .map_or("?", |p| p.name())
                )?,
                UniformValue::Sum(a, b) => writeln!(f, "u{k} = {a} + {b}")?,
                UniformValue::Product(a, b) => writeln!(f, "u{k} = {a} * {b}")?,
                UniformValue::Quotient(a, b) => writeln!(f, "u{k} = {a} / {b}")?,
            }
        }
        for instruction in &self.instructions {
            let out = name(instruction.out());
            match instruction {
                Instruction::Linear { form, products, .. } => {
                    let mut parts: Vec<String> = form
                        .terms
                        .iter()
                        .map(|(s, w)| format!("{w}*{}", describe_source(s, self)))
                        .collect();
                    parts.extend(products.iter().map(|(w, l, r)| {
                        format!(
                            "{w}*{}*{}",
                            describe_operand(l, self),
                            describe_operand(r, self)
                        )
                    }));
                    if !form.has_no_constant() || parts.is_empty() {
                        parts.push(form.constant.to_string());
                    }
                    writeln!(f, "{out} = {}", parts.join(" + "))?;
                }
                Instruction::Unary { op, arg, .. } => {
                    writeln!(f, "{out} = {}({})", op.name(), describe_operand(arg, self))?
                }
                Instruction::Binary {
                    op, left, right, ..
                } => writeln!(
                    f,
                    "{out} = {}({}, {})",
                    op.name(),
                    describe_operand(left, self),
                    describe_operand(right, self)
                )?,
                Instruction::Select {
                    condition,
                    if_true,
                    if_false,
                    ..
                } => writeln!(
                    f,
                    "{out} = select({}, {}, {})",
                    describe_operand(condition, self),
                    describe_operand(if_true, self),
                    describe_operand(if_false, self)
                )?,
                Instruction::Coordinate {
                    axis,
                    location,
                    row_offset,
                    ..
                } => writeln!(
                    f,
                    "{out} = coordinate {} of {location} (row {row_offset:?})",
                    axis_name(*axis)
                )?,
                Instruction::Mask {
                    set,
                    location,
                    row_offset,
                    ..
                } => writeln!(
                    f,
                    "{out} = mask {} of {location} (row {row_offset:?})",
                    set.describe()
                )?,
                Instruction::Uniform { uniform, .. } => writeln!(f, "{out} = u{uniform}")?,
                Instruction::Transfer {
                    op,
                    slot,
                    row_offset,
                    ..
                } => writeln!(
                    f,
                    "{out} = {}({}) (row {row_offset:?})",
                    op.name(),
                    self.fields.get(*slot as usize).map_or("?", |k| &*k.name)
                )?,
                Instruction::Limited {
                    limiter,
                    velocity,
                    cells,
                    ..
                } => writeln!(
                    f,
                    "{out} = {}(v={}, cells=[{}])",
                    limiter.name(),
                    describe_operand(velocity, self),
                    cells
                        .iter()
                        .map(|c| describe_operand(c, self))
                        .collect::<Vec<_>>()
                        .join(", ")
                )?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(slot: u16, x: isize) -> Source {
        Source::Field {
            slot,
            offset: [x, 0, 0],
        }
    }

    fn form(constant: f64, terms: &[(Source, f64)]) -> LinearForm {
        LinearForm {
            constant: Weight::Number(constant),
            terms: terms.iter().map(|&(s, w)| (s, Weight::Number(w))).collect(),
        }
    }

    #[test]
    fn equal_weights_group_in_order_of_first_appearance() {
        // 7-point-like: centre weight, then neighbours sharing one weight,
        // with a third weight in between.
        let f = form(
            0.5,
            &[
                (at(0, 0), -6.0),
                (at(0, -1), 2.0),
                (at(1, 0), 3.0),
                (at(0, 1), 2.0),
                (at(1, 1), 3.0),
                (at(0, 2), 2.0),
            ],
        );
        let groups = f.groups();
        let summary: Vec<(Weight, Vec<Source>)> = groups
            .iter()
            .map(|g| (g.weight, g.sources.to_vec()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Weight::Number(-6.0), vec![at(0, 0)]),
                (Weight::Number(2.0), vec![at(0, -1), at(0, 1), at(0, 2)]),
                (Weight::Number(3.0), vec![at(1, 0), at(1, 1)]),
            ]
        );
        assert!(!f.is_differences());
        assert!(f.shares_weights());
        let distinct = form(0.0, &[(at(0, 0), 1.0), (at(0, 1), -1.0), (at(0, 2), 0.5)]);
        assert!(!distinct.shares_weights());
        assert_eq!(distinct.groups().len(), 3);
    }

    #[test]
    fn zero_weights_of_either_sign_stay_apart_and_long_runs_split() {
        let f = form(0.0, &[(at(0, 0), 0.0), (at(0, 1), -0.0), (at(0, 2), 0.0)]);
        let weights: Vec<(Option<u64>, usize)> = f
            .groups()
            .iter()
            .map(|g| (g.weight.number().map(f64::to_bits), g.sources.len()))
            .collect();
        assert_eq!(
            weights,
            vec![(Some(0.0f64.to_bits()), 2), (Some((-0.0f64).to_bits()), 1)]
        );

        let many: Vec<(Source, f64)> = (0..19).map(|x| (at(0, x), 0.25)).collect();
        let sizes: Vec<usize> = form(1.0, &many)
            .groups()
            .iter()
            .map(|g| g.sources.len())
            .collect();
        assert_eq!(sizes, vec![MAX_GROUP_SOURCES, MAX_GROUP_SOURCES, 3]);
    }

    #[test]
    fn differences_are_opposite_pairs_without_a_constant() {
        let pairs = [
            (at(0, 0), -0.5),
            (at(0, 1), 0.5),
            (at(1, 0), -2.0),
            (at(1, 1), 2.0),
        ];
        assert!(form(0.0, &pairs).is_differences());
        assert!(!form(1.0, &pairs).is_differences());
        assert!(!form(0.0, &pairs[..3]).is_differences());
    }

    /// Uniform values: numbers fold as before, a factor of exactly 1
    /// leaves the other, each computation is listed once, and the values
    /// follow the list in order with one operation each.
    #[test]
    fn uniform_values_fold_numbers_share_computations_and_evaluate_in_order() {
        let mut u = Uniforms::default();
        assert_eq!(
            u.product(Weight::Number(0.5), Weight::Number(3.0)),
            Weight::Number(1.5)
        );
        let dt = u.parameter(0);
        assert_eq!(u.product(Weight::Number(1.0), dt), dt);
        assert_eq!(u.parameter(0), dt, "one entry per parameter");
        let scaled = u.product(Weight::Number(409.6), dt);
        assert_eq!(u.product(Weight::Number(409.6), dt), scaled, "listed once");
        let six = u.product(Weight::Number(-6.0), scaled);
        let centre = u.sum(Weight::Number(1.0), six);
        let inverse = u.quotient(Weight::Number(1.0), dt);
        assert_eq!(u.values.len(), 5);
        let kernel = Kernel {
            instructions: Vec::new(),
            extensions: Vec::new(),
            registers: 0,
            halo: 0,
            fields: Vec::new(),
            parameters: Vec::new(),
            uniforms: u.values.clone(),
            location: None,
            result: OUTPUT,
            identity: Kernel::next_identity(),
        };
        let step = 1e-3;
        let values = kernel.uniform_values(&[step]);
        assert_eq!(dt.value(&values), step);
        assert_eq!(scaled.value(&values), 409.6 * step);
        assert_eq!(centre.value(&values), 1.0 + -6.0 * (409.6 * step));
        assert_eq!(inverse.value(&values), 1.0 / step);
        // A parameter slot the call does not give reads as NaN.
        assert!(dt.value(&kernel.uniform_values(&[])).is_nan());
        // Terms with the same uniform weight form one group; a number
        // equal to the uniform's value today is another weight.
        let f = LinearForm {
            constant: Weight::Number(0.0),
            terms: [(at(0, -1), scaled), (at(0, 0), centre), (at(0, 1), scaled)]
                .into_iter()
                .chain([(at(1, 0), Weight::Number(409.6 * step))])
                .collect(),
        };
        let groups: Vec<(Weight, usize)> = f
            .groups()
            .iter()
            .map(|g| (g.weight, g.sources.len()))
            .collect();
        assert_eq!(
            groups,
            [(scaled, 2), (centre, 1), (Weight::Number(409.6 * step), 1)]
        );
        assert!(!f.is_differences());
    }

    #[test]
    fn the_pairwise_sum_pairs_neighbours_level_by_level() {
        let text = |n: usize| {
            pairwise_sum(
                (0..n).map(|i| ((b'a' + i as u8) as char).to_string()),
                |a, b| format!("({a}+{b})"),
            )
        };
        assert_eq!(text(0), None);
        assert_eq!(text(1).as_deref(), Some("a"));
        assert_eq!(text(3).as_deref(), Some("((a+b)+c)"));
        assert_eq!(text(5).as_deref(), Some("(((a+b)+(c+d))+e)"));
        assert_eq!(text(7).as_deref(), Some("(((a+b)+(c+d))+((e+f)+g))"));
        assert_eq!(text(8).as_deref(), Some("(((a+b)+(c+d))+((e+f)+(g+h)))"));
    }
}
