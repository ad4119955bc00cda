//! The CPU evaluator: runs a [`Kernel`] over the rows of a region, serially
//! or on rayon threads.
//!
//! The region's rows (fixed y, z) are split into contiguous chunks; each
//! chunk runs on one thread with its own small register file (a few
//! kilobytes: no full-size temporaries). Within a row, x is processed in
//! tiles of at most [`TILE`] points. Every point is computed by the same
//! instructions in the same order whatever the chunking, so results are
//! bitwise identical for any number of threads; reductions combine per-row
//! partial results in row order for the same reason.

use crate::kernel::{Instruction, Kernel, LinearForm, OUTPUT, Operand, Register, Source};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::{FieldLayout, IndexBox, LocationKind, Patch};

/// Largest number of x points processed per instruction call.
pub const TILE: usize = 512;

/// How an evaluation uses threads (a value, not a flag: see faer's `Par`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parallelism {
    /// One thread, the caller's.
    Serial,
    /// The current rayon pool (the global one, or the pool an enclosing
    /// scheduler installed): nested parallelism without oversubscription.
    #[default]
    Rayon,
    /// A dedicated pool of this many threads (cached per thread count).
    Threads(usize),
}

impl Parallelism {
    /// Runs `work` with the threads this value names, passing the thread count.
    pub(crate) fn run<R: Send>(self, work: impl FnOnce(usize) -> R + Send) -> R {
        match self {
            Parallelism::Serial => work(1),
            Parallelism::Rayon => work(rayon::current_num_threads()),
            Parallelism::Threads(n) if n <= 1 => work(1),
            Parallelism::Threads(n) => {
                static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> =
                    OnceLock::new();
                let pool = {
                    let mut pools = POOLS
                        .get_or_init(Default::default)
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    pools
                        .entry(n)
                        .or_insert_with(|| {
                            Arc::new(
                                rayon::ThreadPoolBuilder::new()
                                    .num_threads(n)
                                    .thread_name(move |i| format!("watershed-eval-{n}-{i}"))
                                    .build()
                                    .expect("building a thread pool only fails when threads cannot be spawned"),
                            )
                        })
                        .clone()
                };
                pool.install(|| work(n))
            }
        }
    }
}

/// A field's data with its indexing.
#[derive(Clone, Copy)]
pub(crate) struct FieldData<'a> {
    pub data: &'a [f64],
    /// Linear index of point (0, 0, 0).
    pub origin: isize,
    pub strides: [isize; 3],
}

impl<'a> FieldData<'a> {
    pub fn new(data: &'a [f64], layout: &FieldLayout) -> Self {
        FieldData {
            data,
            origin: layout.linear_index([0; 3]) as isize,
            strides: layout.strides().map(|s| s as isize),
        }
    }
}

/// The target's memory, written row by row from several threads.
#[derive(Clone, Copy)]
pub(crate) struct TargetData {
    pub pointer: *mut f64,
    pub len: usize,
    pub origin: isize,
    pub strides: [isize; 3],
}

// SAFETY: threads write disjoint rows of the target (each row belongs to
// exactly one chunk), and nothing reads it during the evaluation.
unsafe impl Send for TargetData {}
// SAFETY: as above.
unsafe impl Sync for TargetData {}

/// What a reduction accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// Sum of the values.
    Sum,
    /// Smallest value (NaN if any value is NaN).
    Min,
    /// Largest value (NaN if any value is NaN).
    Max,
    /// Sum of the squares (the L2 norm is its square root).
    SumOfSquares,
}

impl Reduction {
    fn identity(self) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumOfSquares => 0.0,
            Reduction::Min => f64::INFINITY,
            Reduction::Max => f64::NEG_INFINITY,
        }
    }

    #[inline]
    fn combine(self, accumulator: f64, value: f64) -> f64 {
        match self {
            Reduction::Sum => accumulator + value,
            Reduction::SumOfSquares => accumulator + value * value,
            Reduction::Min => {
                if value < accumulator || value.is_nan() || accumulator.is_nan() {
                    if accumulator.is_nan() {
                        accumulator
                    } else {
                        value
                    }
                } else {
                    accumulator
                }
            }
            Reduction::Max => {
                if value > accumulator || value.is_nan() || accumulator.is_nan() {
                    if accumulator.is_nan() {
                        accumulator
                    } else {
                        value
                    }
                } else {
                    accumulator
                }
            }
        }
    }

    /// Combines two partial results.
    pub(crate) fn merge(self, a: f64, b: f64) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumOfSquares => a + b,
            _ => self.combine(a, b),
        }
    }
}

