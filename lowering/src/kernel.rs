//! Lowering: an IR tree becomes a *row program* ([`Kernel`]), the fused form
//! the CPU evaluator runs over rows of the fastest (x) index.
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
//! A stencil offset along y or z re-lowers its argument for that neighbouring
//! row (memoised, so each row's flux is computed once); an offset along x
//! shifts the argument's sources. After lowering, a backward pass computes how
//! far beyond the tile each register must be evaluated, and from that the
//! exact box of offsets at which each field is read, which the evaluator
//! checks against the fields' ghost layers.

use crate::error::{OperatorError, OperatorResult};
use crate::ir::Node;
use crate::mask::PointSet;
use crate::parameter::ParameterCell;
use crate::pointwise::{BinaryOp, Limiter, UnaryOp};
use crate::stencil::{StencilOp, axis_name, stencil_axis, unit};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use watershed_fields::{LocationKind, Patch};

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
    fn renamed(self, rename: &impl Fn(Register) -> Register) -> Source {
        match self {
            Source::Register { register, shift } => Source::Register {
                register: rename(register),
                shift,
            },
            field => field,
        }
    }

    fn shifted_x(self, by: isize) -> Source {
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

/// `constant + sum weight * source`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearForm {
    /// The constant part.
    pub constant: f64,
    /// The terms, in evaluation order.
    pub terms: SmallVec<[(Source, f64); 4]>,
}

impl LinearForm {
    fn constant(value: f64) -> Self {
        LinearForm {
            constant: value,
            terms: SmallVec::new(),
        }
    }

    fn source(source: Source) -> Self {
        LinearForm {
            constant: 0.0,
            terms: SmallVec::from_iter([(source, 1.0)]),
        }
    }

    fn as_constant(&self) -> Option<f64> {
        self.terms.is_empty().then_some(self.constant)
    }

    fn scaled(mut self, by: f64) -> Self {
        // A zero constant is no term at all: `v / 0` is `inf * v`, not
        // `0 * inf + inf * v` (which would be NaN for every v).
        if self.constant != 0.0 {
            self.constant *= by;
        }
        for term in &mut self.terms {
            term.1 *= by;
        }
        self
    }

    fn shifted_x(mut self, by: isize) -> Self {
        for term in &mut self.terms {
            term.0 = term.0.shifted_x(by);
        }
        self
    }

