//! The C-family emitter: a lowered [`Kernel`] becomes C (for the system
//! compiler) or CUDA C (for NVRTC). Both dialects share the arithmetic of
//! every instruction (`Emitter::value`), written operation for operation
//! as the row interpreter computes it, so that a generated kernel compiled
//! without floating-point contraction gives the interpreter's bits.
//!
//! * **C**: one function per kernel runs a block (rows `j0 .. j0 + rows` of
//!   the planes `k0 .. k0 + planes`, points `x0 .. x1`): per row, the instructions are grouped
//!   into loops over x (consecutive instructions over the same range whose
//!   register reads are all at shift 0 share one loop); a register lives
//!   in a scalar when only its own loop reads it, else in its row of the
//!   scratch (the interpreter's layout, so that reductions read the result
//!   where they always did). Every loop is unit-stride and carries
//!   `#pragma GCC ivdep`: the evaluator guarantees no loop-carried
//!   dependence (a target read only at offset 0 or outside the points
//!   written), which lets gcc vectorise without run-time alias checks.
//! * **CUDA C**: one `__global__` function per kernel, one thread per
//!   point, the fastest index on `threadIdx.x`. A register read at a shift
//!   along x is recomputed at that shift (each needed `(register, shift)`
//!   pair is one scalar), since threads keep no row buffers.
//!
//! Field `slot` arrives as a pointer to its point (0, 0, 0) with its y and
//! z strides (x is unit-stride); parameters as values; the geometry of
//! coordinates and boundary masks as a small array of numbers filled per
//! call ([`geometry`]). C takes arrays of these; CUDA takes them in one
//! struct passed by value ([`cuda_arguments`]), so a launch copies nothing.

use crate::kernel::{
    Instruction, Kernel, OUTPUT, Operand, Register, Source, UniformValue, Weight, pairwise_sum,
};
use crate::mask::PointSet;
use crate::pointwise::{BinaryOp, Limiter, UnaryOp};
use crate::stencil::StencilOp;
use crate::vmath::{Dialect, literal};
use smallvec::SmallVec;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use watershed_fields::{FieldLayout, Patch};

/// Why a kernel cannot be generated (it then runs on the interpreter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

/// The by-value argument struct of `kernel`'s CUDA function.
pub fn cuda_arguments(kernel: &Kernel) -> super::launch::CudaArguments {
    super::launch::CudaArguments {
        fields: kernel.fields.len(),
        parameters: kernel.parameters.len(),
        geometry: kernel.instructions.iter().map(geometry_len).sum(),
    }
}

/// Numbers of the geometry array each instruction reads, in instruction
/// order: 4 per coordinate (origin, patch offset, stagger, spacing), 5 per
/// boundary mask (touches the boundary, index, interior extents).
fn geometry_len(instruction: &Instruction) -> usize {
    match instruction {
        Instruction::Coordinate { .. } => 4,
        Instruction::Mask { set, .. } if matches!(**set, PointSet::Boundary(_)) => 5,
        _ => 0,
    }
}

/// The geometry array of `kernel` on `patch`: what coordinates and boundary
/// masks need to know about the patch, which a kernel (shared by patches
/// of one spacing) does not contain.
pub fn geometry(kernel: &Kernel, patch: &Patch) -> Vec<f64> {
    let mut values = Vec::new();
    for instruction in &kernel.instructions {
        match instruction {
            Instruction::Coordinate { axis, location, .. } => {
                let grid = patch.grid();
                values.extend([
                    grid.origin()[*axis],
                    patch.offset()[*axis] as f64,
                    location.stagger()[*axis],
                    grid.spacing()[*axis],
                ]);
            }
            Instruction::Mask { set, location, .. } => {
                if let PointSet::Boundary(side) = **set {
                    let layout = FieldLayout::new(patch, *location);
                    let touches = if side.plus {
                        patch.plus_boundary()[side.axis]
                    } else {
                        patch.minus_boundary()[side.axis]
                    };
                    let extent = layout.interior_extent();
                    let at = if side.plus {
                        extent[side.axis] as f64 - 1.0
                    } else {
                        0.0
                    };
                    values.extend([
                        f64::from(u8::from(touches)),
                        at,
                        extent[0] as f64,
                        extent[1] as f64,
                        extent[2] as f64,
                    ]);
                }
            }
            _ => {}
        }
    }
    values
}

/// Registers that are read (transitively) by the result, given the
/// branches `resolved` fixes (see [`sources_resolved`]); others are dead.
fn live_registers(kernel: &Kernel, resolved: &HashMap<usize, bool>) -> Vec<bool> {
    let mut live = vec![false; kernel.registers];
    if kernel.result != OUTPUT && (kernel.result as usize) < live.len() {
        live[kernel.result as usize] = true;
    }
    for (i, instruction) in kernel.instructions.iter().enumerate().rev() {
        let out = instruction.out();
        if out != OUTPUT && !live[out as usize] {
            continue;
        }
        for source in sources_resolved(kernel, i, resolved) {
            if let Source::Register { register, .. } = source
                && register != OUTPUT
            {
                live[register as usize] = true;
            }
        }
    }
    live
}

fn unsupported(kernel: &Kernel) -> Option<Unsupported> {
    for instruction in &kernel.instructions {
        match instruction {
            Instruction::Mask { set, .. } if matches!(**set, PointSet::Points(_)) => {
                return Some(Unsupported(
                    "a mask given as an explicit list of points".to_string(),
                ));
            }
            Instruction::Transfer { op, .. }
                if !matches!(
                    op,
                    StencilOp::Restrict { .. } | StencilOp::Prolongate { .. }
                ) =>
            {
                return Some(Unsupported(format!("the transfer {}", op.name())));
            }
            _ => {}
        }
    }
    None
}

/// How the current point is named and how sources are read.
/// Whether a generated C kernel tests the values it writes to its target
/// for finiteness. The test costs about a fifth of the instructions of a
/// small stencil kernel whose fields sit in cache (a multigrid sweep), so
/// kernels whose caller does not watch for NaN are generated without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FiniteCheck {
    /// `bad |= bits(v - v)` per value written (`v - v` is `+0.0`, all bits
    /// clear, for every finite `v`, and NaN for an infinity or a NaN); the
    /// function returns whether any value was not finite.
    Checked,
    /// No test; the function returns 0.
    Unchecked,
}

struct Emitter<'k> {
    kernel: &'k Kernel,
    dialect: Dialect,
    /// Whether the C loops check each value written to the target for
    /// finiteness (see [`FiniteCheck`]).
    finite_check: FiniteCheck,
    /// Offset into the geometry array per instruction index.
    geometry_at: Vec<usize>,
}