/// Everything a tile needs, shared by all threads.
struct Context<'a> {
    kernel: &'a Kernel,
    fields: &'a [FieldData<'a>],
    layouts: HashMap<LocationKind, FieldLayout>,
    width: usize,
    halo: isize,
}

/// A value source resolved to memory for one instruction call.
#[derive(Clone, Copy)]
enum Resolved<'s> {
    Constant(f64),
    One(&'s [f64], f64),
    Two(&'s [f64], f64, &'s [f64], f64),
}

impl Resolved<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> f64 {
        match *self {
            Resolved::Constant(c) => c,
            Resolved::One(s, w) => w * s[i],
            Resolved::Two(s0, w0, s1, w1) => w0 * s0[i] + w1 * s1[i],
        }
    }
}

#[inline(always)]
fn map1(out: &mut [f64], a: Resolved<'_>, f: impl Fn(f64) -> f64) {
    match a {
        Resolved::Constant(c) => out.fill(f(c)),
        Resolved::One(s, w) => {
            for (o, &x) in out.iter_mut().zip(s) {
                *o = f(w * x);
            }
        }
        Resolved::Two(s0, w0, s1, w1) => {
            for ((o, &x), &y) in out.iter_mut().zip(s0).zip(s1) {
                *o = f(w0 * x + w1 * y);
            }
        }
    }
}

#[inline(always)]
fn map2(out: &mut [f64], a: Resolved<'_>, b: Resolved<'_>, f: impl Fn(f64, f64) -> f64) {
    use Resolved::*;
    match (a, b) {
        (Constant(x), Constant(y)) => out.fill(f(x, y)),
        (Constant(x), One(s, w)) => {
            for (o, &v) in out.iter_mut().zip(s) {
                *o = f(x, w * v);
            }
        }
        (One(s, w), Constant(y)) => {
            for (o, &v) in out.iter_mut().zip(s) {
                *o = f(w * v, y);
            }
        }
        (One(s, w), One(t, u)) => {
            for ((o, &v), &z) in out.iter_mut().zip(s).zip(t) {
                *o = f(w * v, u * z);
            }
        }
        (Two(s0, w0, s1, w1), One(t, u)) => {
            for (((o, &a0), &a1), &z) in out.iter_mut().zip(s0).zip(s1).zip(t) {
                *o = f(w0 * a0 + w1 * a1, u * z);
            }
        }
        (One(t, u), Two(s0, w0, s1, w1)) => {
            for (((o, &a0), &a1), &z) in out.iter_mut().zip(s0).zip(s1).zip(t) {
                *o = f(u * z, w0 * a0 + w1 * a1);
            }
        }
        (Two(s0, w0, s1, w1), Two(t0, u0, t1, u1)) => {
            for ((((o, &a0), &a1), &b0), &b1) in out.iter_mut().zip(s0).zip(s1).zip(t0).zip(t1) {
                *o = f(w0 * a0 + w1 * a1, u0 * b0 + u1 * b1);
            }
        }
        (a, b) => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a.at(i), b.at(i));
            }
        }
    }
}

macro_rules! dispatch_binary {
    ($op:expr, $out:expr, $a:expr, $b:expr) => {{
        use crate::pointwise::BinaryOp as B;
        match $op {
            B::Add => map2($out, $a, $b, |x, y| x + y),
            B::Subtract => map2($out, $a, $b, |x, y| x - y),
            B::Multiply => map2($out, $a, $b, |x, y| x * y),
            B::Divide => map2($out, $a, $b, |x, y| x / y),
            op => map2($out, $a, $b, |x, y| op.apply(x, y)),
        }
    }};
}