    /// `self + by * other`, merging terms that read the same source.
    fn add_scaled(mut self, other: &LinearForm, by: f64) -> Self {
        if other.constant != 0.0 {
            self.constant += by * other.constant;
        }
        for &(source, weight) in &other.terms {
            match self.terms.iter_mut().find(|(s, _)| *s == source) {
                Some(term) => term.1 += by * weight,
                None => self.terms.push((source, by * weight)),
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
    pub weight: f64,
    /// The sources, in the form's term order (one to [`MAX_GROUP_SOURCES`]).
    pub sources: SmallVec<[Source; MAX_GROUP_SOURCES]>,
}

impl LinearForm {
    /// Whether every back end evaluates this form as differences,
    /// `sum_p w_p (b_p - a_p)` over consecutive term pairs `(a, -w), (b, w)`
    /// (a divergence of fluxes): no constant, an even number of terms, each
    /// pair's weights opposite.
    pub fn is_differences(&self) -> bool {
        self.constant == 0.0
            && self.terms.len() >= 2
            && self.terms.len().is_multiple_of(2)
            && self.terms.chunks(2).all(|p| p[0].1 == -p[1].1)
    }

    /// Whether two terms have weights with the same bits: then
    /// [`groups`](Self::groups) has fewer groups than the form has terms.
    /// Allocation-free, for evaluators that decide per call.
    pub fn shares_weights(&self) -> bool {
        let terms = &self.terms;
        (1..terms.len()).any(|i| {
            terms[..i]
                .iter()
                .any(|t| t.1.to_bits() == terms[i].1.to_bits())
        })
    }

    /// The form's terms grouped by weight, in the order every back end
    /// evaluates a form that is not [`differences`](Self::is_differences):
    /// `constant + w_1 * T_1 + w_2 * T_2 + ...`, added left to right (a
    /// zero constant is left out: the sum starts at `w_1 * T_1`), where
    /// group `g` holds the terms whose weight has the same bits as `w_g`,
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
        let mut open: SmallVec<[(u64, usize); 4]> = SmallVec::new();
        for &(source, weight) in &self.terms {
            let bits = weight.to_bits();
            match open.iter_mut().find(|(b, _)| *b == bits) {
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
                        None => open.push((bits, at)),
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

/// A weight that can be divided out of a product and multiplied back in
/// without changing non-finite results (not 0, not infinite, not NaN).
fn usable_weight(weight: f64) -> bool {
    weight != 0.0 && weight.is_finite()
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

impl Operand {
    fn renamed(self, rename: &impl Fn(Register) -> Register) -> Operand {
        match self {
            Operand::Constant(c) => Operand::Constant(c),
            Operand::One(s, w) => Operand::One(s.renamed(rename), w),
            Operand::Two(s0, w0, s1, w1) => {
                Operand::Two(s0.renamed(rename), w0, s1.renamed(rename), w1)
            }
        }
    }

    fn shifted_x(self, by: isize) -> Operand {
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
        products: Vec<(f64, Operand, Operand)>,
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
    /// `out = ` the value of parameter `slot` at every point.
    Parameter {
        /// Destination.
        out: Register,
        /// Index into the kernel's parameter list.
        slot: u16,
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
            | Instruction::Parameter { out, .. }
            | Instruction::Transfer { out, .. }
            | Instruction::Limited { out, .. } => *out,
        }
    }

    fn out_mut(&mut self) -> &mut Register {
        match self {
            Instruction::Linear { out, .. }
            | Instruction::Unary { out, .. }
            | Instruction::Binary { out, .. }
            | Instruction::Select { out, .. }
            | Instruction::Coordinate { out, .. }
            | Instruction::Mask { out, .. }
            | Instruction::Parameter { out, .. }
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
            | Instruction::Parameter { .. }
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
    /// Location of the result (`None`: a constant).
    pub location: Option<LocationKind>,
    /// Register holding the result when the kernel does not write the
    /// target directly (reductions).
    pub result: Register,
    /// The compiled C form that checks the values it writes for
    /// finiteness, once a back end asked for it
    /// (`watershed_backends::codegen::native_of`): `None` inside when the
    /// emitter does not support the kernel.
    pub native: std::sync::OnceLock<Option<CompiledForm>>,
    /// The compiled C form without that check (for callers that do not
    /// watch for NaN), once asked for.
    pub native_unchecked: std::sync::OnceLock<Option<CompiledForm>>,
    /// The CUDA form, once compiled (`watershed_backends::codegen::nvrtc::cuda_of`).
    pub cuda: std::sync::OnceLock<CompiledForm>,
    /// The CUDA form that checks what it writes, once compiled
    /// (`watershed_backends::codegen::nvrtc::cuda_checked_of`).
    pub cuda_checked: std::sync::OnceLock<CompiledForm>,
}

/// A back end's compiled form of a [`Kernel`], kept in the kernel so that
/// every user of one lowering shares it. It is stored without its type
/// because lowering sits below the back ends (this crate does not know
/// them); the back end that stored it takes it back with
/// `Arc::downcast` to its own type.
pub type CompiledForm = Arc<dyn std::any::Any + Send + Sync>;

/// A subtree already lowered at some row offset, and its form.
type LoweredSubtree = (Arc<Node>, LinearForm);

struct Lowering<'p> {
    patch: &'p Patch,
    slots: HashMap<u64, u16>,
    fields: Vec<(u64, Arc<str>, LocationKind)>,
    /// Per field slot: read directly (`None`) or through an inter-grid operator.
    transfers: Vec<Option<StencilOp>>,
    parameters: Vec<Arc<ParameterCell>>,
    memo: HashMap<(*const Node, [isize; 2]), LinearForm>,
    /// Common-subexpression elimination: the value hash of each subtree
    /// ([`Node::value_hash`]) and, per (hash, row offset), the subtrees
    /// already lowered. A subtree equal (`==`) to one of them reuses its
    /// form, so a subexpression written out twice is computed once per point.
    hashes: HashMap<*const Node, u64>,
    by_value: HashMap<(u64, [isize; 2]), Vec<LoweredSubtree>>,
    instructions: Vec<Instruction>,
    registers: u16,
}

impl Lowering<'_> {
    fn new_register(&mut self) -> Register {
        let r = self.registers;
        self.registers += 1;
        r
    }

    fn emit(&mut self, make: impl FnOnce(Register) -> Instruction) -> LinearForm {
        let out = self.new_register();
        self.instructions.push(make(out));
        LinearForm::source(Source::Register {
            register: out,
            shift: 0,
        })
    }

    /// An operand for `form`, materialising it when it is too large to inline.
    fn operand(&mut self, form: LinearForm) -> Operand {
        if let Some(c) = form.as_constant() {
            return Operand::Constant(c);
        }
        if form.constant == 0.0 {
            match form.terms.as_slice() {
                [(s, w)] => return Operand::One(*s, *w),
                [(s0, w0), (s1, w1)] => return Operand::Two(*s0, *w0, *s1, *w1),
                _ => {}
            }
        }
        let materialised = self.emit(|out| Instruction::Linear {
            out,
            form,
            products: Vec::new(),
        });
        Operand::One(materialised.terms[0].0, 1.0)
    }

    /// The argument of a stencil at `offset` from the row `row`.
    fn at_offset(
        &mut self,
        node: &Arc<Node>,
        row: [isize; 2],
        offset: [isize; 3],
    ) -> OperatorResult<LinearForm> {
        let neighbour = [row[0] + offset[1], row[1] + offset[2]];
        Ok(self.lower(node, neighbour)?.shifted_x(offset[0]))
    }

    /// The slot of field `id`, read directly (`transfer` `None`) or through
    /// an inter-grid operator; one field cannot be read both ways.
    fn field_slot(
        &mut self,
        id: u64,
        name: &Arc<str>,
        location: LocationKind,
        transfer: Option<StencilOp>,
    ) -> OperatorResult<u16> {
        let next = self.fields.len() as u16;
        let slot = *self.slots.entry(id).or_insert_with(|| next);
        if slot == next {
            self.fields.push((id, name.clone(), location));
            self.transfers.push(transfer);
        } else if self.transfers[slot as usize] != transfer {
            let describe = |t: Option<StencilOp>| t.map_or("directly".to_string(), |op| op.name());
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "it is read both {} and {} in one expression; a field lives on one grid, so read it through one operator",
                    describe(self.transfers[slot as usize]),
                    describe(transfer)
                ),
            });
        }
        Ok(slot)
    }

    /// An inter-grid operator: its argument must be a cell field (on the
    /// other grid), with a ratio of 1 or 2 per axis.
    fn lower_transfer(
        &mut self,
        op: StencilOp,
        ratio: [usize; 3],
        args: &[Arc<Node>],
        row: [isize; 2],
    ) -> OperatorResult<LinearForm> {
        let Some(Node::Field { id, name, location }) = args.first().map(|a| a.as_ref()) else {
            return Err(OperatorError::InterGrid {
                field: args
                    .first()
                    .map_or("nothing".to_string(), |a| a.to_string()),
                reason: format!(
                    "{} reads a field on another grid; its argument must be a field, not an expression (assign the expression to a field on that grid first)",
                    op.name()
                ),
            });
        };
        if *location != LocationKind::CellCentre {
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "{} is defined for cell-centred fields; the field is at {location:?}",
                    op.name()
                ),
            });
        }
        if let Some(axis) = (0..3).find(|&a| !(1..=2).contains(&ratio[a])) {
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "{}: the ratio along {} is {}, but grids are refined by 1 or 2 per axis",
                    op.name(),
                    axis_name(axis),
                    ratio[axis]
                ),
            });
        }
        let slot = self.field_slot(*id, name, *location, Some(op))?;
        Ok(self.emit(|out| Instruction::Transfer {
            out,
            op,
            slot,
            row_offset: row,
        }))
    }

    fn lower(&mut self, node: &Arc<Node>, row: [isize; 2]) -> OperatorResult<LinearForm> {
        let key = (Arc::as_ptr(node), row);
        if let Some(done) = self.memo.get(&key) {
            return Ok(done.clone());
        }
        let value_key = (node.value_hash(&mut self.hashes), row);
        if let Some(equal) = self
            .by_value
            .get(&value_key)
            .and_then(|seen| seen.iter().find(|(tree, _)| tree.as_ref() == node.as_ref()))
        {
            let form = equal.1.clone();
            self.memo.insert(key, form.clone());
            return Ok(form);
        }
        let form = match node.as_ref() {
            Node::Field { id, name, location } => {
                let slot = self.field_slot(*id, name, *location, None)?;
                LinearForm::source(Source::Field {
                    slot,
                    offset: [0, row[0], row[1]],
                })
            }
            Node::Constant(value) => LinearForm::constant(*value),
            Node::Parameter { cell } => {
                let slot = match self.parameters.iter().position(|p| p.id() == cell.id()) {
                    Some(slot) => slot,
                    None => {
                        self.parameters.push(cell.clone());
                        self.parameters.len() - 1
                    }
                } as u16;
                self.emit(|out| Instruction::Parameter { out, slot })
            }
            Node::Coordinate { axis, location } => {
                let (axis, location) = (*axis, *location);
                if axis > 2 {
                    return Err(OperatorError::InvalidAxis {
                        what: format!("coordinate({axis})"),
                        axis,
                    });
                }
                self.emit(|out| Instruction::Coordinate {
                    out,
                    axis,
                    location,
                    row_offset: row,
                })
            }
            Node::Mask { set, location } => {
                let (set, location) = (set.clone(), *location);
                self.emit(|out| Instruction::Mask {
                    out,
                    set,
                    location,
                    row_offset: row,
                })
            }
            Node::Unary {
                op: UnaryOp::Negate,
                arg,
            } => self.lower(arg, row)?.scaled(-1.0),
            Node::Unary { op, arg } => {
                let value = self.lower(arg, row)?;
                match value.as_constant() {
                    Some(c) => LinearForm::constant(op.apply(c)),
                    None => {
                        let arg = self.operand(value);
                        let op = *op;
                        self.emit(|out| Instruction::Unary { op, out, arg })
                    }
                }
            }
            Node::Binary { op, left, right } => {
                let a = self.lower(left, row)?;
                let b = self.lower(right, row)?;
                match (op, a.as_constant(), b.as_constant()) {
                    (_, Some(x), Some(y)) => LinearForm::constant(op.apply(x, y)),
                    (BinaryOp::Add, _, _) => a.add_scaled(&b, 1.0),
                    (BinaryOp::Subtract, _, _) => a.add_scaled(&b, -1.0),
                    (BinaryOp::Multiply, Some(x), None) => b.scaled(x),
                    (BinaryOp::Multiply, None, Some(y)) => a.scaled(y),
                    (BinaryOp::Divide, None, Some(y)) => a.scaled(1.0 / y),
                    (BinaryOp::Pow, None, Some(2.0)) => {
                        // x^2 as one product: correctly rounded (the vector
                        // `pow` is within 2 ulp), and the same for every x,
                        // zeros, infinities and NaN included.
                        let base = self.operand(a);
                        self.emit(|out| Instruction::Binary {
                            op: BinaryOp::Multiply,
                            out,
                            left: base,
                            right: base,
                        })
                    }
                    (BinaryOp::Multiply | BinaryOp::Divide, None, None)
                        if a.constant == 0.0
                            && b.constant == 0.0
                            && usable_weight(a.terms[0].1)
                            && usable_weight(b.terms[0].1) =>
                    {
                        // Pull the weights out of both factors into the
                        // consumer's weight: (wa A)(wb B) = (wa wb) (A B), so
                        // the product loop does no scaling (e.g. a face
                        // diffusivity times a gradient is one add, one
                        // subtract and one multiply per point).
                        let (wa, wb) = (a.terms[0].1, b.terms[0].1);
                        let (left, right) = (a.scaled(1.0 / wa), b.scaled(1.0 / wb));
                        let left = self.operand(left);
                        let right = self.operand(right);
                        let op = *op;
                        let product = self.emit(|out| Instruction::Binary {
                            op,
                            out,
                            left,
                            right,
                        });
                        let factor = if op == BinaryOp::Multiply {
                            wa * wb
                        } else {
                            wa / wb
                        };
                        product.scaled(factor)
                    }
                    _ => {
                        let left = self.operand(a);
                        let right = self.operand(b);
                        let op = *op;
                        self.emit(|out| Instruction::Binary {
                            op,
                            out,
                            left,
                            right,
                        })
                    }
                }
            }
            Node::Select {
                condition,
                if_true,
                if_false,
            } => {
                let c = self.lower(condition, row)?;
                match c.as_constant() {
                    Some(c) if c != 0.0 => self.lower(if_true, row)?,
                    Some(_) => self.lower(if_false, row)?,
                    None => {
                        let t = self.lower(if_true, row)?;
                        let f = self.lower(if_false, row)?;
                        let condition = self.operand(c);
                        let if_true = self.operand(t);
                        let if_false = self.operand(f);
                        self.emit(|out| Instruction::Select {
                            out,
                            condition,
                            if_true,
                            if_false,
                        })
                    }
                }
            }
            Node::Stencil { op, args } => self.lower_stencil(*op, args, row)?,
        };
        self.memo.insert(key, form.clone());
        self.by_value
            .entry(value_key)
            .or_default()
            .push((node.clone(), form.clone()));
        Ok(form)
    }

    fn lower_stencil(
        &mut self,
        op: StencilOp,
        args: &[Arc<Node>],
        row: [isize; 2],
    ) -> OperatorResult<LinearForm> {
        let grid = self.patch.grid();
        if let Some(ratio) = op.transfer_ratio() {
            return self.lower_transfer(op, ratio, args, row);
        }
        if let StencilOp::Shift { offset } = op
            && offset.iter().any(|o| o.abs() > MAX_SHIFT)
        {
            return Err(OperatorError::InvalidOffset {
                what: op.name(),
                offset,
                limit: MAX_SHIFT,
            });
        }
        if let Some(axis) = stencil_axis(op) {
            if axis > 2 {
                return Err(OperatorError::InvalidAxis {
                    what: op.name(),
                    axis,
                });
            }
            if !grid.active_dimensions()[axis] {
                // One cell along `axis`: every field is uniform along it, so
                // differences vanish and interpolation is the identity (a 2D
                // `div(interp(g) * grad(p))` built without knowing the grid
                // gets no z contribution, as the Laplacian has none).
                return match op {
                    StencilOp::Gradient { .. }
                    | StencilOp::Divergence { .. }
                    | StencilOp::Gradient4 { .. }
                    | StencilOp::Divergence4 { .. }
                    | StencilOp::CentredDerivative { .. } => Ok(LinearForm::constant(0.0)),
                    StencilOp::InterpolateToFace { .. }
                    | StencilOp::InterpolateToCell { .. }
                    | StencilOp::InterpolateToFace4 { .. }
                    | StencilOp::InterpolateToCell4 { .. } => self.lower(&args[0], row),
                    StencilOp::Upwind { .. } | StencilOp::Limited { .. } => {
                        self.lower(&args[1], row)
                    }
                    StencilOp::Laplacian
                    | StencilOp::Laplacian4
                    | StencilOp::Relabel { .. }
                    | StencilOp::Shift { .. }
                    | StencilOp::Restrict { .. }
                    | StencilOp::Prolongate { .. } => {
                        unreachable!("these have no single axis")
                    }
                };
            }
        }
        if let Some(points) = op.linear_points(grid.spacing(), grid.active_dimensions()) {
            let mut sum = LinearForm::constant(0.0);
            for (offset, weight) in points {
                let value = self.at_offset(&args[0], row, offset)?;
                sum = sum.add_scaled(&value, weight);
            }
            return Ok(sum);
        }
        match op {
            StencilOp::Upwind { axis } => {
                let velocity = self.lower(&args[0], row)?;
                let lower_cell = self.at_offset(&args[1], row, unit(axis, -1))?;
                let upper_cell = self.at_offset(&args[1], row, [0; 3])?;
                let v = self.operand(velocity);
                let positive = self.emit(|out| Instruction::Binary {
                    op: BinaryOp::GreaterEqual,
                    out,
                    left: v,
                    right: Operand::Constant(0.0),
                });
                let condition = self.operand(positive);
                let if_true = self.operand(lower_cell);
                let if_false = self.operand(upper_cell);
                Ok(self.emit(|out| Instruction::Select {
                    out,
                    condition,
                    if_true,
                    if_false,
                }))
            }
            StencilOp::Limited { axis, limiter } => {
                let velocity = self.lower(&args[0], row)?;
                let velocity = self.operand(velocity);
                let mut cells = [Operand::Constant(0.0); 4];
                for (cell, offset) in cells.iter_mut().zip(-2..=1) {
                    let value = self.at_offset(&args[1], row, unit(axis, offset))?;
                    *cell = self.operand(value);
                }
                Ok(self.emit(|out| Instruction::Limited {
                    out,
                    limiter,
                    velocity,
                    cells,
                }))
            }
            _ => unreachable!("linear stencils are handled above"),
        }
    }
}