impl Emitter<'_> {
    fn lit(&self, v: f64) -> String {
        literal(v, self.dialect)
    }

    /// A weight: its literal, or the name of the uniform value computed
    /// before the loops ([`uniform_prelude`]: `uv0`, `uv1`, ...).
    fn weight(&self, w: Weight) -> String {
        match w {
            Weight::Number(v) => self.lit(v),
            Weight::Uniform(k) => format!("uv{k}"),
        }
    }

    /// An operand as the interpreter's lanes compute it (`with_lane!`).
    fn operand(&self, operand: &Operand, read: &dyn Fn(Source) -> String) -> String {
        match *operand {
            Operand::Constant(c) => self.lit(c),
            Operand::One(s, 1.0) => read(s),
            Operand::One(s, w) => format!("({} * {})", self.lit(w), read(s)),
            Operand::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == 1.0 => {
                format!("({} + {})", read(s0), read(s1))
            }
            Operand::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == -1.0 => {
                format!("({} - {})", read(s0), read(s1))
            }
            Operand::Two(s0, w0, s1, w1) if w0 == w1 => {
                format!("({} * ({} + {}))", self.lit(w0), read(s0), read(s1))
            }
            Operand::Two(s0, w0, s1, w1) if w0 == -w1 => {
                format!("({} * ({} - {}))", self.lit(w1), read(s1), read(s0))
            }
            Operand::Two(s0, w0, s1, w1) => format!(
                "({} * {} + {} * {})",
                self.lit(w0),
                read(s0),
                self.lit(w1),
                read(s1)
            ),
        }
    }

    /// An operand as the interpreter's point-wise path computes it
    /// (`Resolved::at`: selections and limiters).
    fn operand_at(&self, operand: &Operand, read: &dyn Fn(Source) -> String) -> String {
        match *operand {
            Operand::Constant(c) => self.lit(c),
            Operand::One(s, w) => format!("({} * {})", self.lit(w), read(s)),
            Operand::Two(s0, w0, s1, w1) => format!(
                "({} * {} + {} * {})",
                self.lit(w0),
                read(s0),
                self.lit(w1),
                read(s1)
            ),
        }
    }

    /// The value instruction `index` computes at the current point, given
    /// how to read a source and where the point is: `x` (an expression for
    /// the x index, shifted already), `j` and `k` (the row).
    fn value(
        &self,
        index: usize,
        read: &dyn Fn(Source) -> String,
        x: &str,
        transfer_row: &dyn Fn(u16, [isize; 2]) -> String,
    ) -> String {
        let instruction = &self.kernel.instructions[index];
        let lit = |v: f64| self.lit(v);
        let weight = |w: Weight| self.weight(w);
        match instruction {
            Instruction::Linear { form, products, .. } => {
                let terms = &form.terms;
                let c = form.constant;
                let base = if !terms.is_empty() || products.is_empty() {
                    if terms.is_empty() {
                        Some(weight(c))
                    } else if form.is_differences() {
                        let parts: Vec<String> = terms
                            .chunks(2)
                            .map(|p| {
                                format!(
                                    "{} * ({} - {})",
                                    weight(p[1].1),
                                    read(p[1].0),
                                    read(p[0].0)
                                )
                            })
                            .collect();
                        Some(parts.join(" + "))
                    } else if terms.len() == 1 && form.has_no_constant() {
                        Some(format!("{} * {}", weight(terms[0].1), read(terms[0].0)))
                    } else {
                        // A zero constant is left out: `-0.0 + v` is `v` for
                        // every `v`, and the interpreter adds `-0.0` in its
                        // place (same bits), where `0.0 + v` would cost an
                        // addition per point only to turn `-0.0` into `+0.0`.
                        let mut parts: Vec<String> = Vec::new();
                        if !form.has_no_constant() {
                            parts.push(weight(c));
                        }
                        for group in form.groups() {
                            let sum =
                                pairwise_sum(group.sources.iter().map(|s| read(*s)), |a, b| {
                                    format!("({a} + {b})")
                                })
                                .unwrap_or_default();
                            parts.push(format!("{} * {}", weight(group.weight), sum));
                        }
                        Some(parts.join(" + "))
                    }
                } else {
                    None
                };
                let mut text = base.unwrap_or_else(|| weight(c));
                for (w, l, r) in products {
                    let _ = write!(
                        text,
                        " + {} * ({} * {})",
                        weight(*w),
                        self.operand(l, read),
                        self.operand(r, read)
                    );
                }
                text
            }
            Instruction::Unary { op, arg, .. } => {
                let a = self.operand(arg, read);
                match op {
                    UnaryOp::Negate => format!("(-{a})"),
                    UnaryOp::Exp => format!("ws_exp({a})"),
                    UnaryOp::Log => format!("ws_log({a})"),
                    UnaryOp::Sqrt => format!("sqrt({a})"),
                    UnaryOp::Sin => format!("ws_sin({a})"),
                    UnaryOp::Cos => format!("ws_cos({a})"),
                    UnaryOp::Tanh => format!("ws_tanh({a})"),
                    UnaryOp::Abs => format!("fabs({a})"),
                    UnaryOp::Not => format!("({a} == 0.0 ? 1.0 : 0.0)"),
                }
            }
            Instruction::Binary {
                op, left, right, ..
            } => {
                let (a, b) = (self.operand(left, read), self.operand(right, read));
                match op {
                    BinaryOp::Add => format!("({a} + {b})"),
                    BinaryOp::Subtract => format!("({a} - {b})"),
                    BinaryOp::Multiply => format!("({a} * {b})"),
                    BinaryOp::Divide => format!("({a} / {b})"),
                    BinaryOp::Pow => format!("ws_pow({a}, {b})"),
                    BinaryOp::Min => format!("ws_min({a}, {b})"),
                    BinaryOp::Max => format!("ws_max({a}, {b})"),
                    BinaryOp::Less => format!("({a} < {b} ? 1.0 : 0.0)"),
                    BinaryOp::LessEqual => format!("({a} <= {b} ? 1.0 : 0.0)"),
                    BinaryOp::Greater => format!("({a} > {b} ? 1.0 : 0.0)"),
                    BinaryOp::GreaterEqual => format!("({a} >= {b} ? 1.0 : 0.0)"),
                    BinaryOp::Equal => format!("({a} == {b} ? 1.0 : 0.0)"),
                    BinaryOp::NotEqual => format!("({a} != {b} ? 1.0 : 0.0)"),
                    BinaryOp::And => format!("(({a} != 0.0) & ({b} != 0.0) ? 1.0 : 0.0)"),
                    BinaryOp::Or => format!("(({a} != 0.0) | ({b} != 0.0) ? 1.0 : 0.0)"),
                }
            }
            Instruction::Select {
                condition,
                if_true,
                if_false,
                ..
            } => format!(
                "ws_select({}, {}, {})",
                self.operand_at(condition, read),
                self.operand_at(if_true, read),
                self.operand_at(if_false, read)
            ),
            Instruction::Coordinate {
                axis, row_offset, ..
            } => {
                let g = self.geometry_at[index];
                let at = match axis {
                    0 => x.to_string(),
                    1 => format!("(j + {})", row_offset[0]),
                    _ => format!("(k + {})", row_offset[1]),
                };
                format!(
                    "(g[{g}] + ((g[{}] + (double)({at})) + g[{}]) * g[{}])",
                    g + 1,
                    g + 2,
                    g + 3
                )
            }
            Instruction::Mask {
                set, row_offset, ..
            } => {
                let point = [
                    x.to_string(),
                    format!("(j + {})", row_offset[0]),
                    format!("(k + {})", row_offset[1]),
                ];
                match &**set {
                    PointSet::Boundary(side) => {
                        let g = self.geometry_at[index];
                        let inside = (0..3)
                            .map(|a| {
                                format!(
                                    "(double)({p}) >= 0.0 & (double)({p}) < g[{}]",
                                    g + 2 + a,
                                    p = point[a]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(" & ");
                        format!(
                            "((g[{g}] != 0.0) & ((double)({}) == g[{}]) & {inside} ? 1.0 : 0.0)",
                            point[side.axis],
                            g + 1
                        )
                    }
                    PointSet::Region(region) => {
                        let inside = (0..3)
                            .map(|a| {
                                format!(
                                    "({p}) >= {}LL & ({p}) < {}LL",
                                    region.lo[a],
                                    region.hi[a],
                                    p = point[a]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(" & ");
                        format!("({inside} ? 1.0 : 0.0)")
                    }
                    PointSet::Points(_) => unreachable!("refused by `unsupported`"),
                }
            }
            Instruction::Uniform { uniform, .. } => format!("uv{uniform}"),
            Instruction::Transfer {
                op,
                slot,
                row_offset,
                ..
            } => {
                let row = transfer_row(*slot, *row_offset);
                match op {
                    StencilOp::Restrict { ratio } => {
                        let mut sum = "0.0".to_string();
                        let mut count = 0usize;
                        for c2 in 0..ratio[2] {
                            for c1 in 0..ratio[1] {
                                for c0 in 0..ratio[0] {
                                    let _ = write!(
                                        sum,
                                        " + {row}[{}LL * ({x}) + {c0} + {c1}LL * {row}_sy + {c2}LL * {row}_sz]",
                                        ratio[0]
                                    );
                                    count += 1;
                                }
                            }
                        }
                        format!("{} * ({sum})", lit(1.0 / count as f64))
                    }
                    StencilOp::Prolongate { ratio } => {
                        let refined: SmallVec<[usize; 3]> =
                            (0..3).filter(|&a| ratio[a] == 2).collect();
                        let parent_x = if ratio[0] == 2 {
                            parent_index(x)
                        } else {
                            format!("({x})")
                        };
                        let mut value = "0.0".to_string();
                        for corner in 0..1usize << refined.len() {
                            let mut weight = 1.0;
                            let mut at = parent_x.clone();
                            for (bit, &axis) in refined.iter().enumerate() {
                                if corner >> bit & 1 == 1 {
                                    let step = match axis {
                                        0 => side_step(x),
                                        1 => format!("{row}_dy"),
                                        _ => format!("{row}_dz"),
                                    };
                                    let _ = write!(at, " + {step}");
                                    weight *= 0.25;
                                } else {
                                    weight *= 0.75;
                                }
                            }
                            let _ = write!(value, " + {} * {row}[{at}]", lit(weight));
                        }
                        format!("({value})")
                    }
                    _ => unreachable!("refused by `unsupported`"),
                }
            }
            Instruction::Limited {
                limiter,
                velocity,
                cells,
                ..
            } => {
                let name = match limiter {
                    Limiter::Minmod => "ws_minmod",
                    Limiter::VanLeer => "ws_vanleer",
                    Limiter::Superbee => "ws_superbee",
                };
                let [m2, m1, p0, p1] = cells.map(|c| self.operand_at(&c, read));
                format!(
                    "ws_limited_{name}({}, {m2}, {m1}, {p0}, {p1})",
                    self.operand_at(velocity, read)
                )
            }
        }
    }
}

/// Helpers every generated translation unit starts with: bit casts,
/// the vector math of [`crate::vmath`] (`ws_exp`, `ws_log`, `ws_sin`, `ws_cos`,
/// `ws_tanh`, `ws_pow`), selections and limiters, in `dialect`.
pub fn prelude(dialect: Dialect) -> String {
    let q = match dialect {
        Dialect::C => "static inline __attribute__((always_inline))",
        Dialect::Cuda => "__device__ __forceinline__",
    };
    let mut text = String::new();
    if dialect == Dialect::C {
        text.push_str("#include <math.h>\n");
    }
    text.push_str(&crate::vmath::source(dialect));
    let _ = write!(
        text,
        "{q} double ws_select(double c, double a, double b) {{ return c != 0.0 ? a : b; }}\n\
{q} double ws_min(double a, double b) {{ return a < b ? a : b; }}\n\
{q} double ws_max(double a, double b) {{ return a > b ? a : b; }}\n\
{q} double ws_minmod(double r) {{ return fmax(fmin(r, 1.0), 0.0); }}\n\
{q} double ws_vanleer(double r) {{ return (r + fabs(r)) / (1.0 + fabs(r)); }}\n\
{q} double ws_superbee(double r) {{ return fmax(fmax(fmin(2.0 * r, 1.0), fmin(r, 2.0)), 0.0); }}\n"
    );
    for name in ["ws_minmod", "ws_vanleer", "ws_superbee"] {
        let _ = write!(
            text,
            "{q} double ws_face_{name}(double uu, double u, double d) {{\n\
    double jump = d - u;\n\
    double r = (u - uu) / jump;\n\
    double value = u + 0.5 * {name}(r) * jump;\n\
    return jump == 0.0 ? u : value;\n\
}}\n\
{q} double ws_limited_{name}(double v, double m2, double m1, double p0, double p1) {{\n\
    double up = ws_face_{name}(m2, m1, p0);\n\
    double down = ws_face_{name}(p1, p0, m1);\n\
    return v >= 0.0 ? up : down;\n\
}}\n"
        );
    }
    text
}

fn emitter(kernel: &Kernel, dialect: Dialect) -> Result<Emitter<'_>, Unsupported> {
    if let Some(reason) = unsupported(kernel) {
        return Err(reason);
    }
    let mut geometry_at = Vec::with_capacity(kernel.instructions.len());
    let mut at = 0;
    for instruction in &kernel.instructions {
        geometry_at.push(at);
        at += geometry_len(instruction);
    }
    Ok(Emitter {
        kernel,
        dialect,
        finite_check: FiniteCheck::Checked,
        geometry_at,
    })
}

fn offset_name(v: isize) -> String {
    if v < 0 {
        format!("m{}", -v)
    } else {
        format!("{v}")
    }
}

/// The name of field `slot`'s row pointer at row offset (dy, dz).
fn row_pointer(slot: u16, dy: isize, dz: isize) -> String {
    format!("F{slot}_{}_{}", offset_name(dy), offset_name(dz))
}

/// The name of the row base of a transfer's source.
fn transfer_pointer(slot: u16, row: [isize; 2]) -> String {
    format!("X{slot}_{}_{}", offset_name(row[0]), offset_name(row[1]))
}

/// Declarations of the row pointer of every (slot, dy, dz) a kernel reads
/// and of every transfer row, for the row `j`, `k` (C) or point (CUDA).
fn row_declarations(kernel: &Kernel, indent: &str) -> String {
    let mut rows: BTreeSet<(u16, isize, isize)> = BTreeSet::new();
    let mut transfers: std::collections::BTreeMap<(u16, [isize; 2]), StencilOp> =
        std::collections::BTreeMap::new();
    for instruction in &kernel.instructions {
        for source in instruction.sources() {
            if let Source::Field { slot, offset } = source {
                rows.insert((slot, offset[1], offset[2]));
            }
        }
        if let Instruction::Transfer {
            op,
            slot,
            row_offset,
            ..
        } = instruction
        {
            transfers.insert((*slot, *row_offset), *op);
        }
    }
    let mut text = String::new();
    for (slot, dy, dz) in rows {
        let _ = writeln!(
            text,
            "{indent}const double *{} = f[{slot}] + (j + {dy}LL) * fs[{}] + (k + {dz}LL) * fs[{}];",
            row_pointer(slot, dy, dz),
            2 * slot,
            2 * slot + 1
        );
    }
    for ((slot, row), op) in transfers {
        let name = transfer_pointer(slot, row);
        let (sy, sz) = (format!("fs[{}]", 2 * slot), format!("fs[{}]", 2 * slot + 1));
        let _ = writeln!(
            text,
            "{indent}const long long {name}_sy = {sy}, {name}_sz = {sz};"
        );
        match op {
            StencilOp::Restrict { ratio } => {
                let _ = writeln!(
                    text,
                    "{indent}const double *{name} = f[{slot}] + {}LL * (j + {}LL) * {sy} + {}LL * (k + {}LL) * {sz};",
                    ratio[1], row[0], ratio[2], row[1]
                );
            }
            StencilOp::Prolongate { ratio } => {
                let coarse = |r: usize, v: String| {
                    if r == 2 {
                        format!("(({v}) >> 1)")
                    } else {
                        format!("({v})")
                    }
                };
                let (y, z) = (format!("j + {}LL", row[0]), format!("k + {}LL", row[1]));
                let _ = writeln!(
                    text,
                    "{indent}const double *{name} = f[{slot}] + {} * {sy} + {} * {sz};",
                    coarse(ratio[1], y.clone()),
                    coarse(ratio[2], z.clone())
                );
                let _ = writeln!(
                    text,
                    "{indent}const long long {name}_dy = (({y}) & 1) ? {sy} : -{sy}, {name}_dz = (({z}) & 1) ? {sz} : -{sz};"
                );
            }
            _ => {}
        }
    }
    text
}

/// The kernel's uniform values ([`Kernel::uniforms`]), one constant each,
/// computed once per call before the loops with the operation
/// [`Kernel::uniform_values`] does (so the interpreter's bits).
fn uniform_prelude(emitter: &Emitter<'_>, indent: &str) -> String {
    let mut text = String::new();
    for (k, uniform) in emitter.kernel.uniforms.iter().enumerate() {
        let value = match *uniform {
            UniformValue::Parameter(slot) => format!("p{slot}"),
            UniformValue::Sum(a, b) => format!("{} + {}", emitter.weight(a), emitter.weight(b)),
            UniformValue::Product(a, b) => {
                format!("{} * {}", emitter.weight(a), emitter.weight(b))
            }
            UniformValue::Quotient(a, b) => {
                format!("{} / {}", emitter.weight(a), emitter.weight(b))
            }
        };
        let _ = writeln!(text, "{indent}const double uv{k} = {value}; (void)uv{k};");
    }
    text
}

/// At most this many uniform conditions are specialised per kernel (each
/// doubles the kernel's loop nests).
const MAX_SWITCHES: usize = 3;

/// Registers whose value is the same at every point: parameters, and
/// point-wise instructions that read only such registers and constants.
fn uniform_registers(kernel: &Kernel) -> Vec<bool> {
    let mut uniform = vec![false; kernel.registers];
    for instruction in &kernel.instructions {
        let out = instruction.out();
        if out == OUTPUT {
            continue;
        }
        let point_wise = matches!(
            instruction,
            Instruction::Linear { .. }
                | Instruction::Unary { .. }
                | Instruction::Binary { .. }
                | Instruction::Select { .. }
                | Instruction::Uniform { .. }
        );
        uniform[out as usize] = point_wise
            && instruction
                .sources()
                .iter()
                .all(|s| source_is_uniform(s, &uniform));
    }
    uniform
}

/// Whether `source` is a uniform register.
fn source_is_uniform(source: &Source, uniform: &[bool]) -> bool {
    match source {
        Source::Register { register, .. } => *register != OUTPUT && uniform[*register as usize],
        Source::Field { .. } => false,
    }
}

/// Whether every source of `operand` is a uniform register (a constant
/// has none).
fn operand_is_uniform(operand: &Operand, uniform: &[bool]) -> bool {
    operand
        .sources()
        .iter()
        .all(|s| source_is_uniform(s, uniform))
}

/// The selections worth specialising: live, with a uniform condition (so
/// every point takes the same branch) and at least one branch that reads
/// something per point (so the other version skips it). Instruction
/// indices, at most [`MAX_SWITCHES`], first first.
fn uniform_switches(kernel: &Kernel, uniform: &[bool]) -> Vec<usize> {
    let live = live_registers(kernel, &HashMap::new());
    kernel
        .instructions
        .iter()
        .enumerate()
        .filter(|(_, instruction)| {
            let out = instruction.out();
            out == OUTPUT || live[out as usize]
        })
        .filter_map(|(i, instruction)| match instruction {
            Instruction::Select {
                condition,
                if_true,
                if_false,
                ..
            } if operand_is_uniform(condition, uniform)
                && !(operand_is_uniform(if_true, uniform)
                    && operand_is_uniform(if_false, uniform)) =>
            {
                Some(i)
            }
            _ => None,
        })
        .take(MAX_SWITCHES)
        .collect()
}

/// The sources instruction `index` reads, given the branches `resolved`
/// fixes (a resolved selection reads only its chosen operand).
fn sources_resolved(
    kernel: &Kernel,
    index: usize,
    resolved: &HashMap<usize, bool>,
) -> SmallVec<[Source; 8]> {
    match (&kernel.instructions[index], resolved.get(&index)) {
        (
            Instruction::Select {
                if_true, if_false, ..
            },
            Some(&holds),
        ) => {
            let chosen = if holds { if_true } else { if_false };
            chosen.sources().into_iter().collect()
        }
        (instruction, _) => instruction.sources(),
    }
}

/// The value of instruction `index` given the branches `resolved` fixes.
fn value_resolved(
    emitter: &Emitter<'_>,
    index: usize,
    resolved: &HashMap<usize, bool>,
    read: &dyn Fn(Source) -> String,
    x: &str,
    transfer_row: &dyn Fn(u16, [isize; 2]) -> String,
) -> String {
    match (&emitter.kernel.instructions[index], resolved.get(&index)) {
        (
            Instruction::Select {
                if_true, if_false, ..
            },
            Some(&holds),
        ) => emitter.operand_at(if holds { if_true } else { if_false }, read),
        _ => emitter.value(index, read, x, transfer_row),
    }
}

/// Declarations of the uniform registers the switches' conditions read
/// (computed once per call) and of one flag per switch, `c0`, `c1`, ...;
/// returns them with the number of versions (`2^switches`).
fn switch_prelude(
    emitter: &Emitter<'_>,
    switches: &[usize],
    uniform: &[bool],
    indent: &str,
) -> String {
    let kernel = emitter.kernel;
    // The uniform registers the conditions need, transitively.
    let mut needed = vec![false; kernel.registers];
    let mark = |sources: SmallVec<[Source; 2]>, needed: &mut Vec<bool>| {
        for s in sources {
            if let Source::Register { register, .. } = s
                && register != OUTPUT
            {
                needed[register as usize] = true;
            }
        }
    };
    for &i in switches {
        if let Instruction::Select { condition, .. } = &kernel.instructions[i] {
            mark(condition.sources(), &mut needed);
        }
    }
    for instruction in kernel.instructions.iter().rev() {
        let out = instruction.out();
        if out != OUTPUT && needed[out as usize] && uniform[out as usize] {
            for s in instruction.sources() {
                if let Source::Register { register, .. } = s
                    && register != OUTPUT
                {
                    needed[register as usize] = true;
                }
            }
        }
    }
    let read = |source: Source| match source {
        Source::Register { register, .. } => format!("u{register}"),
        Source::Field { .. } => "0.0".to_string(), // never: uniform registers read no field
    };
    let no_transfer = |_: u16, _: [isize; 2]| String::new();
    let mut text = String::new();
    for (i, instruction) in kernel.instructions.iter().enumerate() {
        let out = instruction.out();
        if out != OUTPUT && needed[out as usize] {
            let value = emitter.value(i, &read, "0", &no_transfer);
            let _ = writeln!(text, "{indent}const double u{out} = {value};");
        }
    }
    for (n, &i) in switches.iter().enumerate() {
        if let Instruction::Select { condition, .. } = &kernel.instructions[i] {
            let _ = writeln!(
                text,
                "{indent}const int c{n} = {} != 0.0;",
                emitter.operand_at(condition, &read)
            );
        }
    }
    text
}

/// The branches version `case` of `switches` fixes: bit `n` of `case` is
/// the value of switch `n`'s condition.
fn resolution(switches: &[usize], case: usize) -> HashMap<usize, bool> {
    switches
        .iter()
        .enumerate()
        .map(|(n, &i)| (i, case >> n & 1 == 1))
        .collect()
}

/// The C function computing `kernel` over a block (see the module docs).
///
/// Signature: `long long NAME(const double *const *f, const long long *fs,
/// const double *p, const double *g, double *t, long long tsy, long long
/// tsz, double *s, long long width, long long rowcap, long long halo, long
/// long x0, long long x1, long long j0, long long rows, long long k0, long
/// long planes)`: the rows `j0 .. j0 + rows` of each plane `k0 .. k0 +
/// planes`. A kernel whose result goes to the scratch rows (read by the
/// caller after the call) is called with one plane: each plane reuses the
/// rows. It returns 1 when a value it wrote to `t` is not finite (NaN or
/// infinite), else 0; a kernel whose result is not written to `t` returns
/// 0. With [`FiniteCheck::Unchecked`] the loops do not test the values
/// and the function always returns 0: the caller must then treat every
/// block as possibly not finite (`NativeKernel::checks_finite`).
///
/// A selection whose condition is the same at every point (it reads only
/// parameters, e.g. a stage weight `a != 0`) is decided once per call:
/// the function holds one loop nest per combination of such conditions
/// (at most `MAX_SWITCHES`), each without the branch it does not take,
/// so a field only the other branch reads is not streamed.
pub fn c_function(
    kernel: &Kernel,
    name: &str,
    finite_check: FiniteCheck,
) -> Result<String, Unsupported> {
    let mut emitter = emitter(kernel, Dialect::C)?;
    emitter.finite_check = finite_check;
    let uniform = uniform_registers(kernel);
    let switches = uniform_switches(kernel, &uniform);
    let mut body = String::new();
    let _ = writeln!(
        body,
        "long long {name}(const double *const *f, const long long *fs, const double *p, const double *g,\n\
         \x20   double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,\n\
         \x20   long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,\n\
         \x20   long long planes)\n{{"
    );
    let _ = writeln!(
        body,
        "    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;"
    );
    for slot in 0..kernel.parameters.len() {
        let _ = writeln!(body, "    const double p{slot} = p[{slot}];");
    }
    body.push_str(&uniform_prelude(&emitter, "    "));
    let _ = writeln!(
        body,
        "    const long long rl = width * rowcap;\n    (void)rl; (void)halo;\n    unsigned long long bad = 0;"
    );
    if switches.is_empty() {
        body.push_str(&c_row_loops(&emitter, &HashMap::new(), "    "));
    } else {
        body.push_str(&switch_prelude(&emitter, &switches, &uniform, "    "));
        let flags: Vec<String> = (0..switches.len())
            .map(|n| format!("c{n} << {n}"))
            .collect();
        let _ = writeln!(body, "    switch ({}) {{", flags.join(" | "));
        for case in 0..1usize << switches.len() {
            let _ = writeln!(body, "    case {case}: {{");
            body.push_str(&c_row_loops(
                &emitter,
                &resolution(&switches, case),
                "        ",
            ));
            let _ = writeln!(body, "        break;\n    }}");
        }
        let _ = writeln!(body, "    }}");
    }
    // `bad` has a bit set once an infinity or a NaN was written; see the
    // test in `c_row_loops`.
    let _ = writeln!(body, "    return bad != 0;\n}}");
    Ok(body)
}

/// The loop nest over the block's rows, with the branches `resolved`
/// fixes; values written to `T` that are not finite set `bad`.
fn c_row_loops(emitter: &Emitter<'_>, resolved: &HashMap<usize, bool>, indent: &str) -> String {
    let kernel = emitter.kernel;
    let live = live_registers(kernel, resolved);
    let n = kernel.instructions.len();
    let range = |out: Register| {
        if out == OUTPUT {
            (0, 0)
        } else {
            kernel.extensions[out as usize]
        }
    };
    // Loop groups: consecutive live instructions over one range, whose
    // register reads from the same group are all at shift 0.
    let mut group_of = vec![usize::MAX; n];
    let mut groups: Vec<(isize, isize, Vec<usize>)> = Vec::new();
    for (i, instruction) in kernel.instructions.iter().enumerate() {
        let out = instruction.out();
        if out != OUTPUT && !live[out as usize] {
            continue;
        }
        let ext = range(out);
        let joins = groups.last().is_some_and(|(lo, hi, members)| {
            (*lo, *hi) == ext
                && sources_resolved(kernel, i, resolved)
                    .iter()
                    .all(|s| match s {
                        Source::Register { register, shift } => {
                            *shift == 0
                                || !members
                                    .iter()
                                    .any(|&m| kernel.instructions[m].out() == *register)
                        }
                        Source::Field { .. } => true,
                    })
        });
        if !joins {
            groups.push((ext.0, ext.1, Vec::new()));
        }
        let g = groups.len() - 1;
        groups[g].2.push(i);
        group_of[i] = g;
    }
    // A register is stored in scratch when read at a shift, from another
    // group, or as the result.
    let mut writer: HashMap<Register, usize> = HashMap::new();
    for (i, instruction) in kernel.instructions.iter().enumerate() {
        if group_of[i] != usize::MAX && instruction.out() != OUTPUT {
            writer.insert(instruction.out(), i);
        }
    }
    let mut stored = vec![false; kernel.registers];
    if kernel.result != OUTPUT && (kernel.result as usize) < stored.len() {
        stored[kernel.result as usize] = true;
    }
    for i in 0..n {
        if group_of[i] == usize::MAX {
            continue;
        }
        for source in sources_resolved(kernel, i, resolved) {
            if let Source::Register { register, shift } = source
                && register != OUTPUT
            {
                let same_group = writer
                    .get(&register)
                    .is_some_and(|&w| group_of[w] == group_of[i]);
                if shift != 0 || !same_group {
                    stored[register as usize] = true;
                }
            }
        }
    }

    let mut body = String::new();
    let _ = writeln!(
        body,
        "{indent}for (long long k = k0; k < k0 + planes; ++k)\n{indent}for (long long r = 0; r < rows; ++r) {{\n{indent}    const long long j = j0 + r;"
    );
    let inner = format!("{indent}    ");
    body.push_str(&row_declarations(kernel, &inner));
    let _ = writeln!(body, "{inner}double *T = t + j * tsy + k * tsz; (void)T;");
    for (register, _) in stored.iter().enumerate().filter(|(_, s)| **s) {
        let _ = writeln!(
            body,
            "{inner}double *R{register} = s + {register}LL * rl + r * width + halo - x0;"
        );
    }
    for (group, (lo, hi, members)) in groups.iter().enumerate() {
        // The statements of one point `x`, for whichever loop runs them.
        let mut statements = String::new();
        for &i in members {
            let read = |source: Source| -> String {
                match source {
                    Source::Field { slot, offset } => {
                        format!(
                            "{}[x + {}LL]",
                            row_pointer(slot, offset[1], offset[2]),
                            offset[0]
                        )
                    }
                    Source::Register { register, shift } => {
                        let in_group = writer.get(&register).is_some_and(|&w| group_of[w] == group);
                        if in_group && shift == 0 {
                            format!("r{register}")
                        } else {
                            format!("R{register}[x + {shift}LL]")
                        }
                    }
                }
            };
            let transfer_row = |slot: u16, row: [isize; 2]| transfer_pointer(slot, row);
            let value = value_resolved(emitter, i, resolved, &read, "x", &transfer_row);
            let out = kernel.instructions[i].out();
            if out == OUTPUT {
                // `v - v` is +0.0 (no bit set) for every finite `v` and NaN
                // for an infinity or a NaN: a subtraction and an OR a
                // vector. gcc keeps the subtraction because NaN and the
                // infinities are honoured (`compile::forbidden_flag` refuses
                // the flags that would let it fold `v - v` to 0).
                let _ = writeln!(
                    statements,
                    "{inner}    const double v = {value};\n{inner}    T[x] = v;"
                );
                if emitter.finite_check == FiniteCheck::Checked {
                    let _ = writeln!(statements, "{inner}    bad |= ws_to_bits(v - v);");
                }
            } else {
                let _ = writeln!(statements, "{inner}    const double r{out} = {value};");
                if stored[out as usize] {
                    let _ = writeln!(statements, "{inner}    R{out}[x] = r{out};");
                }
            }
        }
        if members
            .iter()
            .any(|&i| prolongates_along_x(&kernel.instructions[i]))
        {
            body.push_str(&parity_split_loop(&inner, *lo, *hi, &statements));
        } else {
            let _ = writeln!(
                body,
                "#pragma GCC ivdep\n{inner}for (long long x = x0 + {lo}LL; x < x1 + {hi}LL; ++x) {{\n{statements}{inner}}}"
            );
        }
    }
    let _ = writeln!(body, "{indent}}}");
    body
}

/// True for a prolongation that refines x: its parent index `x >> 1` and
/// neighbour side `x & 1` vary point by point, which keeps a plain x loop
/// from vectorising (a gather per point).
fn prolongates_along_x(instruction: &Instruction) -> bool {
    matches!(
        instruction,
        Instruction::Transfer {
            op: StencilOp::Prolongate { ratio },
            ..
        } if ratio[0] == 2
    )
}

/// The coarse x index of fine point `x` in a prolongation along x.
fn parent_index(x: &str) -> String {
    format!("(({x}) >> 1)")
}

/// The step from the parent to the coarse neighbour on fine point `x`'s
/// side (-1 for an even `x`, +1 for an odd one).
fn side_step(x: &str) -> String {
    format!("((({x}) & 1) ? 1LL : -1LL)")
}

/// `statements` for the fine point `2i + parity`: the parent index and
/// side step of prolongations at `x` written as `i` and `-1` or `+1`. gcc
/// does not fold `(2i) >> 1` to `i` by itself, and then loads the coarse
/// values one by one (measured: 4x slower than with `i`, 128^2 points);
/// the indices are the same numbers, so the values are the same bits.
fn with_parity(statements: &str, parity: u8) -> String {
    let step = if parity == 0 { "(-1LL)" } else { "(1LL)" };
    statements
        .replace(&side_step("x"), step)
        .replace(&parent_index("x"), "i")
}

/// The x loop of `statements` (which read the point index as `x`) over
/// `x0 + lo .. x1 + hi`, as a loop over pairs of points `2i, 2i + 1`, each
/// with its own constant `x` and its prolongation indices written in `i`
/// ([`with_parity`]), so the pair's reads of the coarse field are
/// contiguous in `i` and the loop vectorises. A leading odd point and a
/// trailing single point run alone. Every point runs the same arithmetic
/// on the same values as in a plain loop, so the results are the same bits.
fn parity_split_loop(inner: &str, lo: isize, hi: isize, statements: &str) -> String {
    let even = with_parity(statements, 0);
    let odd = with_parity(statements, 1);
    format!(
        "{inner}{{\n\
         {inner}    long long x = x0 + {lo}LL;\n\
         {inner}    const long long x_end = x1 + {hi}LL;\n\
         {inner}    if (x < x_end && (x & 1)) {{\n{statements}{inner}        ++x;\n{inner}    }}\n\
         {inner}    const long long pairs = x < x_end ? (x_end - x) / 2 : 0;\n\
         {inner}    const long long i0 = x >> 1;\n\
         #pragma GCC ivdep\n\
         {inner}    for (long long i = i0; i < i0 + pairs; ++i) {{\n\
         {inner}        {{ const long long x = 2LL * i;\n{even}{inner}        }}\n\
         {inner}        {{ const long long x = 2LL * i + 1LL;\n{odd}{inner}        }}\n\
         {inner}    }}\n\
         {inner}    x += 2 * pairs;\n\
         {inner}    if (x < x_end) {{\n{statements}{inner}    }}\n\
         {inner}}}\n"
    )
}

/// The CUDA C kernel computing `kernel` at one point per thread (see the
/// module docs).
///
/// Signature: `extern "C" __global__ void NAME(const struct NAME_args a,
/// double *t, long long tsy, long long tsz, long long x0, long long x1,
/// long long j0, long long j1, long long k0, long long k1)`, where the
/// struct, passed by value, holds the fields' pointers and strides, the
/// parameters and the geometry ([`cuda_arguments`],
/// [`super::launch::CudaArguments`]); the result goes to `t`. A kernel
/// whose arguments would exceed CUDA's 4096 bytes is unsupported.
pub fn cuda_function(kernel: &Kernel, name: &str) -> Result<String, Unsupported> {
    cuda_assignment(kernel, name, false)
}

/// The offset added to a point's storage key so that every key is
/// positive ([`cuda_checked_function`]).
pub const FINITE_KEY_OFFSET: i64 = 1 << 62;

/// [`cuda_function`] that also watches what it writes: a thread whose
/// value is not finite (NaN or infinite) lowers `*bad` (`atomicMin`) to
/// its point's storage key `x + j * tsy + k * tsz +`
/// [`FINITE_KEY_OFFSET`], so after the kernel `*bad` holds the first such
/// point in storage order (z, then y, then x), as the CPU's check reports
/// it, or its initial value (all bits set) when every value was finite.
/// Signature: [`cuda_function`]'s with `unsigned long long *bad` last.
pub fn cuda_checked_function(kernel: &Kernel, name: &str) -> Result<String, Unsupported> {
    cuda_assignment(kernel, name, true)
}

/// The assignment kernel, watching for values that are not finite when
/// `checked`.
fn cuda_assignment(kernel: &Kernel, name: &str, checked: bool) -> Result<String, Unsupported> {
    let emitter = emitter(kernel, Dialect::Cuda)?;
    let arguments = checked_cuda_arguments(kernel)?;
    let mut body = String::new();
    let watch = if checked {
        ", unsigned long long *bad"
    } else {
        ""
    };
    let _ = writeln!(
        body,
        "{}\nextern \"C\" __global__ void {name}(const struct {name}_args a, double *t, long long tsy,\n\
         \x20   long long tsz, long long x0, long long x1, long long j0, long long j1, long long k0,\n\
         \x20   long long k1{watch})\n{{\n\
         \x20   const long long x = x0 + (long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   const long long j = j0 + (long long)blockIdx.y * blockDim.y + threadIdx.y;\n\
         \x20   const long long k = k0 + (long long)blockIdx.z * blockDim.z + threadIdx.z;\n\
         \x20   if (x >= x1 || j >= j1 || k >= k1) return;",
        arguments.declaration(&format!("{name}_args"))
    );
    body.push_str(&cuda_point_body(kernel, &emitter, |value| {
        if checked {
            // `v - v` is 0 for every finite value and NaN otherwise (no
            // fast math: NVRTC keeps IEEE semantics).
            format!(
                "const double ws_value = {value};\n    t[x + j * tsy + k * tsz] = ws_value;\n    \
                 if (!(ws_value - ws_value == 0.0))\n        \
                 atomicMin(bad, (unsigned long long)(x + j * tsy + k * tsz + {FINITE_KEY_OFFSET}LL));"
            )
        } else {
            format!("t[x + j * tsy + k * tsz] = {value};")
        }
    })?);
    let _ = writeln!(body, "}}");
    Ok(body)
}

/// The CUDA C of a fill sequence: the masked assignments `kernels` (each
/// writing the target from its own fields) run in order by one block of
/// threads, with a barrier between them, as one launch instead of one
/// launch each. Later ones may read what earlier ones wrote (a corner
/// filled from an edge), which the barrier orders. Each is a device
/// function `{name}_m{i}` of the point; the kernel `{name}` takes one
/// struct, `{name}_args`, holding each one's argument struct `m{i}` and
/// then `long long boxes[6 n]` (`x0, x1, j0, j1, k0, k1` per assignment),
/// and then `double *t, long long tsy, long long tsz`. The kernel is
/// correct for any number of threads in its one block.
pub fn cuda_sequence_function(kernels: &[&Kernel], name: &str) -> Result<String, Unsupported> {
    let mut text = String::new();
    let mut members = String::new();
    for (i, kernel) in kernels.iter().enumerate() {
        let emitter = emitter(kernel, Dialect::Cuda)?;
        let arguments = checked_cuda_arguments(kernel)?;
        let part = format!("{name}_m{i}");
        let _ = writeln!(text, "{}", arguments.declaration(&format!("{part}_args")));
        let _ = writeln!(
            text,
            "__device__ __forceinline__ void {part}(const struct {part}_args &a, double *t,"
        );
        let _ = writeln!(
            text,
            "    long long tsy, long long tsz, long long x, long long j, long long k)\n{{"
        );
        text.push_str(&cuda_point_body(kernel, &emitter, |value| {
            format!("t[x + j * tsy + k * tsz] = {value};")
        })?);
        let _ = writeln!(text, "}}");
        let _ = write!(members, " struct {part}_args m{i};");
    }
    let boxes = 6 * kernels.len().max(1);
    let _ = writeln!(
        text,
        "struct {name}_args {{{members} long long boxes[{boxes}]; }};"
    );
    let _ = writeln!(
        text,
        "extern \"C\" __global__ void {name}(const struct {name}_args a, double *t, long long tsy,"
    );
    let _ = writeln!(text, "    long long tsz)\n{{");
    for i in 0..kernels.len() {
        let lines = [
            "    {".to_string(),
            format!("        const long long *b = a.boxes + {};", 6 * i),
            "        const long long nx = b[1] - b[0], ny = b[3] - b[2];".to_string(),
            "        const long long points = nx * ny * (b[5] - b[4]);".to_string(),
            "        for (long long q = threadIdx.x; q < points; q += blockDim.x) {".to_string(),
            "            const long long x = b[0] + q % nx, j = b[2] + (q / nx) % ny;".to_string(),
            "            const long long k = b[4] + q / (nx * ny);".to_string(),
            format!("            {name}_m{i}(a.m{i}, t, tsy, tsz, x, j, k);"),
            "        }".to_string(),
            "    }".to_string(),
            "    __syncthreads();".to_string(),
        ];
        for line in lines {
            let _ = writeln!(text, "{line}");
        }
    }
    let _ = writeln!(text, "}}");
    Ok(text)
}

/// The CUDA C reduction of `kernel`'s result over a box, one thread per
/// row, in exactly the CPU's order (`crate::cpu::reduce`): along x,
/// blocks of [`crate::vocabulary::TILE`] points from the box's start; in a
/// block, eight interleaved accumulators (point `p` into lane `p mod 8`)
/// merged pairwise; blocks merged into the row in x order. Each thread
/// writes its row's partial result; the host folds the partials in row
/// order ((k, j), as the CPU does), so the result equals the CPU's bit
/// for bit wherever the point values do (no contraction on either side).
///
/// Signature: `extern "C" __global__ void NAME(const struct NAME_args a,
/// double *partials, long long x0, long long x1, long long j0, long long
/// j1, long long k0, long long k1)`, launched with at least
/// `(j1 - j0) * (k1 - k0)` threads along x; row `r` is `j = j0 + r mod
/// (j1 - j0)`, `k = k0 + r / (j1 - j0)`.
pub fn cuda_reduction_function(
    kernel: &Kernel,
    name: &str,
    reduction: crate::vocabulary::Reduction,
) -> Result<String, Unsupported> {
    use crate::vocabulary::Reduction;
    let emitter = emitter(kernel, Dialect::Cuda)?;
    let arguments = checked_cuda_arguments(kernel)?;
    let identity = match reduction {
        Reduction::Sum | Reduction::SumOfSquares => "0.0",
        Reduction::Min => "__longlong_as_double(0x7ff0000000000000LL)",
        Reduction::Max => "__longlong_as_double((long long)0xfff0000000000000ULL)",
    };
    // The CPU's `Reduction::combine` and `Reduction::merge`, NaN rules
    // included (a NaN, once met, is kept).
    let (combine, merge) = match reduction {
        Reduction::Sum => ("return a + v;", "return a + b;"),
        Reduction::SumOfSquares => ("return a + v * v;", "return a + b;"),
        Reduction::Min => (
            "if (v < a || v != v || a != a) return a != a ? a : v; return a;",
            "if (b < a || b != b || a != a) return a != a ? a : b; return a;",
        ),
        Reduction::Max => (
            "if (v > a || v != v || a != a) return a != a ? a : v; return a;",
            "if (b > a || b != b || a != a) return a != a ? a : b; return a;",
        ),
    };
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{}\n__device__ __forceinline__ double {name}_at(const struct {name}_args &a, const long long x,\n\
         \x20   const long long j, const long long k)\n{{",
        arguments.declaration(&format!("{name}_args"))
    );
    text.push_str(&cuda_point_body(kernel, &emitter, |value| {
        format!("return {value};")
    })?);
    let _ = writeln!(
        text,
        "}}\n\
         __device__ __forceinline__ double {name}_combine(const double a, const double v) {{ {combine} }}\n\
         __device__ __forceinline__ double {name}_merge(const double a, const double b) {{ {merge} }}\n\
         extern \"C\" __global__ void {name}(const struct {name}_args a, double *partials, long long x0,\n\
         \x20   long long x1, long long j0, long long j1, long long k0, long long k1)\n{{\n\
         \x20   const long long ny = j1 - j0;\n\
         \x20   const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (ny <= 0 || row >= ny * (k1 - k0)) return;\n\
         \x20   const long long j = j0 + row % ny;\n\
         \x20   const long long k = k0 + row / ny;\n\
         \x20   double total = {identity};\n\
         \x20   for (long long b0 = x0; b0 < x1; b0 += {tile}LL) {{\n\
         \x20       const long long b1 = b0 + {tile}LL < x1 ? b0 + {tile}LL : x1;\n\
         \x20       double lane[8];\n\
         \x20       for (int l = 0; l < 8; ++l) lane[l] = {identity};\n\
         \x20       for (long long x = b0; x < b1; ++x) {{\n\
         \x20           const int l = (int)((x - b0) & 7);\n\
         \x20           lane[l] = {name}_combine(lane[l], {name}_at(a, x, j, k));\n\
         \x20       }}\n\
         \x20       for (int w = 4; w >= 1; w /= 2)\n\
         \x20           for (int l = 0; l < w; ++l) lane[l] = {name}_merge(lane[2 * l], lane[2 * l + 1]);\n\
         \x20       total = {name}_merge(total, lane[0]);\n\
         \x20   }}\n\
         \x20   partials[row] = total;\n\
         }}",
        tile = crate::vocabulary::TILE,
    );
    Ok(text)
}

/// `kernel`'s argument struct, refused when it exceeds CUDA's limit on a
/// launch's parameters.
fn checked_cuda_arguments(kernel: &Kernel) -> Result<super::launch::CudaArguments, Unsupported> {
    let arguments = cuda_arguments(kernel);
    if arguments.total_bytes() > super::launch::MAX_ARGUMENT_BYTES {
        return Err(Unsupported(format!(
            "its {} bytes of kernel arguments ({} fields, {} parameters, {} geometry numbers) exceed CUDA's {}",
            arguments.total_bytes(),
            arguments.fields,
            arguments.parameters,
            arguments.geometry,
            super::launch::MAX_ARGUMENT_BYTES
        )));
    }
    Ok(arguments)
}

/// The statements of one thread computing `kernel`'s result at the point
/// `(x, j, k)` (names in scope: `a`, `x`, `j`, `k`), ending with
/// `finish(value)`: a store or a return.
fn cuda_point_body(
    kernel: &Kernel,
    emitter: &Emitter<'_>,
    finish: impl Fn(&str) -> String,
) -> Result<String, Unsupported> {
    // Which (register, shift) pairs are needed, from the result backwards.
    let mut needed: Vec<BTreeSet<isize>> = vec![BTreeSet::new(); kernel.registers];
    let result_index = kernel
        .instructions
        .iter()
        .rposition(|i| i.out() == kernel.result)
        .ok_or_else(|| Unsupported("the kernel computes no result".to_string()))?;
    if kernel.result != OUTPUT {
        needed[kernel.result as usize].insert(0);
    }
    let mut writer: HashMap<Register, usize> = HashMap::new();
    for (i, instruction) in kernel.instructions.iter().enumerate() {
        writer.insert(instruction.out(), i);
    }
    for (i, instruction) in kernel.instructions.iter().enumerate().rev() {
        let out = instruction.out();
        let shifts: Vec<isize> = if i == result_index {
            vec![0]
        } else if out == OUTPUT {
            Vec::new()
        } else {
            needed[out as usize].iter().copied().collect()
        };
        for shift in shifts {
            for source in instruction.sources() {
                if let Source::Register {
                    register,
                    shift: by,
                } = source
                    && register != OUTPUT
                {
                    needed[register as usize].insert(shift + by);
                }
            }
        }
    }
    let mut body = String::from(
        "    const double *const *f = a.f; const long long *fs = a.fs;\n    const double *p = a.p; const double *g = a.g;\n    (void)f; (void)g; (void)p; (void)fs;\n",
    );
    for slot in 0..kernel.parameters.len() {
        let _ = writeln!(body, "    const double p{slot} = p[{slot}];");
    }
    body.push_str(&uniform_prelude(emitter, "    "));
    body.push_str(&row_declarations(kernel, "    "));
    let ssa = |register: Register, shift: isize| format!("r{register}_{}", offset_name(shift));
    for (i, instruction) in kernel.instructions.iter().enumerate() {
        let out = instruction.out();
        let shifts: Vec<isize> = if i == result_index {
            vec![0]
        } else if out == OUTPUT {
            continue;
        } else {
            needed[out as usize].iter().copied().collect()
        };
        for shift in shifts {
            let read = |source: Source| -> String {
                match source {
                    Source::Field { slot, offset } => format!(
                        "{}[x + {}LL]",
                        row_pointer(slot, offset[1], offset[2]),
                        offset[0] + shift
                    ),
                    Source::Register {
                        register,
                        shift: by,
                    } => ssa(register, shift + by),
                }
            };
            let x = if shift == 0 {
                "x".to_string()
            } else {
                format!("(x + {shift}LL)")
            };
            let transfer_row = |slot: u16, row: [isize; 2]| transfer_pointer(slot, row);
            let value = emitter.value(i, &read, &x, &transfer_row);
            if i == result_index {
                let _ = writeln!(body, "    {}", finish(&value));
            } else {
                let _ = writeln!(body, "    const double {} = {value};", ssa(out, shift));
            }
        }
    }
    Ok(body)
}