macro_rules! dispatch_unary {
    ($op:expr, $out:expr, $a:expr) => {{
        use crate::pointwise::UnaryOp as U;
        match $op {
            U::Negate => map1($out, $a, |x| -x),
            U::Exp => map1($out, $a, f64::exp),
            U::Sqrt => map1($out, $a, f64::sqrt),
            U::Abs => map1($out, $a, f64::abs),
            op => map1($out, $a, |x| op.apply(x)),
        }
    }};
}

/// `out = form` with terms summed left to right, up to four per pass.
fn linear(out: &mut [f64], form: &LinearForm, mut slice: impl FnMut(Source) -> *const f64) {
    let n = out.len();
    // SAFETY (for every `from_raw_parts` below): `slice` returns a pointer to
    // at least `n` readable values that do not overlap `out`.
    let get = |p: *const f64| unsafe { std::slice::from_raw_parts(p, n) };
    let terms = &form.terms;
    if terms.is_empty() {
        out.fill(form.constant);
        return;
    }
    let mut done = 0;
    let first = terms.len().min(4);
    let c = form.constant;
    match &terms[..first] {
        [(s0, w0)] => {
            let a = get(slice(*s0));
            if c == 0.0 {
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = w0 * x;
                }
            } else {
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = c + w0 * x;
                }
            }
        }
        [(s0, w0), (s1, w1)] => {
            let (a, b) = (get(slice(*s0)), get(slice(*s1)));
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = c + w0 * x + w1 * y;
            }
        }
        [(s0, w0), (s1, w1), (s2, w2)] => {
            let (a, b, d) = (get(slice(*s0)), get(slice(*s1)), get(slice(*s2)));
            for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(d) {
                *o = c + w0 * x + w1 * y + w2 * z;
            }
        }
        [(s0, w0), (s1, w1), (s2, w2), (s3, w3)] => {
            let (a, b, d, e) = (
                get(slice(*s0)),
                get(slice(*s1)),
                get(slice(*s2)),
                get(slice(*s3)),
            );
            for ((((o, &x), &y), &z), &v) in out.iter_mut().zip(a).zip(b).zip(d).zip(e) {
                *o = c + w0 * x + w1 * y + w2 * z + w3 * v;
            }
        }
        _ => unreachable!("at most four terms per pass"),
    }
    done += first;
    while done < terms.len() {
        let count = (terms.len() - done).min(3);
        match &terms[done..done + count] {
            [(s0, w0)] => {
                let a = get(slice(*s0));
                for (o, &x) in out.iter_mut().zip(a) {
                    *o += w0 * x;
                }
            }
            [(s0, w0), (s1, w1)] => {
                let (a, b) = (get(slice(*s0)), get(slice(*s1)));
                for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                    *o = *o + w0 * x + w1 * y;
                }
            }
            [(s0, w0), (s1, w1), (s2, w2)] => {
                let (a, b, d) = (get(slice(*s0)), get(slice(*s1)), get(slice(*s2)));
                for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(d) {
                    *o = *o + w0 * x + w1 * y + w2 * z;
                }
            }
            _ => unreachable!("at most three terms per pass"),
        }
        done += count;
    }
}