impl Kernel {
    /// Lowers `root` for evaluation on `patch`. With `into_target`, the last
    /// instruction writes the target row ([`OUTPUT`]); otherwise the result
    /// is left in register [`Kernel::result`] (for reductions).
    pub fn compile(root: &Arc<Node>, patch: &Patch, into_target: bool) -> OperatorResult<Kernel> {
        let mut lowering = Lowering {
            patch,
            slots: HashMap::new(),
            fields: Vec::new(),
            transfers: Vec::new(),
            parameters: Vec::new(),
            memo: HashMap::new(),
            hashes: HashMap::new(),
            by_value: HashMap::new(),
            instructions: Vec::new(),
            registers: 0,
        };
        let form = lowering.lower(root, [0, 0])?;
        let Lowering {
            mut instructions,
            registers,
            fields,
            transfers,
            parameters,
            ..
        } = lowering;
        let mut registers = registers;
        let result: Register;
        // Let the last instruction write the result directly when the root
        // is exactly its register and nothing else reads it.
        let direct = match form.terms.as_slice() {
            [(Source::Register { register, shift: 0 }, w)]
                if form.constant == 0.0
                    && *w == 1.0
                    && instructions.last().is_some_and(|i| i.out() == *register)
                    && !instructions.iter().any(|i| {
                        i.sources().iter().any(
                            |s| matches!(s, Source::Register { register: r, .. } if r == register),
                        )
                    }) =>
            {
                Some(*register)
            }
            _ => None,
        };
        match (direct, into_target) {
            (Some(_), true) => {
                *instructions.last_mut().expect("checked above").out_mut() = OUTPUT;
                result = OUTPUT;
            }
            (Some(register), false) => result = register,
            (None, _) => {
                let out = if into_target {
                    OUTPUT
                } else {
                    registers += 1;
                    registers - 1
                };
                instructions.push(Instruction::Linear {
                    out,
                    form,
                    products: Vec::new(),
                });
                result = out;
            }
        }

        fuse_products(&mut instructions);
        let (registers, result) = compact_registers(&mut instructions, result);

        // Backward pass: how far each register extends beyond the tile.
        let mut extensions: Vec<Option<(isize, isize)>> = vec![None; registers as usize];
        let range_of = |extensions: &[Option<(isize, isize)>], r: Register| {
            if r == OUTPUT || r == result {
                Some((0, 0))
            } else {
                extensions[r as usize]
            }
        };
        let mut field_extents: Vec<Option<ReadExtent>> = vec![None; fields.len()];
        let widen = |entry: &mut Option<ReadExtent>, read: ReadExtent| {
            *entry = Some(match *entry {
                None => read,
                Some(e) => ReadExtent {
                    min: [0, 1, 2].map(|a| e.min[a].min(read.min[a])),
                    max: [0, 1, 2].map(|a| e.max[a].max(read.max[a])),
                },
            });
        };
        for instruction in instructions.iter().rev() {
            let Some((lo, hi)) = range_of(&extensions, instruction.out()) else {
                continue; // dead code
            };
            if let Instruction::Transfer {
                slot, row_offset, ..
            } = instruction
            {
                let read = ReadExtent {
                    min: [lo, row_offset[0], row_offset[1]],
                    max: [hi, row_offset[0], row_offset[1]],
                };
                widen(&mut field_extents[*slot as usize], read);
            }
            for source in instruction.sources() {
                match source {
                    Source::Register { register, shift } => {
                        let entry = &mut extensions[register as usize];
                        *entry = Some(match *entry {
                            None => (lo + shift, hi + shift),
                            Some((a, b)) => (a.min(lo + shift), b.max(hi + shift)),
                        });
                    }
                    Source::Field { slot, offset } => {
                        let read = ReadExtent {
                            min: [lo + offset[0], offset[1], offset[2]],
                            max: [hi + offset[0], offset[1], offset[2]],
                        };
                        widen(&mut field_extents[slot as usize], read);
                    }
                }
            }
        }
        if result != OUTPUT && (result as usize) < extensions.len() {
            extensions[result as usize] = Some((0, 0));
        }
        let extensions: Vec<(isize, isize)> = extensions
            .into_iter()
            .map(|e| e.unwrap_or((0, 0)))
            .collect();
        let halo = extensions
            .iter()
            .map(|&(lo, hi)| (-lo).max(hi))
            .max()
            .unwrap_or(0)
            .max(0);
        let fields = fields
            .into_iter()
            .zip(field_extents)
            .zip(transfers)
            .map(|(((id, name, location), extent), transfer)| KernelField {
                id,
                name,
                location,
                extent: extent.unwrap_or(ReadExtent {
                    min: [0; 3],
                    max: [0; 3],
                }),
                transfer,
            })
            .collect();
        Ok(Kernel {
            instructions,
            extensions,
            registers: registers as usize,
            halo,
            fields,
            parameters,
            location: root.location(),
            result,
            native: std::sync::OnceLock::new(),
            native_unchecked: std::sync::OnceLock::new(),
            cuda: std::sync::OnceLock::new(),
            cuda_checked: std::sync::OnceLock::new(),
        })
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

/// Renumbers the registers `0..count` in order of definition (fusion leaves
/// gaps); returns the count and the result register's new number.
fn compact_registers(instructions: &mut [Instruction], result: Register) -> (u16, Register) {
    let mut numbers: HashMap<Register, Register> = HashMap::new();
    for instruction in instructions.iter() {
        let out = instruction.out();
        if out != OUTPUT {
            let next = numbers.len() as Register;
            numbers.entry(out).or_insert(next);
        }
    }
    let rename = |r: Register| if r == OUTPUT { OUTPUT } else { numbers[&r] };
    for instruction in instructions.iter_mut() {
        *instruction.out_mut() = rename(instruction.out());
        match instruction {
            Instruction::Linear { form, products, .. } => {
                for term in &mut form.terms {
                    term.0 = term.0.renamed(&rename);
                }
                for (_, left, right) in products.iter_mut() {
                    *left = left.renamed(&rename);
                    *right = right.renamed(&rename);
                }
            }
            Instruction::Unary { arg, .. } => *arg = arg.renamed(&rename),
            Instruction::Binary { left, right, .. } => {
                *left = left.renamed(&rename);
                *right = right.renamed(&rename);
            }
            Instruction::Select {
                condition,
                if_true,
                if_false,
                ..
            } => {
                for operand in [condition, if_true, if_false] {
                    *operand = operand.renamed(&rename);
                }
            }
            Instruction::Coordinate { .. }
            | Instruction::Mask { .. }
            | Instruction::Parameter { .. }
            | Instruction::Transfer { .. } => {}
            Instruction::Limited {
                velocity, cells, ..
            } => {
                *velocity = velocity.renamed(&rename);
                for cell in cells.iter_mut() {
                    *cell = cell.renamed(&rename);
                }
            }
        }
    }
    (numbers.len() as u16, rename(result))
}

/// True for the operand shapes fused products are specialised for: `a`,
/// `a + b`, `a - b` (the shapes weight factoring produces).
pub fn fusable_factor(operand: &Operand) -> bool {
    matches!(operand, Operand::One(_, w) if *w == 1.0)
        || matches!(operand, Operand::Two(_, w0, _, w1) if *w0 == 1.0 && w1.abs() == 1.0)
}

/// Moves products into the linear combinations that read them: a product
/// of two fusable factors whose every reader is a linear combination is
/// evaluated inline by each reader (at the reader's shift), like a
/// hand-written loop that computes a face flux on the fly for each
/// neighbouring cell. The product register then disappears.
fn fuse_products(instructions: &mut Vec<Instruction>) {
    let mut readers: HashMap<Register, (usize, bool)> = HashMap::new();
    for instruction in instructions.iter() {
        let linear = matches!(instruction, Instruction::Linear { .. });
        for source in instruction.sources() {
            if let Source::Register { register, .. } = source {
                let entry = readers.entry(register).or_insert((0, true));
                entry.0 += 1;
                entry.1 &= linear;
            }
        }
    }
    let mut fused: HashMap<Register, (Operand, Operand)> = HashMap::new();
    for instruction in instructions.iter() {
        if let Instruction::Binary {
            op: BinaryOp::Multiply,
            out,
            left,
            right,
        } = instruction
            && readers
                .get(out)
                .is_some_and(|&(count, only_linear)| count > 0 && only_linear)
            && fusable_factor(left)
            && fusable_factor(right)
        {
            fused.insert(*out, (*left, *right));
        }
    }
    if fused.is_empty() {
        return;
    }
    for instruction in instructions.iter_mut() {
        if let Instruction::Linear { form, products, .. } = instruction {
            form.terms.retain(|(source, weight)| match source {
                Source::Register { register, shift } if fused.contains_key(register) => {
                    let (left, right) = fused[register];
                    products.push((*weight, left.shifted_x(*shift), right.shifted_x(*shift)));
                    false
                }
                _ => true,
            });
        }
    }
    instructions
        .retain(|i| !(matches!(i, Instruction::Binary { .. }) && fused.contains_key(&i.out())));
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
        for instruction in &self.instructions {
            let out = name(instruction.out());
            match instruction {
                Instruction::Linear { form, products, .. } => {
                    let mut parts: Vec<String> = form
                        .terms
                        .iter()
                        .map(|(s, w)| format!("{w:?}*{}", describe_source(s, self)))
                        .collect();
                    parts.extend(products.iter().map(|(w, l, r)| {
                        format!(
                            "{w:?}*{}*{}",
                            describe_operand(l, self),
                            describe_operand(r, self)
                        )
                    }));
                    if form.constant != 0.0 || parts.is_empty() {
                        parts.push(format!("{:?}", form.constant));
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
                Instruction::Parameter { slot, .. } => writeln!(
                    f,
                    "{out} = parameter {}",
                    self.parameters
                        .get(*slot as usize)
                        .map_or("?", |p| p.name())
                )?,
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
            constant,
            terms: terms.iter().copied().collect(),
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
        let summary: Vec<(f64, Vec<Source>)> = groups
            .iter()
            .map(|g| (g.weight, g.sources.to_vec()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (-6.0, vec![at(0, 0)]),
                (2.0, vec![at(0, -1), at(0, 1), at(0, 2)]),
                (3.0, vec![at(1, 0), at(1, 1)]),
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
        let weights: Vec<(u64, usize)> = f
            .groups()
            .iter()
            .map(|g| (g.weight.to_bits(), g.sources.len()))
            .collect();
        assert_eq!(
            weights,
            vec![(0.0f64.to_bits(), 2), ((-0.0f64).to_bits(), 1)]
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