impl Context<'_> {
    /// Runs the kernel on the row (j, k) for x in `x0..x1`.
    fn tile(
        &self,
        scratch: &mut [f64],
        target: Option<&TargetData>,
        j: isize,
        k: isize,
        x0: isize,
        x1: isize,
    ) {
        let kernel = self.kernel;
        let width = self.width as isize;
        let base = scratch.as_mut_ptr();
        let scratch_len = scratch.len() as isize;
        for instruction in &kernel.instructions {
            let out_register = instruction.out();
            let (lo, hi) = if out_register == OUTPUT {
                (0, 0)
            } else {
                kernel.extensions[out_register as usize]
            };
            let start = x0 + lo;
            let n = (x1 + hi - start) as usize;
            let source_pointer = |source: Source| -> *const f64 {
                match source {
                    Source::Field { slot, offset } => {
                        let f = &self.fields[slot as usize];
                        let at = f.origin
                            + (start + offset[0])
                            + (j + offset[1]) * f.strides[1]
                            + (k + offset[2]) * f.strides[2];
                        // Bounds-checked: a read outside the field panics
                        // instead of reading foreign memory (the region
                        // check makes this unreachable).
                        f.data[at as usize..at as usize + n].as_ptr()
                    }
                    Source::Register { register, shift } => {
                        let at = register as isize * width + (start + shift - x0 + self.halo);
                        assert!(
                            at >= 0 && at + n as isize <= scratch_len,
                            "register read outside its row"
                        );
                        // SAFETY: in bounds of `scratch` (checked above).
                        unsafe { base.offset(at) as *const f64 }
                    }
                }
            };
            let resolve = |operand: &Operand| -> Resolved<'_> {
                // SAFETY: pointers from `source_pointer` cover `n` values;
                // registers read are never the one being written (each
                // register is written by exactly one instruction, before any
                // reader), and fields never overlap the target (aliasing is
                // refused before evaluation).
                let get = |s: Source| unsafe { std::slice::from_raw_parts(source_pointer(s), n) };
                match *operand {
                    Operand::Constant(c) => Resolved::Constant(c),
                    Operand::One(s, w) => Resolved::One(get(s), w),
                    Operand::Two(s0, w0, s1, w1) => Resolved::Two(get(s0), w0, get(s1), w1),
                }
            };
            // SAFETY: the output is either this thread's row of the target or
            // this instruction's own register, disjoint from every input.
            let out: &mut [f64] = unsafe {
                if out_register == OUTPUT {
                    let t = target.expect("kernels writing the target run with one");
                    let at = t.origin + start + j * t.strides[1] + k * t.strides[2];
                    assert!(
                        at >= 0 && at as usize + n <= t.len,
                        "target row outside the target"
                    );
                    std::slice::from_raw_parts_mut(t.pointer.offset(at), n)
                } else {
                    let at = out_register as isize * width + lo + self.halo;
                    assert!(
                        at >= 0 && at + n as isize <= scratch_len,
                        "register write outside its row"
                    );
                    std::slice::from_raw_parts_mut(base.offset(at), n)
                }
            };
            match instruction {
                Instruction::Linear { form, .. } => linear(out, form, source_pointer),
                Instruction::Unary { op, arg, .. } => dispatch_unary!(*op, out, resolve(arg)),
                Instruction::Binary {
                    op, left, right, ..
                } => {
                    dispatch_binary!(*op, out, resolve(left), resolve(right))
                }
                Instruction::Select {
                    condition,
                    if_true,
                    if_false,
                    ..
                } => {
                    let (c, t, f) = (resolve(condition), resolve(if_true), resolve(if_false));
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = if c.at(i) != 0.0 { t.at(i) } else { f.at(i) };
                    }
                }
                Instruction::Coordinate {
                    axis,
                    location,
                    row_offset,
                    ..
                } => {
                    let layout = &self.layouts[location];
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = layout.coordinate([
                            start + i as isize,
                            j + row_offset[0],
                            k + row_offset[1],
                        ])[*axis];
                    }
                }
                Instruction::Mask {
                    set,
                    location,
                    row_offset,
                    ..
                } => {
                    let layout = &self.layouts[location];
                    for (i, o) in out.iter_mut().enumerate() {
                        let index = [start + i as isize, j + row_offset[0], k + row_offset[1]];
                        *o = f64::from(set.contains(index, layout));
                    }
                }
                Instruction::Limited {
                    limiter,
                    velocity,
                    cells,
                    ..
                } => {
                    let v = resolve(velocity);
                    let [m2, m1, p0, p1] = cells.map(|c| resolve(&c));
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = if v.at(i) >= 0.0 {
                            limiter.face_value(m2.at(i), m1.at(i), p0.at(i))
                        } else {
                            limiter.face_value(p1.at(i), p0.at(i), m1.at(i))
                        };
                    }
                }
            }
        }
    }

    /// The result register's values for the tile just run.
    fn result_row<'s>(&self, scratch: &'s [f64], register: Register, n: usize) -> &'s [f64] {
        let at = register as usize * self.width + self.halo as usize;
        &scratch[at..at + n]
    }
}

/// Builds the shared context and the rows of `region`.
fn context<'a>(
    kernel: &'a Kernel,
    fields: &'a [FieldData<'a>],
    patch: &Patch,
    region: &IndexBox,
) -> Context<'a> {
    let tile = (region.extent()[0]).clamp(1, TILE);
    let halo = kernel.halo;
    let mut layouts = HashMap::new();
    for kind in LocationKind::ALL {
        layouts.insert(kind, FieldLayout::new(patch, kind));
    }
    Context {
        kernel,
        fields,
        layouts,
        width: tile + 2 * halo as usize,
        halo,
    }
}

fn rows_of(region: &IndexBox) -> (usize, impl Fn(usize) -> (isize, isize) + Sync + '_) {
    let ny = region.extent()[1];
    let rows = region.extent()[1] * region.extent()[2];
    (rows, move |r: usize| {
        (
            region.lo[1] + (r % ny) as isize,
            region.lo[2] + (r / ny) as isize,
        )
    })
}

fn x_tiles(region: &IndexBox) -> impl Iterator<Item = (isize, isize)> + '_ {
    (region.lo[0]..region.hi[0])
        .step_by(TILE)
        .map(|x0| (x0, (x0 + TILE as isize).min(region.hi[0])))
}

/// Evaluates `kernel` into the target over `region`.
pub(crate) fn assign(
    kernel: &Kernel,
    fields: &[FieldData<'_>],
    patch: &Patch,
    target: TargetData,
    region: IndexBox,
    parallelism: Parallelism,
) {
    if region.is_empty() {
        return;
    }
    let ctx = context(kernel, fields, patch, &region);
    let (rows, row) = rows_of(&region);
    let run_rows = |range: std::ops::Range<usize>| {
        let mut scratch = vec![0.0; kernel.registers.max(1) * ctx.width];
        for r in range {
            let (j, k) = row(r);
            for (x0, x1) in x_tiles(&region) {
                ctx.tile(&mut scratch, Some(&target), j, k, x0, x1);
            }
        }
    };
    parallelism.run(|threads| {
        if threads <= 1 || rows < 2 {
            run_rows(0..rows);
        } else {
            let chunks = (threads * 8).min(rows);
            (0..chunks)
                .into_par_iter()
                .for_each(|c| run_rows(c * rows / chunks..(c + 1) * rows / chunks));
        }
    });
}

/// Reduces the values of `kernel`'s result over `region`.
pub(crate) fn reduce(
    kernel: &Kernel,
    fields: &[FieldData<'_>],
    patch: &Patch,
    region: IndexBox,
    reduction: Reduction,
    parallelism: Parallelism,
) -> f64 {
    if region.is_empty() {
        return reduction.identity();
    }
    let ctx = context(kernel, fields, patch, &region);
    let (rows, row) = rows_of(&region);
    let mut partials = vec![reduction.identity(); rows];
    let run_rows = |first: usize, out: &mut [f64]| {
        let mut scratch = vec![0.0; kernel.registers.max(1) * ctx.width];
        for (offset, partial) in out.iter_mut().enumerate() {
            let (j, k) = row(first + offset);
            let mut accumulator = reduction.identity();
            for (x0, x1) in x_tiles(&region) {
                ctx.tile(&mut scratch, None, j, k, x0, x1);
                for &v in ctx.result_row(&scratch, kernel.result, (x1 - x0) as usize) {
                    accumulator = reduction.combine(accumulator, v);
                }
            }
            *partial = accumulator;
        }
    };
    parallelism.run(|threads| {
        if threads <= 1 || rows < 2 {
            run_rows(0, &mut partials);
        } else {
            let per_chunk = rows.div_ceil(threads * 8);
            partials
                .par_chunks_mut(per_chunk)
                .enumerate()
                .for_each(|(c, out)| run_rows(c * per_chunk, out));
        }
    });
    partials
        .into_iter()
        .fold(reduction.identity(), |a, b| reduction.merge(a, b))
}
