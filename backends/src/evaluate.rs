//! The CPU evaluator: runs a [`Kernel`] over the rows of a region, serially
//! or on rayon threads.
//!
//! The region is cut into *blocks*: at most [`TILE`] points along x times a
//! few rows along y in one z plane, about [`BLOCK_POINTS`] points in all.
//! Each instruction of the kernel runs over a whole block per call, so the
//! cost of dispatching it is shared by hundreds of points, and the block's
//! registers (a few kilobytes per thread: no full-size temporaries) stay in
//! L1. Blocks are dealt to threads in contiguous runs. Every point is
//! computed by the same instructions in the same order whatever the
//! blocking and threading, so results are bitwise identical for any number
//! of threads; reductions combine per-row partial results in row order for
//! the same reason.
//!
//! Its aliasing and bounds invariants (what makes the raw-pointer code
//! sound, and who checks what) are in the design note beside it:
#![doc = include_str!("evaluate.md")]

use crate::codegen::NativeKernel;
use crate::fill::PointFill;
use crate::kernel::{Instruction, Kernel, MAX_GROUP_SOURCES, OUTPUT, Operand, Source};
use crate::stencil::StencilOp;
use rayon::prelude::*;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::{FieldLayout, IndexBox, LocationKind, Patch};

/// Largest number of x points in a block.
pub const TILE: usize = 512;

/// Largest number of points in a block (x points times rows).
pub const BLOCK_POINTS: usize = 4096;

/// Smallest block size chosen for kernels with many registers.
const MIN_BLOCK_POINTS: usize = 512;

/// Regions smaller than this many points run on the calling thread: waking
/// a pool costs more than it saves (results are the same either way).
pub const PARALLEL_THRESHOLD: usize = 32 * 1024;

/// Register bytes per thread a block aims to stay within.
const L1_REGISTER_BYTES: usize = 64 * 1024;

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
    pub fn run<R: Send>(self, work: impl FnOnce(usize) -> R + Send) -> R {
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

/// A field's data with its indexing. It holds a raw pointer so that a
/// field may be the target itself (in-place updates, boundary modifiers):
/// no `&[f64]` then overlaps the rows being written.
#[derive(Clone, Copy)]
pub struct FieldData<'a> {
    pointer: *const f64,
    len: usize,
    /// Linear index of point (0, 0, 0).
    pub origin: isize,
    /// Elements between neighbours along x, y and z.
    pub strides: [isize; 3],
    _data: std::marker::PhantomData<&'a [f64]>,
}

// SAFETY: the data is only read, and writers (the target rows of an
// in-place assignment) never write a point another thread reads (see
// `assign_node_reading_target`).
unsafe impl Send for FieldData<'_> {}
// SAFETY: as above.
unsafe impl Sync for FieldData<'_> {}

impl<'a> FieldData<'a> {
    /// A field's values with the indexing of `layout`.
    #[inline]
    pub fn new(data: &'a [f64], layout: &FieldLayout) -> Self {
        // SAFETY: a slice is valid for reads of its length for 'a.
        unsafe { Self::from_raw(data.as_ptr(), data.len(), layout) }
    }

    /// # Safety
    /// `pointer` must be valid for reads of `len` values for `'a`.
    #[inline]
    pub unsafe fn from_raw(pointer: *const f64, len: usize, layout: &FieldLayout) -> Self {
        FieldData {
            pointer,
            len,
            origin: layout.linear_index([0; 3]) as isize,
            strides: layout.strides().map(|s| s as isize),
            _data: std::marker::PhantomData,
        }
    }
}

/// The target's memory, written row by row from several threads.
#[derive(Clone, Copy)]
pub struct TargetData {
    /// The first allocated element (ghosts included).
    pub pointer: *mut f64,
    /// Allocated elements.
    pub len: usize,
    /// Linear index of point (0, 0, 0).
    pub origin: isize,
    /// Elements between neighbours along x, y and z.
    pub strides: [isize; 3],
}

// SAFETY: threads write disjoint rows of the target (each row belongs to
// exactly one chunk), and nothing reads it during the evaluation.
unsafe impl Send for TargetData {}
// SAFETY: as above.
unsafe impl Sync for TargetData {}

/// Independent accumulators per row of a reduction ([`Reduction`]).
const REDUCTION_LANES: usize = 8;

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
    /// The value of a reduction over no point (0 for sums, +inf for the
    /// minimum, -inf for the maximum).
    pub fn identity(self) -> f64 {
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

    /// The reduction of one block's row: `REDUCTION_LANES` independent
    /// accumulators, lane `l` taking the values at positions `l`, `l + 8`,
    /// ..., then merged pairwise ((0, 1), (2, 3), ...). A single running
    /// sum is one dependent addition per value (latency-bound, about four
    /// times slower); this order is fixed by the block's points alone
    /// (blocks are cut at multiples of `TILE` from the region's start, not
    /// by threads), so results stay the same bit for bit for any thread
    /// count.
    ///
    /// On CPUs with AVX2 the lanes are two 256-bit registers instead of four
    /// 128-bit ones (the baseline build's SSE2): the same operations on the
    /// same lanes in the same order, so the same bits, in about half the
    /// instructions.
    #[inline]
    fn of_row(self, values: &[f64]) -> f64 {
        #[cfg(target_arch = "x86_64")]
        if avx2_rows() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { self.of_row_avx2(values) };
        }
        self.of_row_lanes(values)
    }

    /// [`Self::of_row`] with the eight lanes in two 256-bit registers
    /// (lanes 0-3 and 4-7): each lane combines the same values in the same
    /// order as [`Self::of_row_lanes`], with the same operations (no fused
    /// multiply-add; `Min` and `Max` by compare and blend, keeping
    /// [`Self::combine`]'s choice for NaN and equal values), so the bits are
    /// the same. (Left to itself, LLVM builds the generic loop from 128-bit
    /// halves and shuffles.)
    ///
    /// # Safety
    /// The CPU supports AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline(never)]
    unsafe fn of_row_avx2(self, values: &[f64]) -> f64 {
        use std::arch::x86_64::*;
        // `acc` combined with `v` per lane, as `combine` does.
        let pick = |acc: __m256d, v: __m256d, better: __m256d| {
            let acc_nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(acc, acc);
            let v_nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(v, v);
            let take = _mm256_andnot_pd(acc_nan, _mm256_or_pd(better, v_nan));
            _mm256_blendv_pd(acc, v, take)
        };
        let identity = _mm256_set1_pd(self.identity());
        let (mut low, mut high) = (identity, identity);
        let mut chunks = values.chunks_exact(REDUCTION_LANES);
        // One loop per kind, each with its own `step`.
        macro_rules! run {
            ($step:expr) => {{
                let step = $step;
                for chunk in &mut chunks {
                    // SAFETY: a chunk holds 8 values: two loads of 4.
                    let (a, b) = unsafe {
                        (
                            _mm256_loadu_pd(chunk.as_ptr()),
                            _mm256_loadu_pd(chunk.as_ptr().add(4)),
                        )
                    };
                    low = step(low, a);
                    high = step(high, b);
                }
            }};
        }
        match self {
            Reduction::Sum => run!(|acc, v| _mm256_add_pd(acc, v)),
            Reduction::SumOfSquares => run!(|acc, v| _mm256_add_pd(acc, _mm256_mul_pd(v, v))),
            Reduction::Min => {
                run!(|acc, v| pick(acc, v, _mm256_cmp_pd::<_CMP_LT_OQ>(v, acc)))
            }
            Reduction::Max => {
                run!(|acc, v| pick(acc, v, _mm256_cmp_pd::<_CMP_GT_OQ>(v, acc)))
            }
        }
        let mut lanes = [0.0; REDUCTION_LANES];
        // SAFETY: `lanes` holds 8 values: two stores of 4.
        unsafe {
            _mm256_storeu_pd(lanes.as_mut_ptr(), low);
            _mm256_storeu_pd(lanes.as_mut_ptr().add(4), high);
        }
        for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
            *lane = self.combine(*lane, v);
        }
        let mut width = REDUCTION_LANES;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                lanes[l] = self.merge(lanes[2 * l], lanes[2 * l + 1]);
            }
        }
        lanes[0]
    }

    /// [`Self::of_row`]'s loops, built for whichever instruction set the
    /// function inlining them targets.
    #[inline(always)]
    fn of_row_lanes(self, values: &[f64]) -> f64 {
        // One loop per kind, so that each compiles to vector code without
        // a dispatch per value.
        match self {
            Reduction::Sum => in_lanes(values, 0.0, |a, v| a + v, |a, b| a + b),
            Reduction::SumOfSquares => in_lanes(values, 0.0, |a, v| a + v * v, |a, b| a + b),
            Reduction::Min => in_lanes(
                values,
                f64::INFINITY,
                |a, v| Reduction::Min.combine(a, v),
                |a, b| Reduction::Min.combine(a, b),
            ),
            Reduction::Max => in_lanes(
                values,
                f64::NEG_INFINITY,
                |a, v| Reduction::Max.combine(a, v),
                |a, b| Reduction::Max.combine(a, b),
            ),
        }
    }

    /// Combines two partial results.
    pub fn merge(self, a: f64, b: f64) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumOfSquares => a + b,
            _ => self.combine(a, b),
        }
    }
}

/// `values` reduced in [`REDUCTION_LANES`] interleaved accumulators (lane
/// `l` takes positions `l`, `l + 8`, ...), merged pairwise.
#[inline(always)]
fn in_lanes(
    values: &[f64],
    identity: f64,
    combine: impl Fn(f64, f64) -> f64,
    merge: impl Fn(f64, f64) -> f64,
) -> f64 {
    let mut lanes = [identity; REDUCTION_LANES];
    let mut chunks = values.chunks_exact(REDUCTION_LANES);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = combine(*lane, v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = combine(*lane, v);
    }
    let mut width = REDUCTION_LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] = merge(lanes[2 * l], lanes[2 * l + 1]);
        }
    }
    lanes[0]
}

/// The values of one source over a block: its first row's first point and
/// the distance between consecutive rows.
#[derive(Clone, Copy)]
struct Stream {
    pointer: *const f64,
    row_stride: isize,
}

/// Where an instruction writes over a block.
#[derive(Clone, Copy)]
struct OutStream {
    pointer: *mut f64,
    row_stride: isize,
}

/// An operand resolved to memory for one instruction call.
#[derive(Clone, Copy)]
enum Resolved {
    Constant(f64),
    One(Stream, f64),
    Two(Stream, f64, Stream, f64),
}

impl Resolved {
    /// The value at point `i` of row `r` (slow path for rarely hot instructions).
    ///
    /// # Safety
    /// `r` and `i` must lie in the block the streams were resolved for.
    #[inline(always)]
    unsafe fn at(&self, r: usize, i: usize) -> f64 {
        // SAFETY: guaranteed by the caller.
        unsafe {
            match *self {
                Resolved::Constant(c) => c,
                Resolved::One(s, w) => {
                    w * *s.pointer.offset(r as isize * s.row_stride + i as isize)
                }
                Resolved::Two(s0, w0, s1, w1) => {
                    w0 * *s0.pointer.offset(r as isize * s0.row_stride + i as isize)
                        + w1 * *s1.pointer.offset(r as isize * s1.row_stride + i as isize)
                }
            }
        }
    }
}

/// The operand shapes the inner loops are specialised for: one generic loop
/// per pair of shapes, which LLVM vectorises.
trait Lane: Copy {
    /// The lane positioned on row `r`.
    ///
    /// # Safety
    /// `r` must be a row of the block.
    unsafe fn on_row(&self, r: usize) -> Self;
    /// The value at point `i` of the current row.
    ///
    /// # Safety
    /// `i` must be below the block's row length.
    unsafe fn at(&self, i: usize) -> f64;
}

#[derive(Clone, Copy)]
struct Splat(f64);
#[derive(Clone, Copy)]
struct Plain(Stream);
/// `a + b`.
#[derive(Clone, Copy)]
struct Sum(Stream, Stream);
/// `a - b`.
#[derive(Clone, Copy)]
struct Minus(Stream, Stream);
#[derive(Clone, Copy)]
struct Scaled(Stream, f64);
/// `w * (a + b)`: interpolants.
#[derive(Clone, Copy)]
struct ScaledSum(Stream, Stream, f64);
/// `w * (b - a)`: gradients and divergences.
#[derive(Clone, Copy)]
struct ScaledDifference(Stream, Stream, f64);
#[derive(Clone, Copy)]
struct Pair(Stream, f64, Stream, f64);

impl Stream {
    #[inline(always)]
    unsafe fn on_row(self, r: usize) -> Stream {
        Stream {
            // SAFETY: the caller keeps `r` within the block.
            pointer: unsafe { self.pointer.offset(r as isize * self.row_stride) },
            row_stride: self.row_stride,
        }
    }
    #[inline(always)]
    unsafe fn at(self, i: usize) -> f64 {
        // SAFETY: the caller keeps `i` within the row.
        unsafe { *self.pointer.add(i) }
    }
}

impl Lane for Splat {
    #[inline(always)]
    unsafe fn on_row(&self, _: usize) -> Self {
        *self
    }
    #[inline(always)]
    unsafe fn at(&self, _: usize) -> f64 {
        self.0
    }
}
impl Lane for Plain {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        Plain(unsafe { self.0.on_row(r) })
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        unsafe { self.0.at(i) }
    }
}
impl Lane for Sum {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        unsafe { Sum(self.0.on_row(r), self.1.on_row(r)) }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        unsafe { self.0.at(i) + self.1.at(i) }
    }
}
impl Lane for Minus {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        unsafe { Minus(self.0.on_row(r), self.1.on_row(r)) }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        unsafe { self.0.at(i) - self.1.at(i) }
    }
}
impl Lane for Scaled {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        Scaled(unsafe { self.0.on_row(r) }, self.1)
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        self.1 * unsafe { self.0.at(i) }
    }
}
impl Lane for ScaledSum {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        unsafe { ScaledSum(self.0.on_row(r), self.1.on_row(r), self.2) }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        self.2 * unsafe { self.0.at(i) + self.1.at(i) }
    }
}
impl Lane for ScaledDifference {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        unsafe { ScaledDifference(self.0.on_row(r), self.1.on_row(r), self.2) }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        self.2 * unsafe { self.1.at(i) - self.0.at(i) }
    }
}
impl Lane for Pair {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        unsafe { Pair(self.0.on_row(r), self.1, self.2.on_row(r), self.3) }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        unsafe { self.1 * self.0.at(i) + self.3 * self.2.at(i) }
    }
}

/// Calls `$body` with `$lane` bound to the specialised shape of `$resolved`.
macro_rules! with_lane {
    ($resolved:expr, |$lane:ident| $body:expr) => {
        match $resolved {
            Resolved::Constant(c) => {
                let $lane = Splat(c);
                $body
            }
            Resolved::One(s, w) if w == 1.0 => {
                let $lane = Plain(s);
                $body
            }
            Resolved::One(s, w) => {
                let $lane = Scaled(s, w);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == 1.0 => {
                let $lane = Sum(s0, s1);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == -1.0 => {
                let $lane = Minus(s0, s1);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) if w0 == w1 => {
                let $lane = ScaledSum(s0, s1, w0);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) if w0 == -w1 => {
                let $lane = ScaledDifference(s0, s1, w1);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) => {
                let $lane = Pair(s0, w0, s1, w1);
                $body
            }
        }
    };
}

/// Calls `$body` with `$lane` bound to a shape of `$resolved` that computes
/// exactly what [`Resolved::at`] computes (`w0 * s0 + w1 * s1`; `1 * s` is
/// `s`), unlike [`with_lane`]'s `w * (s0 + s1)` for equal weights: the
/// shapes of selections, whose generated code reads operands that way.
macro_rules! with_exact_lane {
    ($resolved:expr, |$lane:ident| $body:expr) => {
        match $resolved {
            Resolved::Constant(c) => {
                let $lane = Splat(c);
                $body
            }
            Resolved::One(s, w) if w == 1.0 => {
                let $lane = Plain(s);
                $body
            }
            Resolved::One(s, w) => {
                let $lane = Scaled(s, w);
                $body
            }
            Resolved::Two(s0, w0, s1, w1) => {
                let $lane = Pair(s0, w0, s1, w1);
                $body
            }
        }
    };
}

/// An operand of any shape, computed at each point as [`with_lane`]'s
/// shapes compute it, with a match per point: the lane of
/// [`with_common_lane`] for the shapes that are rare in comparisons, so
/// that each comparison needs 9 specialisations instead of 64.
#[derive(Clone, Copy)]
struct Shape(Resolved);

impl Lane for Shape {
    #[inline(always)]
    unsafe fn on_row(&self, r: usize) -> Self {
        // SAFETY: the caller keeps `r` in every stream's extent.
        Shape(unsafe {
            match self.0 {
                Resolved::Constant(c) => Resolved::Constant(c),
                Resolved::One(s, w) => Resolved::One(s.on_row(r), w),
                Resolved::Two(s0, w0, s1, w1) => Resolved::Two(s0.on_row(r), w0, s1.on_row(r), w1),
            }
        })
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> f64 {
        // SAFETY: the caller keeps `i` in the row.
        with_lane!(self.0, |lane| unsafe { lane.at(i) })
    }
}

/// [`with_lane`] for the operands of comparisons, minima, maxima and
/// logical operations: constants and plain registers specialised, every
/// other shape through [`Shape`] (the same values).
macro_rules! with_common_lane {
    ($resolved:expr, |$lane:ident| $body:expr) => {
        match $resolved {
            Resolved::Constant(c) => {
                let $lane = Splat(c);
                $body
            }
            Resolved::One(s, w) if w == 1.0 => {
                let $lane = Plain(s);
                $body
            }
            other => {
                let $lane = Shape(other);
                $body
            }
        }
    };
}

/// The shape of one instruction call: `rows` rows of `n` points.
#[derive(Clone, Copy)]
struct Extent {
    n: usize,
    rows: usize,
}

/// One row of a unary loop. Taking the output as `&mut [f64]` tells LLVM it
/// overlaps no input (even once inlined), so the loop vectorises without
/// run-time alias checks.
#[inline(always)]
unsafe fn row1<A: Lane>(o: &mut [f64], a: A, f: &impl Fn(f64) -> f64) {
    for (i, o) in o.iter_mut().enumerate() {
        // SAFETY: the caller guarantees `a` covers the row.
        *o = f(unsafe { a.at(i) });
    }
}

/// One row of a binary loop (see [`row1`]).
#[inline(always)]
unsafe fn row2<A: Lane, B: Lane>(o: &mut [f64], a: A, b: B, f: &impl Fn(f64, f64) -> f64) {
    for (i, o) in o.iter_mut().enumerate() {
        // SAFETY: the caller guarantees `a` and `b` cover the row.
        *o = unsafe { f(a.at(i), b.at(i)) };
    }
}

/// The rows of a unary loop.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn map1_rows<A: Lane>(out: OutStream, extent: Extent, a: A, f: impl Fn(f64) -> f64) {
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let o = std::slice::from_raw_parts_mut(
                out.pointer.offset(r as isize * out.row_stride),
                extent.n,
            );
            row1(o, a.on_row(r), &f);
        }
    }
}

/// The rows of a binary loop.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn map2_rows<A: Lane, B: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    b: B,
    f: impl Fn(f64, f64) -> f64,
) {
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let o = std::slice::from_raw_parts_mut(
                out.pointer.offset(r as isize * out.row_stride),
                extent.n,
            );
            row2(o, a.on_row(r), b.on_row(r), &f);
        }
    }
}

// Each specialisation is its own small function: inlining all of them into
// one dispatcher defeats LLVM's inliner and vectoriser.
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(never)]
unsafe fn map1_lanes<A: Lane>(out: OutStream, extent: Extent, a: A, f: impl Fn(f64) -> f64) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, f) }
}

/// [`map1_lanes`] compiled for AVX2 (four lanes per vector instead of two;
/// `sqrt`, `abs`, negation and the arithmetic round as in the baseline
/// build, so the bits are the same).
///
/// # Safety
/// As [`map1_lanes`], and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
unsafe fn map1_lanes_avx2<A: Lane>(out: OutStream, extent: Extent, a: A, f: impl Fn(f64) -> f64) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, f) }
}

/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(never)]
unsafe fn map2_lanes<A: Lane, B: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    b: B,
    f: impl Fn(f64, f64) -> f64,
) {
    // SAFETY: forwarded.
    unsafe { map2_rows(out, extent, a, b, f) }
}

/// [`map2_lanes`] compiled for AVX2 (see [`map1_lanes_avx2`]).
///
/// # Safety
/// As [`map2_lanes`], and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
unsafe fn map2_lanes_avx2<A: Lane, B: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    b: B,
    f: impl Fn(f64, f64) -> f64,
) {
    // SAFETY: forwarded.
    unsafe { map2_rows(out, extent, a, b, f) }
}

/// # Safety
/// As [`map1_lanes`].
#[inline(always)]
unsafe fn map1(out: OutStream, extent: Extent, a: Resolved, f: impl Fn(f64) -> f64 + Copy) {
    #[cfg(target_arch = "x86_64")]
    if avx2_rows() {
        // SAFETY: forwarded; AVX2 was detected.
        return with_lane!(a, |x| unsafe { map1_lanes_avx2(out, extent, x, f) });
    }
    // SAFETY: forwarded.
    with_lane!(a, |x| unsafe { map1_lanes(out, extent, x, f) })
}

/// The body of [`map2`] and [`common2`]: `map2_lanes` (or its AVX2 build
/// where the CPU has AVX2) over the shapes that `$with` (`with_lane` or
/// `with_common_lane`) specialises.
macro_rules! map2_over {
    ($with:ident, $out:expr, $extent:expr, $a:expr, $b:expr, $f:expr) => {{
        #[cfg(target_arch = "x86_64")]
        if avx2_rows() {
            // SAFETY: forwarded; AVX2 was detected.
            return $with!($a, |x| $with!($b, |y| unsafe {
                map2_lanes_avx2($out, $extent, x, y, $f)
            }));
        }
        // SAFETY: forwarded.
        $with!($a, |x| $with!($b, |y| unsafe {
            map2_lanes($out, $extent, x, y, $f)
        }))
    }};
}

/// # Safety
/// As [`map2_lanes`].
#[inline(always)]
unsafe fn map2(
    out: OutStream,
    extent: Extent,
    a: Resolved,
    b: Resolved,
    f: impl Fn(f64, f64) -> f64 + Copy,
) {
    map2_over!(with_lane, out, extent, a, b, f)
}

/// [`map2`] over [`with_common_lane`] shapes: for the operations whose
/// operands are mostly registers and constants (comparisons, minima,
/// maxima, logical operations), each a loop of its own instead of a match
/// per point.
///
/// # Safety
/// As [`map2_lanes`].
#[inline(always)]
unsafe fn common2(
    out: OutStream,
    extent: Extent,
    a: Resolved,
    b: Resolved,
    f: impl Fn(f64, f64) -> f64 + Copy,
) {
    map2_over!(with_common_lane, out, extent, a, b, f)
}

/// `o = if c != 0 { t } else { o }` at every point of every row: the
/// second pass of a selection, whose first pass wrote `f` into `out`.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn blend_rows<C: Lane, T: Lane>(out: OutStream, extent: Extent, c: C, t: T) {
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let o = std::slice::from_raw_parts_mut(
                out.pointer.offset(r as isize * out.row_stride),
                extent.n,
            );
            let (c, t) = (c.on_row(r), t.on_row(r));
            for (i, o) in o.iter_mut().enumerate() {
                // Both sides are read at every point (every stream covers
                // the extent), so the loop becomes a vector blend.
                let (condition, value) = (c.at(i), t.at(i));
                *o = if condition != 0.0 { value } else { *o };
            }
        }
    }
}

/// [`blend_rows`], baseline build.
///
/// # Safety
/// As [`blend_rows`].
#[inline(never)]
unsafe fn blend_lanes<C: Lane, T: Lane>(out: OutStream, extent: Extent, c: C, t: T) {
    // SAFETY: forwarded.
    unsafe { blend_rows(out, extent, c, t) }
}

/// [`blend_rows`] compiled for AVX2.
///
/// # Safety
/// As [`blend_rows`], and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
unsafe fn blend_lanes_avx2<C: Lane, T: Lane>(out: OutStream, extent: Extent, c: C, t: T) {
    // SAFETY: forwarded.
    unsafe { blend_rows(out, extent, c, t) }
}

/// `out = if c != 0 { t } else { f }` at every point, each operand
/// computed as [`Resolved::at`] computes it (the generated code's
/// selections read their operands that way): `f` written first, then `t`
/// blended in where the condition holds; both passes vectorised and
/// specialised to the operands' shapes, in the AVX2 build where the CPU
/// has it. A NaN condition selects `t`, as `!= 0` says.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn select(out: OutStream, extent: Extent, c: Resolved, t: Resolved, f: Resolved) {
    #[cfg(target_arch = "x86_64")]
    if avx2_rows() {
        // SAFETY: forwarded; AVX2 was detected.
        unsafe {
            with_exact_lane!(f, |z| map1_lanes_avx2(out, extent, z, |v| v));
            with_exact_lane!(c, |x| with_exact_lane!(t, |y| blend_lanes_avx2(
                out, extent, x, y
            )));
        }
        return;
    }
    // SAFETY: forwarded.
    unsafe {
        with_exact_lane!(f, |z| map1_lanes(out, extent, z, |v| v));
        with_exact_lane!(c, |x| with_exact_lane!(t, |y| blend_lanes(
            out, extent, x, y
        )));
    }
}

/// Whether this CPU runs the AVX2 builds of the row loops of reductions
/// and linear forms (detected once; the check is a load of a cached flag).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx2_rows() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Whether this CPU runs the AVX2 + FMA builds of the vector-math loops.
#[inline(always)]
fn wide_math() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A vector-math function of one argument (`vmath`), a type so that its
/// loops inline it (a function pointer or a closure shared by many lane
/// combinations stays a call per element).
trait Math1 {
    fn apply(x: f64) -> f64;
}

/// A vector-math function of two arguments (see [`Math1`]).
trait Math2 {
    fn apply(x: f64, y: f64) -> f64;
}

macro_rules! math_functions {
    ($($name:ident => $f:path),* $(,)?) => {$(
        struct $name;
        impl Math1 for $name {
            #[inline(always)]
            fn apply(x: f64) -> f64 {
                $f(x)
            }
        }
    )*};
}

math_functions! {
    ExpFn => crate::vmath::exp,
    LogFn => crate::vmath::log,
    SinFn => crate::vmath::sin,
    CosFn => crate::vmath::cos,
    TanhFn => crate::vmath::tanh,
}

struct PowFn;
impl Math2 for PowFn {
    #[inline(always)]
    fn apply(x: f64, y: f64) -> f64 {
        crate::vmath::pow(x, y)
    }
}

/// [`map1_rows`] for a vector-math function, baseline build.
///
/// # Safety
/// As [`map1_rows`].
#[inline(never)]
unsafe fn math1_lanes<F: Math1, A: Lane>(out: OutStream, extent: Extent, a: A) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, |x| F::apply(x)) }
}

/// [`map1_rows`] for a vector-math function compiled for AVX2 and FMA: the
/// selections and bit operations of the vector math need 256-bit integer
/// lanes to vectorise, and `exp`'s `mul_add` becomes one instruction
/// (the baseline build calls libm's `fma`: the same bits, slower). Only
/// explicit `mul_add`s are fused, so the bits are those of the baseline
/// build (and of the generated C).
///
/// # Safety
/// As [`map1_rows`], and the CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn math1_lanes_avx2<F: Math1, A: Lane>(out: OutStream, extent: Extent, a: A) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, |x| F::apply(x)) }
}

/// [`map2_rows`] for a vector-math function, baseline build.
///
/// # Safety
/// As [`map2_rows`].
#[inline(never)]
unsafe fn math2_lanes<F: Math2, A: Lane, B: Lane>(out: OutStream, extent: Extent, a: A, b: B) {
    // SAFETY: forwarded.
    unsafe { map2_rows(out, extent, a, b, |x, y| F::apply(x, y)) }
}

/// [`map2_rows`] for a vector-math function compiled for AVX2 and FMA (see [`math1_lanes_avx2`]).
///
/// # Safety
/// As [`map2_rows`], and the CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn math2_lanes_avx2<F: Math2, A: Lane, B: Lane>(out: OutStream, extent: Extent, a: A, b: B) {
    // SAFETY: forwarded.
    unsafe { map2_rows(out, extent, a, b, |x, y| F::apply(x, y)) }
}

/// A unary vector-math loop: the AVX2 + FMA build where the CPU has it.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn math1<F: Math1>(out: OutStream, extent: Extent, a: Resolved) {
    #[cfg(target_arch = "x86_64")]
    if wide_math() {
        // SAFETY: forwarded; AVX2 and FMA were detected.
        return with_lane!(a, |x| unsafe { math1_lanes_avx2::<F, _>(out, extent, x) });
    }
    // SAFETY: forwarded.
    with_lane!(a, |x| unsafe { math1_lanes::<F, _>(out, extent, x) })
}

/// A binary vector-math loop (see [`math1`]).
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
unsafe fn math2<F: Math2>(out: OutStream, extent: Extent, a: Resolved, b: Resolved) {
    #[cfg(target_arch = "x86_64")]
    if wide_math() {
        // SAFETY: forwarded; AVX2 and FMA were detected.
        return with_lane!(a, |x| with_lane!(b, |y| unsafe {
            math2_lanes_avx2::<F, _, _>(out, extent, x, y)
        }));
    }
    // SAFETY: forwarded.
    with_lane!(a, |x| with_lane!(b, |y| unsafe {
        math2_lanes::<F, _, _>(out, extent, x, y)
    }))
}

macro_rules! dispatch_binary {
    ($op:expr, $out:expr, $extent:expr, $a:expr, $b:expr) => {{
        use crate::pointwise::BinaryOp as B;
        match $op {
            B::Add => map2($out, $extent, $a, $b, |x, y| x + y),
            B::Subtract => map2($out, $extent, $a, $b, |x, y| x - y),
            B::Multiply => map2($out, $extent, $a, $b, |x, y| x * y),
            B::Divide => map2($out, $extent, $a, $b, |x, y| x / y),
            B::Pow => math2::<PowFn>($out, $extent, $a, $b),
            // Each its own loop (a closure over `op.apply` kept a match per
            // point and did not vectorise); the same expressions as
            // `BinaryOp::apply`, so the same bits.
            B::Min => common2($out, $extent, $a, $b, |x, y| if x < y { x } else { y }),
            B::Max => common2($out, $extent, $a, $b, |x, y| if x > y { x } else { y }),
            B::Less => common2($out, $extent, $a, $b, |x, y| f64::from(x < y)),
            B::LessEqual => common2($out, $extent, $a, $b, |x, y| f64::from(x <= y)),
            B::Greater => common2($out, $extent, $a, $b, |x, y| f64::from(x > y)),
            B::GreaterEqual => common2($out, $extent, $a, $b, |x, y| f64::from(x >= y)),
            B::Equal => common2($out, $extent, $a, $b, |x, y| f64::from(x == y)),
            B::NotEqual => common2($out, $extent, $a, $b, |x, y| f64::from(x != y)),
            B::And => common2($out, $extent, $a, $b, |x, y| {
                f64::from((x != 0.0) & (y != 0.0))
            }),
            B::Or => common2($out, $extent, $a, $b, |x, y| {
                f64::from((x != 0.0) | (y != 0.0))
            }),
        }
    }};
}

macro_rules! dispatch_unary {
    ($op:expr, $out:expr, $extent:expr, $a:expr) => {{
        use crate::pointwise::UnaryOp as U;
        match $op {
            U::Negate => map1($out, $extent, $a, |x| -x),
            U::Exp => math1::<ExpFn>($out, $extent, $a),
            U::Log => math1::<LogFn>($out, $extent, $a),
            U::Sin => math1::<SinFn>($out, $extent, $a),
            U::Cos => math1::<CosFn>($out, $extent, $a),
            U::Tanh => math1::<TanhFn>($out, $extent, $a),
            U::Sqrt => map1($out, $extent, $a, f64::sqrt),
            U::Abs => map1($out, $extent, $a, f64::abs),
            U::Not => map1($out, $extent, $a, |x| f64::from(x == 0.0)),
        }
    }};
}

/// `entry(args)`: calls `avx2(args)`, the loops of `rows` compiled for
/// AVX2 (four lanes per vector instead of two), where the CPU has AVX2,
/// else `rows(args)`, the baseline build. Rust never contracts a product
/// and a sum into a fused multiply-add, so both builds give the same bits
/// (`the_avx2_linear_loops_give_the_baseline_bits`). The doc comment and
/// safety contract written before the macro call are `entry`'s; `rows` is
/// `#[inline(always)]` and has the same contract.
macro_rules! two_builds {
    ($(#[$doc:meta])* $entry:ident, $avx2:ident => $rows:ident($($arg:ident: $ty:ty),* $(,)?)) => {
        $(#[$doc])*
        unsafe fn $entry($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if avx2_rows() {
                // SAFETY: forwarded; AVX2 was detected.
                return unsafe { $avx2($($arg),*) };
            }
            // SAFETY: forwarded.
            unsafe { $rows($($arg),*) }
        }

        /// The AVX2 build of the entry point's loops.
        ///
        /// # Safety
        /// As the entry point, and the CPU supports AVX2.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        #[inline(never)]
        unsafe fn $avx2($($arg: $ty),*) {
            // SAFETY: forwarded.
            unsafe { $rows($($arg),*) }
        }
    };
}

two_builds! {
    /// `out = c + sum w_t * s_t`, terms summed left to right, up to four per pass
    /// (a form whose weights are all different); with `as_differences` (the
    /// form's [`crate::kernel::LinearForm::is_differences`]) `out = sum_p w_p
    /// (b_p - a_p)` instead.
    ///
    /// # Safety
    /// Every stream covers `extent`, and `out` overlaps no input.
    linear, linear_avx2 => linear_rows(
        out: OutStream,
        extent: Extent,
        constant: f64,
        terms: &[(Stream, f64)],
        as_differences: bool,
    )
}

/// The loops of [`linear`], built into each of its entry points.
///
/// # Safety
/// As [`linear`].
#[inline(always)]
unsafe fn linear_rows(
    out: OutStream,
    extent: Extent,
    constant: f64,
    terms: &[(Stream, f64)],
    as_differences: bool,
) {
    let n = extent.n;
    if as_differences {
        // SAFETY: forwarded.
        unsafe { differences(out, extent, terms) };
        return;
    }
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        let o = unsafe {
            std::slice::from_raw_parts_mut(out.pointer.offset(r as isize * out.row_stride), n)
        };
        // SAFETY: as above.
        let get = |s: &Stream| unsafe { std::slice::from_raw_parts(s.on_row(r).pointer, n) };
        let c = constant;
        match terms {
            [] => o.fill(c),
            [(s0, w0)] => {
                let a = get(s0);
                if c == 0.0 {
                    for (o, &x) in o.iter_mut().zip(a) {
                        *o = w0 * x;
                    }
                } else {
                    for (o, &x) in o.iter_mut().zip(a) {
                        *o = c + w0 * x;
                    }
                }
            }
            _ => {}
        }
        if terms.len() < 2 {
            continue;
        }
        let first = terms.len().min(4);
        match &terms[..first] {
            [(s0, w0), (s1, w1)] => {
                let (a, b) = (get(s0), get(s1));
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = c + w0 * x + w1 * y;
                }
            }
            [(s0, w0), (s1, w1), (s2, w2)] => {
                let (a, b, d) = (get(s0), get(s1), get(s2));
                for (((o, &x), &y), &z) in o.iter_mut().zip(a).zip(b).zip(d) {
                    *o = c + w0 * x + w1 * y + w2 * z;
                }
            }
            [(s0, w0), (s1, w1), (s2, w2), (s3, w3)] => {
                let (a, b, d, e) = (get(s0), get(s1), get(s2), get(s3));
                for ((((o, &x), &y), &z), &v) in o.iter_mut().zip(a).zip(b).zip(d).zip(e) {
                    *o = c + w0 * x + w1 * y + w2 * z + w3 * v;
                }
            }
            _ => unreachable!("two to four terms"),
        }
        let mut done = first;
        while done < terms.len() {
            let count = (terms.len() - done).min(3);
            match &terms[done..done + count] {
                [(s0, w0)] => {
                    let a = get(s0);
                    for (o, &x) in o.iter_mut().zip(a) {
                        *o += w0 * x;
                    }
                }
                [(s0, w0), (s1, w1)] => {
                    let (a, b) = (get(s0), get(s1));
                    for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                        *o = *o + w0 * x + w1 * y;
                    }
                }
                [(s0, w0), (s1, w1), (s2, w2)] => {
                    let (a, b, d) = (get(s0), get(s1), get(s2));
                    for (((o, &x), &y), &z) in o.iter_mut().zip(a).zip(b).zip(d) {
                        *o = *o + w0 * x + w1 * y + w2 * z;
                    }
                }
                _ => unreachable!("one to three terms"),
            }
            done += count;
        }
    }
}

/// `out = sum_p w_p (b_p - a_p)` over consecutive term pairs `(a, -w), (b, w)`
/// (divergences of fluxes), up to three pairs per pass.
///
/// # Safety
/// As [`linear`].
#[inline(always)]
unsafe fn differences(out: OutStream, extent: Extent, terms: &[(Stream, f64)]) {
    let n = extent.n;
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        let o = unsafe {
            std::slice::from_raw_parts_mut(out.pointer.offset(r as isize * out.row_stride), n)
        };
        // SAFETY: as above.
        let get = |s: &Stream| unsafe { std::slice::from_raw_parts(s.on_row(r).pointer, n) };
        let pair = |p: &[(Stream, f64)]| (get(&p[0].0), get(&p[1].0), p[1].1);
        let mut done = 0;
        while done < terms.len() {
            let count = ((terms.len() - done) / 2).min(3);
            let group = &terms[done..done + 2 * count];
            match (count, done == 0) {
                (1, true) => {
                    let (a, b, w) = pair(&group[0..2]);
                    for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                        *o = w * (y - x);
                    }
                }
                (2, true) => {
                    let ((a, b, w), (c, d, v)) = (pair(&group[0..2]), pair(&group[2..4]));
                    for ((((o, &x), &y), &z), &t) in o.iter_mut().zip(a).zip(b).zip(c).zip(d) {
                        *o = w * (y - x) + v * (t - z);
                    }
                }
                (3, true) => {
                    let ((a, b, w), (c, d, v), (e, f, u)) =
                        (pair(&group[0..2]), pair(&group[2..4]), pair(&group[4..6]));
                    let (a, b, c, d, e, f) = (&a[..n], &b[..n], &c[..n], &d[..n], &e[..n], &f[..n]);
                    for i in 0..n {
                        o[i] = w * (b[i] - a[i]) + v * (d[i] - c[i]) + u * (f[i] - e[i]);
                    }
                }
                _ => {
                    for p in group.chunks(2) {
                        let (a, b, w) = pair(p);
                        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                            *o += w * (y - x);
                        }
                    }
                }
            }
            done += 2 * count;
        }
    }
}

two_builds! {
    /// `out = c + sum_g w_g * pairwise_sum(sources_g)` for a form whose terms
    /// share weights ([`crate::kernel::LinearForm::groups`]): one pass over the
    /// row per group, the groups added left to right as the generated code does.
    ///
    /// # Safety
    /// As [`linear`]; every stream of every group covers `extent`.
    grouped_linear, grouped_linear_avx2 => grouped_linear_rows(
        out: OutStream,
        extent: Extent,
        constant: f64,
        groups: &[(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>)],
    )
}

/// The loops of [`grouped_linear`], built into each of its entry points.
///
/// # Safety
/// As [`grouped_linear`].
#[inline(always)]
unsafe fn grouped_linear_rows(
    out: OutStream,
    extent: Extent,
    constant: f64,
    groups: &[(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>)],
) {
    // Row by row, every group in turn: the output row stays in L1 (all
    // rows of a block per group, the block's output is evicted between
    // groups: 20 % slower on the ExprLib diffusion).
    for r in 0..extent.rows {
        for (g, (weight, sources)) in groups.iter().enumerate() {
            // The first group starts from the constant: `c + w_1 T_1`.
            // SAFETY: forwarded.
            unsafe {
                group_row(
                    out,
                    extent,
                    r,
                    sources,
                    *weight,
                    (g == 0).then_some(constant),
                )
            };
        }
    }
}

/// `o += w * pairwise_sum(sources)` ([`crate::kernel::pairwise_sum`]) at
/// every point of row `r` of a block, or `o = c + w * ...` with
/// `start: Some(c)`, for one to [`MAX_GROUP_SOURCES`] sources: one
/// vectorised loop.
///
/// # Safety
/// As [`linear`], and `r` is a row of `extent`.
#[inline(always)]
unsafe fn group_row(
    out: OutStream,
    extent: Extent,
    r: usize,
    sources: &[Stream],
    w: f64,
    start: Option<f64>,
) {
    let n = extent.n;
    // SAFETY: the caller's contract: the output covers `extent` and
    // overlaps no input.
    let o = unsafe {
        std::slice::from_raw_parts_mut(out.pointer.offset(r as isize * out.row_stride), n)
    };
    // SAFETY: as above, for every stream.
    let input = |k: usize| unsafe { std::slice::from_raw_parts(sources[k].on_row(r).pointer, n) };
    let first = || std::array::from_fn::<_, 4, _>(input);
    let rest = |k: usize| input(4 + k);
    match sources.len() {
        1 => small_group::<1>(o, std::array::from_fn(input), w, start),
        2 => small_group::<2>(o, std::array::from_fn(input), w, start),
        3 => small_group::<3>(o, std::array::from_fn(input), w, start),
        4 => small_group::<4>(o, std::array::from_fn(input), w, start),
        5 => large_group::<1>(o, first(), std::array::from_fn(rest), w, start),
        6 => large_group::<2>(o, first(), std::array::from_fn(rest), w, start),
        7 => large_group::<3>(o, first(), std::array::from_fn(rest), w, start),
        8 => large_group::<4>(o, first(), std::array::from_fn(rest), w, start),
        _ => unreachable!("groups hold one to MAX_GROUP_SOURCES sources"),
    }
}

/// `o += w * tree_sum(sources)` at every point of a row, for one to four
/// sources: one loop, which vectorises.
#[inline(always)]
fn small_group<const M: usize>(o: &mut [f64], sources: [&[f64]; M], w: f64, start: Option<f64>) {
    let n = o.len();
    let s = sources.map(|x| &x[..n]);
    match start {
        Some(c) => {
            for (i, o) in o.iter_mut().enumerate() {
                // SAFETY: `i` is below `n`, the length of every row of `s`.
                *o = c + w * unsafe { tree_at::<M>(&s, i) };
            }
        }
        None => {
            for (i, o) in o.iter_mut().enumerate() {
                // SAFETY: as above.
                *o += w * unsafe { tree_at::<M>(&s, i) };
            }
        }
    }
}

/// `o += w * (tree_sum(first) + tree_sum(rest))` for five to eight
/// sources: the pairwise tree of `4 + K` values is the tree of the first
/// four plus the tree of the other `K`.
#[inline(always)]
fn large_group<const K: usize>(
    o: &mut [f64],
    first: [&[f64]; 4],
    rest: [&[f64]; K],
    w: f64,
    start: Option<f64>,
) {
    let n = o.len();
    let (a, b) = (first.map(|x| &x[..n]), rest.map(|x| &x[..n]));
    match start {
        Some(c) => {
            for (i, o) in o.iter_mut().enumerate() {
                // SAFETY: `i` is below `n`, the length of every row of `a` and `b`.
                *o = c + w * unsafe { tree_at::<4>(&a, i) + tree_at::<K>(&b, i) };
            }
        }
        None => {
            for (i, o) in o.iter_mut().enumerate() {
                // SAFETY: as above.
                *o += w * unsafe { tree_at::<4>(&a, i) + tree_at::<K>(&b, i) };
            }
        }
    }
}

/// The pairwise sum of `M` (one to four) values at point `i`.
///
/// # Safety
/// `i` is below the length of every row in `s`.
#[inline(always)]
unsafe fn tree_at<const M: usize>(s: &[&[f64]; M], i: usize) -> f64 {
    // SAFETY: the caller keeps `i` in every row. Unchecked reads: with
    // bounds checks on four to eight rows per point the loops did not
    // vectorise (the grouped ExprLib diffusion ran 15-25 % slower in cache).
    let v = |k: usize| unsafe { *s[k].get_unchecked(i) };
    match M {
        1 => v(0),
        2 => v(0) + v(1),
        3 => (v(0) + v(1)) + v(2),
        _ => (v(0) + v(1)) + (v(2) + v(3)),
    }
}

/// Shapes of fused product factors (see [`crate::kernel::fusable_factor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FactorShape {
    Plain,
    Sum,
    Minus,
}

fn factor_shape(factor: &Resolved) -> FactorShape {
    match factor {
        Resolved::Two(_, _, _, w1) if *w1 == 1.0 => FactorShape::Sum,
        Resolved::Two(..) => FactorShape::Minus,
        _ => FactorShape::Plain,
    }
}

/// Lanes built from a fused factor of their shape.
trait Factor: Lane {
    fn from_resolved(factor: Resolved) -> Self;
}
impl Factor for Plain {
    fn from_resolved(factor: Resolved) -> Self {
        match factor {
            Resolved::One(s, _) => Plain(s),
            _ => unreachable!("shape checked by factor_shape"),
        }
    }
}
impl Factor for Sum {
    fn from_resolved(factor: Resolved) -> Self {
        match factor {
            Resolved::Two(s0, _, s1, _) => Sum(s0, s1),
            _ => unreachable!("shape checked by factor_shape"),
        }
    }
}
impl Factor for Minus {
    fn from_resolved(factor: Resolved) -> Self {
        match factor {
            Resolved::Two(s0, _, s1, _) => Minus(s0, s1),
            _ => unreachable!("shape checked by factor_shape"),
        }
    }
}

/// `out = start + sum_k w_k * left_k * right_k` (`ASSIGN`) or
/// `out += sum_k ...` for `K` products of one shape, in one pass.
///
/// # Safety
/// As [`linear`].
#[inline(always)]
unsafe fn product_lanes<A: Factor, B: Factor, const K: usize, const ASSIGN: bool>(
    out: OutStream,
    extent: Extent,
    group: &[(f64, Resolved, Resolved)],
    start: f64,
) {
    let weights: [f64; K] = std::array::from_fn(|k| group[k].0);
    let lefts: [A; K] = std::array::from_fn(|k| A::from_resolved(group[k].1));
    let rights: [B; K] = std::array::from_fn(|k| B::from_resolved(group[k].2));
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let o = std::slice::from_raw_parts_mut(
                out.pointer.offset(r as isize * out.row_stride),
                extent.n,
            );
            let lefts = lefts.map(|l| l.on_row(r));
            let rights = rights.map(|l| l.on_row(r));
            for (i, o) in o.iter_mut().enumerate() {
                let mut accumulator = if ASSIGN { start } else { *o };
                for k in 0..K {
                    accumulator += weights[k] * (lefts[k].at(i) * rights[k].at(i));
                }
                *o = accumulator;
            }
        }
    }
}

/// Most products evaluated in one pass (more streams per loop gained nothing
/// on the development machine; see docs/benchmarks.md).
const MAX_FUSED_PRODUCTS: usize = 3;

two_builds! {
    /// Dispatches a group of up to [`MAX_FUSED_PRODUCTS`] same-shape products
    /// to the AVX2 build of its loops where the CPU has AVX2 (the bits are
    /// the same: see [`two_builds`]).
    ///
    /// # Safety
    /// As [`linear`].
    product_pass, product_pass_avx2 => product_pass_rows(
        out: OutStream,
        extent: Extent,
        group: &[(f64, Resolved, Resolved)],
        assign: bool,
        start: f64,
    )
}

/// The loops of [`product_pass`], built into each of its entry points.
///
/// # Safety
/// As [`linear`].
#[inline(always)]
unsafe fn product_pass_rows(
    out: OutStream,
    extent: Extent,
    group: &[(f64, Resolved, Resolved)],
    assign: bool,
    start: f64,
) {
    macro_rules! count {
        ($a:ty, $b:ty) => {
            match (group.len(), assign) {
                (1, true) => product_lanes::<$a, $b, 1, true>(out, extent, group, start),
                (1, false) => product_lanes::<$a, $b, 1, false>(out, extent, group, start),
                (2, true) => product_lanes::<$a, $b, 2, true>(out, extent, group, start),
                (2, false) => product_lanes::<$a, $b, 2, false>(out, extent, group, start),
                (3, true) => product_lanes::<$a, $b, 3, true>(out, extent, group, start),
                (3, false) => product_lanes::<$a, $b, 3, false>(out, extent, group, start),
                (4, true) => product_lanes::<$a, $b, 4, true>(out, extent, group, start),
                (4, false) => product_lanes::<$a, $b, 4, false>(out, extent, group, start),
                (5, true) => product_lanes::<$a, $b, 5, true>(out, extent, group, start),
                (5, false) => product_lanes::<$a, $b, 5, false>(out, extent, group, start),
                (6, true) => product_lanes::<$a, $b, 6, true>(out, extent, group, start),
                (6, false) => product_lanes::<$a, $b, 6, false>(out, extent, group, start),
                _ => unreachable!("groups hold one to six products"),
            }
        };
    }
    use FactorShape as F;
    // SAFETY: forwarded.
    unsafe {
        match (factor_shape(&group[0].1), factor_shape(&group[0].2)) {
            (F::Plain, F::Plain) => count!(Plain, Plain),
            (F::Plain, F::Sum) => count!(Plain, Sum),
            (F::Plain, F::Minus) => count!(Plain, Minus),
            (F::Sum, F::Plain) => count!(Sum, Plain),
            (F::Sum, F::Sum) => count!(Sum, Sum),
            (F::Sum, F::Minus) => count!(Sum, Minus),
            (F::Minus, F::Plain) => count!(Minus, Plain),
            (F::Minus, F::Sum) => count!(Minus, Sum),
            (F::Minus, F::Minus) => count!(Minus, Minus),
        }
    }
}

/// `out = value(i, j, k)` over a block whose first point is `first` (x,
/// first row, plane), on rows shifted by `row_offset` (dy, dz).
///
/// # Safety
/// `out` covers `extent`.
unsafe fn fill_points(
    out: OutStream,
    extent: Extent,
    first: [isize; 3],
    row_offset: [isize; 2],
    value: impl Fn([isize; 3]) -> f64,
) {
    let [start, j0, k] = first;
    for r in 0..extent.rows {
        // SAFETY: guaranteed by the caller.
        let o = unsafe {
            std::slice::from_raw_parts_mut(
                out.pointer.offset(r as isize * out.row_stride),
                extent.n,
            )
        };
        let (j, kk) = (j0 + r as isize + row_offset[0], k + row_offset[1]);
        for (i, o) in o.iter_mut().enumerate() {
            *o = value([start + i as isize, j, kk]);
        }
    }
}

/// One row of an inter-grid operator: `out[i]` is the restriction or
/// prolongation of `field` (on the other grid) at point `(start + i, row)`
/// of the result's grid. The row's reads are checked against the field's
/// length before any is made.
fn transfer_row(
    out: &mut [f64],
    op: StencilOp,
    field: &FieldData<'_>,
    start: isize,
    row: [isize; 2],
) {
    if out.is_empty() {
        return;
    }
    let last = start + out.len() as isize - 1;
    let index = |point: [isize; 3]| {
        field.origin
            + point[0] * field.strides[0]
            + point[1] * field.strides[1]
            + point[2] * field.strides[2]
    };
    let Some(reads) = op.transfer_reads(&IndexBox::new(
        [start, row[0], row[1]],
        [last + 1, row[0] + 1, row[1] + 1],
    )) else {
        unreachable!("Transfer instructions hold inter-grid operators");
    };
    // The binding checks make this unreachable; it keeps a bug from
    // reading foreign memory.
    assert!(
        index(reads.lo) >= 0
            && (index([reads.hi[0] - 1, reads.hi[1] - 1, reads.hi[2] - 1]) as usize) < field.len,
        "inter-grid read outside the field's data"
    );
    // SAFETY (both arms): every index read lies in `reads` (the operator's
    // footprint of this row), whose first and last points were checked
    // above; strides are positive, so every point between is in bounds.
    match op {
        StencilOp::Restrict { ratio } => {
            let r = ratio.map(|r| r as isize);
            let children: SmallVec<[isize; 8]> = IndexBox::new([0; 3], r)
                .iter()
                .map(|c| {
                    c[0] * field.strides[0] + c[1] * field.strides[1] + c[2] * field.strides[2]
                })
                .collect();
            let weight = 1.0 / children.len() as f64;
            let first = index([r[0] * start, r[1] * row[0], r[2] * row[1]]);
            for (i, o) in out.iter_mut().enumerate() {
                let at = first + r[0] * field.strides[0] * i as isize;
                let mut sum = 0.0;
                for c in &children {
                    // SAFETY: `at + c` is a child inside `reads`, checked above.
                    sum += unsafe { *field.pointer.offset(at + c) };
                }
                *o = weight * sum;
            }
        }
        StencilOp::Prolongate { ratio } => {
            let r = ratio.map(|r| r as isize);
            let refined: SmallVec<[usize; 3]> = (0..3).filter(|&a| r[a] == 2).collect();
            let corners = 1usize << refined.len();
            for (i, o) in out.iter_mut().enumerate() {
                let point = [start + i as isize, row[0], row[1]];
                let parent = index([0, 1, 2].map(|a| point[a].div_euclid(r[a])));
                let mut value = 0.0;
                for corner in 0..corners {
                    let (mut at, mut w) = (parent, 1.0);
                    for (bit, &axis) in refined.iter().enumerate() {
                        if corner >> bit & 1 == 1 {
                            let stride = field.strides[axis];
                            at += if point[axis].rem_euclid(2) == 0 {
                                -stride
                            } else {
                                stride
                            };
                            w *= 0.25;
                        } else {
                            w *= 0.75;
                        }
                    }
                    // SAFETY: `at` is the parent or its neighbour, inside
                    // `reads`, checked above.
                    value += w * unsafe { *field.pointer.offset(at) };
                }
                *o = value;
            }
        }
        _ => unreachable!("Transfer instructions hold inter-grid operators"),
    }
}

/// A block: x in `x0..x1`, rows `j0..j0 + rows` of the planes
/// `k..k + planes` (more than one plane only for compiled kernels that
/// write the target directly, see [`Plan::new`]).
#[derive(Debug, Clone, Copy)]
struct Block {
    x0: isize,
    x1: isize,
    j0: isize,
    rows: usize,
    k: isize,
    planes: usize,
}

impl Block {
    /// The block of plane `k + q` alone.
    fn plane(self, q: usize) -> Block {
        Block {
            k: self.k + q as isize,
            planes: 1,
            ..self
        }
    }
}

/// The arguments of a compiled kernel that do not change between blocks.
struct NativeArguments<'a> {
    kernel: &'a NativeKernel,
    /// Per field slot: its point (0, 0, 0) (may lie outside the allocation
    /// for fields without ghosts; only used with in-bounds offsets).
    pointers: SmallVec<[*const f64; 8]>,
    /// Per field slot: y and z strides, and the geometry (from the plan).
    plan: &'a Plan,
}

// SAFETY: the pointers are only read, under the same rules as
// `FieldData`'s (see its `Send`/`Sync`).
unsafe impl Send for NativeArguments<'_> {}
// SAFETY: as above.
unsafe impl Sync for NativeArguments<'_> {}

/// Registers for one evaluation, from a process-wide pool and given back
/// when dropped: a small evaluation (a boundary layer, a coarse multigrid
/// level) runs many times, and allocating and freeing its registers cost
/// more than its arithmetic. Every register point an instruction reads was
/// written before in the same block (invariant 5 of `evaluate.md`), so a
/// reused buffer is not cleared (clearing the registers of a 64^2 sweep,
/// tens of KiB, cost as much as the sweep's arithmetic); in builds with
/// debug assertions (the test suite) it is filled with NaN instead, so
/// that a read before a write shows as a non-finite result.
///
/// The pool is shared by all threads and every buffer in it is as large
/// as the largest request so far, so that once each kernel of a time step
/// has run and as many buffers as threads have been in use at once, no
/// later step allocates registers, whichever thread the scheduler puts a
/// node on. (Per-thread pools, handing out whichever buffer came back
/// last, grew a buffer now and then for as long as work stealing moved
/// large kernels onto a thread that had not run one before.)
struct Scratch {
    /// Always `largest` points long (the pool's largest request when it
    /// was taken), so that reuse never zero-fills a tail again.
    values: Vec<f64>,
    /// The points handed out: `values[..len]`.
    len: usize,
}

/// Buffers the pool keeps; more given back at once are freed.
const SCRATCH_POOL_BUFFERS: usize = 256;

/// Free register buffers, the largest request so far, and how many
/// buffers exist (free or taken).
struct ScratchPool {
    buffers: Vec<Vec<f64>>,
    largest: usize,
    existing: usize,
}

static SCRATCH_POOL: std::sync::Mutex<ScratchPool> = std::sync::Mutex::new(ScratchPool {
    buffers: Vec::new(),
    largest: 0,
    existing: 0,
});

/// Makes sure enough buffers exist for every thread that may run a chunk
/// meanwhile to hold `per_thread` at once: called by a parallel loop
/// before each chunk takes its registers. A thread holds one chunk's
/// registers at a time (a chunk runs its blocks without waiting on other
/// work), so the buffers in use never outnumber those threads times the
/// most one chunk takes, and no step after the first allocates
/// registers, however the scheduler interleaves nodes (taking one buffer
/// at a time, a new buffer was made whenever an interleaving held more at
/// once than any before it). The threads are the current pool's and, as
/// many again as the machine has cores, those of another pool running at
/// the same time (a graph node on the graph's pool driving assignments on
/// a pool of its own, as the multigrid inside the projection's solve
/// node does).
fn reserve_scratch(per_thread: usize) {
    // Asked once: `available_parallelism` reads cgroup files on Linux,
    // which cost more than a small kernel.
    static CORES: OnceLock<usize> = OnceLock::new();
    let elsewhere =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let wanted = per_thread
        .saturating_mul(rayon::current_num_threads().saturating_add(elsewhere))
        .min(SCRATCH_POOL_BUFFERS);
    let (missing, largest) = {
        let mut pool = scratch_pool();
        if pool.existing >= wanted {
            return;
        }
        let missing = wanted - pool.existing;
        pool.existing = wanted;
        (missing, pool.largest)
    };
    let fresh: Vec<Vec<f64>> = (0..missing).map(|_| vec![0.0; largest]).collect();
    scratch_pool().buffers.extend(fresh);
}

/// The pool, also after a panic elsewhere while it was locked: its buffers
/// are plain memory whose values nobody relies on.
fn scratch_pool() -> std::sync::MutexGuard<'static, ScratchPool> {
    SCRATCH_POOL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Scratch {
    /// `len` registers points (initialised memory; see the type's doc for
    /// their values).
    fn take(len: usize) -> Scratch {
        let (reused, largest) = {
            let mut pool = scratch_pool();
            if len > pool.largest {
                // Grow every free buffer now, while this request is new
                // (a first step), not when a later step happens to take
                // one that no step has used yet (the reserve's spares).
                pool.largest = len;
                for buffer in &mut pool.buffers {
                    buffer.resize(len, 0.0);
                }
            }
            // All buffers are normally of the largest size; the smallest
            // that fits keeps the others for larger requests.
            let fitting = pool
                .buffers
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            let index = fitting.or_else(|| pool.buffers.len().checked_sub(1));
            if index.is_none() {
                pool.existing += 1;
            }
            (index.map(|i| pool.buffers.swap_remove(i)), pool.largest)
        };
        let mut values = reused.unwrap_or_default();
        if values.len() < largest {
            values.reserve_exact(largest - values.len());
            values.resize(largest, 0.0);
        }
        if cfg!(debug_assertions) {
            values[..len].fill(f64::NAN);
        }
        Scratch { values, len }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut values = std::mem::take(&mut self.values);
        let largest = scratch_pool().largest;
        // A buffer out while a larger request came is grown now, in the
        // step that made that request, not in a later one that takes it.
        if values.len() < largest {
            values.reserve_exact(largest - values.len());
            values.resize(largest, 0.0);
        }
        let mut pool = scratch_pool();
        if pool.buffers.len() < SCRATCH_POOL_BUFFERS {
            pool.buffers.push(values);
        } else {
            pool.existing = pool.existing.saturating_sub(1);
        }
    }
}

impl std::ops::Deref for Scratch {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.values[..self.len]
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f64] {
        &mut self.values[..self.len]
    }
}

/// Everything a block needs, shared by all threads.
struct Context<'a> {
    kernel: &'a Kernel,
    /// The compiled kernel and its fixed arguments; `None`: interpret.
    native: Option<NativeArguments<'a>>,
    fields: &'a [FieldData<'a>],
    /// Parameter values by slot, read once when the evaluation started.
    parameters: &'a [f64],
    /// The patch, for the layouts coordinates and masks read.
    patch: &'a Patch,
    /// The layout of each location on the patch, by [`LocationKind::ALL`]
    /// order, made on first use (most kernels read none).
    layouts: [std::sync::OnceLock<Box<FieldLayout>>; 4],
    /// Points per register row (largest block width plus halos).
    width: usize,
    /// Rows per register.
    rows: usize,
    halo: isize,
}

/// What evaluating a kernel over a region fixes before its first block:
/// the row groups, the register shape and, for a compiled kernel, the
/// slots' strides and the patch geometry it is called with. It depends on
/// the kernel, the region and the layouts of the fields (not on their
/// data), so a prepared assignment makes it once and reuses it while those
/// stay the same (`watershed_operators::prepared`); other calls make it per call.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The region's row groups in (k, j) order.
    groups: SmallVec<[RowGroup; 8]>,
    /// The same groups in the order an assignment visits them when the
    /// planes are too large for the cache (see [`band_order`]); empty when
    /// that order is `groups`'.
    bands: Vec<RowGroup>,
    width: usize,
    rows: usize,
    halo: isize,
    /// Per field slot: y and z strides (compiled kernels).
    strides: SmallVec<[i64; 16]>,
    /// Coordinates and boundary masks (compiled kernels).
    geometry: Vec<f64>,
}

impl Plan {
    /// The plan of `kernel` over `region` with fields like `fields`.
    pub fn new(
        kernel: &Kernel,
        native: bool,
        fields: &[FieldData<'_>],
        patch: &Patch,
        region: &IndexBox,
    ) -> Plan {
        let [nx, ny, _] = region.extent();
        let tile = nx.clamp(1, TILE);
        // Bigger blocks share each instruction call's overhead among more
        // points; registers must still fit in L1 (about 64 KiB of them).
        let block_points = (L1_REGISTER_BYTES / (8 * kernel.registers.max(1)))
            .clamp(MIN_BLOCK_POINTS, BLOCK_POINTS);
        let rows = (block_points / tile).clamp(1, ny.max(1));
        // A compiled kernel that writes the target directly (nothing of
        // its rows is read back from the scratch after the call) runs the
        // same rows of several planes in one call when a plane has fewer
        // rows than a block holds: a ghost layer normal to y is one row
        // per plane, and one call per plane cost more than its points.
        let planes_per_group = if runs_many_planes(kernel, native) && rows >= ny {
            (block_points / (tile * ny.max(1))).max(1)
        } else {
            1
        };
        let mut groups: SmallVec<[RowGroup; 8]> = SmallVec::new();
        let mut first_row = 0;
        let mut k = region.lo[2];
        while k < region.hi[2] {
            let planes = planes_per_group.min((region.hi[2] - k) as usize);
            let mut j0 = region.lo[1];
            while j0 < region.hi[1] {
                let count = rows.min((region.hi[1] - j0) as usize);
                groups.push(RowGroup {
                    j0,
                    rows: count,
                    k,
                    planes,
                    first_row,
                });
                first_row += count * planes;
                j0 += count as isize;
            }
            k += planes as isize;
        }
        let bands = band_order(kernel, fields, region, rows, &groups);
        let (strides, geometry) = if native {
            (
                fields
                    .iter()
                    .flat_map(|f| [f.strides[1] as i64, f.strides[2] as i64])
                    .collect(),
                crate::codegen::emit::geometry(kernel, patch),
            )
        } else {
            (SmallVec::new(), Vec::new())
        };
        Plan {
            groups,
            bands,
            width: tile + 2 * kernel.halo as usize,
            rows,
            halo: kernel.halo,
            strides,
            geometry,
        }
    }
}

impl Plan {
    /// The row groups in the order an assignment visits them.
    fn assignment_order(&self) -> &[RowGroup] {
        if self.bands.is_empty() {
            &self.groups
        } else {
            &self.bands
        }
    }
}

/// Bytes of the rows an assignment keeps in cache between planes: the
/// planes a stencil reads along z stay in L2 (512 KiB on the smallest
/// current server cores) when a plane's rows fit in it.
const BAND_BYTES: usize = 512 * 1024;

/// The row groups of `groups` (in (k, j) order, `rows` rows each except a
/// plane's last) in *band* order, or nothing when (k, j) order is kept.
///
/// A kernel that reads a field at z offsets reads each of its planes
/// again for the next planes (three times for a 7-point stencil). In
/// (k, j) order the reuse distance is whole planes of every field, which
/// at 256^2 points per plane (0.5 MiB per field) is beyond L2, so each
/// plane is read from L3 or memory up to three times. Band order cuts the
/// planes into bands of whole groups, `j0..j0 + band`, and runs every
/// plane of one band before the next band, so the reuse distance is a few
/// band-planes, sized to [`BAND_BYTES`]. Bands only reorder the groups an
/// assignment visits; each group's points, blocks and arithmetic are
/// unchanged, and every point is written once by one kernel call that
/// reads no point another group writes (`evaluate.md`, aliasing rules), so
/// the values are bitwise the same in either order.
fn band_order(
    kernel: &Kernel,
    fields: &[FieldData<'_>],
    region: &IndexBox,
    rows: usize,
    groups: &[RowGroup],
) -> Vec<RowGroup> {
    let [_, ny, nz] = region.extent();
    // Bytes per row of a band that stay in cache for the z reuse: every
    // plane a field's z extent spans, and the target row.
    let mut row_bytes = 8 * region.extent()[0];
    let mut reads_along_z = false;
    for (field, data) in kernel.fields.iter().zip(fields) {
        let span = (field.extent.max[2] - field.extent.min[2]).max(0) as usize;
        if field.transfer.is_some() {
            continue;
        }
        reads_along_z |= span > 0;
        row_bytes = row_bytes.saturating_add(8 * data.strides[1].max(1) as usize * (span + 1));
    }
    let plane_bytes = row_bytes.saturating_mul(ny);
    if !reads_along_z || nz < 3 || rows >= ny || plane_bytes <= BAND_BYTES {
        return Vec::new();
    }
    let groups_per_plane = ny.div_ceil(rows);
    let band = (BAND_BYTES / row_bytes / rows).max(1);
    if band >= groups_per_plane || groups.len() != groups_per_plane * nz {
        return Vec::new();
    }
    let mut order = Vec::with_capacity(groups.len());
    for first in (0..groups_per_plane).step_by(band) {
        let last = (first + band).min(groups_per_plane);
        for plane in 0..nz {
            order.extend_from_slice(
                &groups[plane * groups_per_plane + first..plane * groups_per_plane + last],
            );
        }
    }
    order
}

impl Context<'_> {
    /// The layout of `kind` on the patch.
    fn layout(&self, kind: LocationKind) -> &FieldLayout {
        self.layouts[kind_index(kind)].get_or_init(|| Box::new(FieldLayout::new(self.patch, kind)))
    }

    fn register_len(&self) -> usize {
        self.width * self.rows
    }

    fn scratch(&self) -> Scratch {
        Scratch::take(self.kernel.registers.max(1) * self.register_len())
    }

    /// Runs the compiled kernel over `block`, after checking the block's
    /// first and last read of every field and its target rows against
    /// the allocations (as the interpreter's stream asserts do).
    fn run_native(
        &self,
        native: &NativeArguments<'_>,
        scratch: &mut [f64],
        target: Option<&TargetData>,
        block: Block,
    ) -> bool {
        let Block {
            x0,
            x1,
            j0,
            rows,
            k,
            planes,
        } = block;
        let last_row = j0 + rows as isize - 1;
        let last_plane = k + planes as isize - 1;
        // One plane per call when the result is read back from the scratch
        // rows (each plane would overwrite the last).
        assert!(
            planes == 1 || self.kernel.result == OUTPUT,
            "a kernel whose result goes to the scratch runs one plane per call"
        );
        for (slot, field) in self.kernel.fields.iter().enumerate() {
            if field.transfer.is_some() {
                continue; // checked per row by the binding's footprint check
            }
            let f = &self.fields[slot];
            let (min, max) = (field.extent.min, field.extent.max);
            let first = f.origin
                + (x0 + min[0])
                + (j0 + min[1]) * f.strides[1]
                + (k + min[2]) * f.strides[2];
            let last = f.origin
                + (x1 - 1 + max[0])
                + (last_row + max[1]) * f.strides[1]
                + (last_plane + max[2]) * f.strides[2];
            assert!(
                first >= 0 && (last as usize) < f.len,
                "field read outside its data"
            );
        }
        let (t_pointer, tsy, tsz) = match target {
            Some(t) => {
                let first = t.origin + x0 + j0 * t.strides[1] + k * t.strides[2];
                let last =
                    t.origin + (x1 - 1) + last_row * t.strides[1] + last_plane * t.strides[2];
                assert!(
                    first >= 0 && (last as usize) < t.len,
                    "target write outside the target"
                );
                (
                    t.pointer.wrapping_offset(t.origin),
                    t.strides[1] as i64,
                    t.strides[2] as i64,
                )
            }
            None => (std::ptr::null_mut(), 0, 0),
        };
        assert!(
            scratch.len() >= self.kernel.registers * self.register_len(),
            "scratch smaller than the kernel's registers"
        );
        // The plan may come from a preparation: its arrays must still fit
        // this call's slots (one pointer, two strides each).
        assert!(
            native.pointers.len() == self.fields.len()
                && native.plan.strides.len() == 2 * self.fields.len(),
            "kernel arguments do not match the bound fields"
        );
        // SAFETY: the function was generated from `self.kernel` with the
        // signature `KernelFn`; it reads one pointer and two strides per
        // slot (lengths checked above) and the geometry its kernel needs
        // (made from the same kernel and patch); every read lies inside
        // its field (checked above, transfers by the binding), writes go
        // to this block's rows of the target (checked above) or to
        // `scratch` (checked above), and the invariants of the design note
        // hold (no loop-carried dependence through the target: it is read
        // only at a point's own offset or where the kernel does not write).
        unsafe {
            let not_finite = (native.kernel.function)(
                native.pointers.as_ptr(),
                native.plan.strides.as_ptr(),
                self.parameters.as_ptr(),
                native.plan.geometry.as_ptr(),
                t_pointer,
                tsy,
                tsz,
                scratch.as_mut_ptr(),
                self.width as i64,
                self.rows as i64,
                self.halo as i64,
                x0 as i64,
                x1 as i64,
                j0 as i64,
                rows as i64,
                k as i64,
                planes as i64,
            );
            // A kernel generated without the test returns 0 whatever it
            // wrote: its rows may not be finite, for a watching caller to
            // scan.
            not_finite != 0 || !native.kernel.checks_finite()
        }
    }

    /// Runs every instruction of the kernel over `block`. Returns false
    /// when the values written to the target are known to be finite (a
    /// generated kernel with [`FiniteCheck::Checked`] tests what it writes
    /// to `t`), true when they may not be (the interpreter and unchecked
    /// kernels do not test; a watching caller scans).
    ///
    /// [`FiniteCheck::Checked`]: crate::codegen::FiniteCheck::Checked
    fn run_block(&self, scratch: &mut [f64], target: Option<&TargetData>, block: Block) -> bool {
        if let Some(native) = &self.native {
            return self.run_native(native, scratch, target, block);
        }
        if block.planes > 1 {
            let mut may_be_bad = false;
            for q in 0..block.planes {
                may_be_bad |= self.run_block(scratch, target, block.plane(q));
            }
            return may_be_bad;
        }
        let kernel = self.kernel;
        let base = scratch.as_mut_ptr();
        let (width, register_len) = (self.width as isize, self.register_len() as isize);
        let Block {
            x0,
            x1,
            j0,
            rows,
            k,
            planes: _,
        } = block;
        let last_row = rows as isize - 1;
        for instruction in &kernel.instructions {
            let out_register = instruction.out();
            let (lo, hi) = if out_register == OUTPUT {
                (0, 0)
            } else {
                kernel.extensions[out_register as usize]
            };
            let start = x0 + lo;
            let n = (x1 + hi - start) as usize;
            let extent = Extent { n, rows };
            let stream = |source: Source| -> Stream {
                match source {
                    Source::Field { slot, offset } => {
                        let f = &self.fields[slot as usize];
                        let first = f.origin
                            + (start + offset[0])
                            + (j0 + offset[1]) * f.strides[1]
                            + (k + offset[2]) * f.strides[2];
                        let end = first + last_row * f.strides[1] + n as isize;
                        // The region check makes this unreachable; it keeps a
                        // bug from reading foreign memory.
                        assert!(
                            first >= 0 && end as usize <= f.len,
                            "field read outside its data"
                        );
                        Stream {
                            // SAFETY: in bounds (checked above).
                            pointer: unsafe { f.pointer.offset(first) },
                            row_stride: f.strides[1],
                        }
                    }
                    Source::Register { register, shift } => {
                        let own = register as isize * register_len;
                        let first = own + (start + shift - x0 + self.halo);
                        let end = first + last_row * width + n as isize;
                        assert!(
                            first >= own && end <= own + register_len,
                            "register read outside its block"
                        );
                        Stream {
                            // SAFETY: in bounds of `scratch` (checked above).
                            pointer: unsafe { base.offset(first) as *const f64 },
                            row_stride: width,
                        }
                    }
                }
            };
            let resolve = |operand: &Operand| -> Resolved {
                match *operand {
                    Operand::Constant(c) => Resolved::Constant(c),
                    Operand::One(s, w) => Resolved::One(stream(s), w),
                    Operand::Two(s0, w0, s1, w1) => Resolved::Two(stream(s0), w0, stream(s1), w1),
                }
            };
            let out = if out_register == OUTPUT {
                let t = target.expect("kernels writing the target run with one");
                let first = t.origin + start + j0 * t.strides[1] + k * t.strides[2];
                let end = first + last_row * t.strides[1] + n as isize;
                assert!(
                    first >= 0 && end as usize <= t.len,
                    "target write outside the target"
                );
                OutStream {
                    // SAFETY: in bounds (checked above).
                    pointer: unsafe { t.pointer.offset(first) },
                    row_stride: t.strides[1],
                }
            } else {
                let own = out_register as isize * register_len;
                let first = own + lo + self.halo;
                assert!(
                    first >= own && first + last_row * width + n as isize <= own + register_len
                );
                OutStream {
                    // SAFETY: in bounds of `scratch` (checked above).
                    pointer: unsafe { base.offset(first) },
                    row_stride: width,
                }
            };
            // SAFETY (every call below): all streams were bounds-checked for
            // this extent; the output is this instruction's own register or
            // this block's rows of the target, which no input overlaps
            // (registers are written once, before their readers; aliasing of
            // fields and target is refused before evaluation).
            unsafe {
                match instruction {
                    Instruction::Linear { form, products, .. } => {
                        let terms: smallvec::SmallVec<[(Stream, f64); 8]> =
                            form.terms.iter().map(|(s, w)| (stream(*s), *w)).collect();
                        // A constant alone is the first product pass's start value.
                        let mut assigned = false;
                        if !terms.is_empty() || products.is_empty() {
                            // The generated code leaves a zero constant out of
                            // a sum of terms; `-0.0 + v` is `v` bit for bit.
                            let constant = if form.constant == 0.0 && !terms.is_empty() {
                                -0.0
                            } else {
                                form.constant
                            };
                            let as_differences = form.is_differences();
                            if form.shares_weights() && !as_differences {
                                let groups: SmallVec<
                                    [(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>); 8],
                                > = form
                                    .groups()
                                    .iter()
                                    .map(|g| {
                                        (g.weight, g.sources.iter().map(|s| stream(*s)).collect())
                                    })
                                    .collect();
                                grouped_linear(out, extent, constant, &groups);
                            } else {
                                linear(out, extent, constant, &terms, as_differences);
                            }
                            assigned = true;
                        }
                        let products: smallvec::SmallVec<[(f64, Resolved, Resolved); 4]> = products
                            .iter()
                            .map(|(w, l, r)| (*w, resolve(l), resolve(r)))
                            .collect();
                        let mut rest = products.as_slice();
                        while !rest.is_empty() {
                            let shape = (factor_shape(&rest[0].1), factor_shape(&rest[0].2));
                            let count = rest
                                .iter()
                                .take(MAX_FUSED_PRODUCTS)
                                .take_while(|(_, l, r)| (factor_shape(l), factor_shape(r)) == shape)
                                .count();
                            product_pass(out, extent, &rest[..count], !assigned, form.constant);
                            assigned = true;
                            rest = &rest[count..];
                        }
                    }
                    Instruction::Unary { op, arg, .. } => {
                        dispatch_unary!(*op, out, extent, resolve(arg))
                    }
                    Instruction::Binary {
                        op, left, right, ..
                    } => {
                        dispatch_binary!(*op, out, extent, resolve(left), resolve(right))
                    }
                    Instruction::Select {
                        condition,
                        if_true,
                        if_false,
                        ..
                    } => {
                        let (c, t, f) = (resolve(condition), resolve(if_true), resolve(if_false));
                        select(out, extent, c, t, f);
                    }
                    Instruction::Coordinate {
                        axis,
                        location,
                        row_offset,
                        ..
                    } => {
                        let layout = self.layout(*location);
                        fill_points(out, extent, [start, j0, k], *row_offset, |index| {
                            layout.coordinate(index)[*axis]
                        });
                    }
                    Instruction::Mask {
                        set,
                        location,
                        row_offset,
                        ..
                    } => {
                        let layout = self.layout(*location);
                        fill_points(out, extent, [start, j0, k], *row_offset, |index| {
                            f64::from(set.contains(index, layout))
                        });
                    }
                    Instruction::Parameter { slot, .. } => {
                        let value = self
                            .parameters
                            .get(*slot as usize)
                            .copied()
                            .unwrap_or(f64::NAN);
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            o.fill(value);
                        }
                    }
                    Instruction::Transfer {
                        op,
                        slot,
                        row_offset,
                        ..
                    } => {
                        let field = &self.fields[*slot as usize];
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            let row = [j0 + r as isize + row_offset[0], k + row_offset[1]];
                            transfer_row(o, *op, field, start, row);
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
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            for (i, o) in o.iter_mut().enumerate() {
                                *o = if v.at(r, i) >= 0.0 {
                                    limiter.face_value(m2.at(r, i), m1.at(r, i), p0.at(r, i))
                                } else {
                                    limiter.face_value(p1.at(r, i), p0.at(r, i), m1.at(r, i))
                                };
                            }
                        }
                    }
                }
            }
        }
        true
    }

    /// Row `r` of the result register after a block of `n` points per row.
    fn result_row<'s>(&self, scratch: &'s [f64], r: usize, n: usize) -> &'s [f64] {
        let at =
            self.kernel.result as usize * self.register_len() + r * self.width + self.halo as usize;
        &scratch[at..at + n]
    }
}

/// Whether `kernel` may run several planes in one call: compiled, and
/// writing the target directly (a result in the scratch rows is read back
/// after each call, and each plane would overwrite the last).
fn runs_many_planes(kernel: &Kernel, native: bool) -> bool {
    native && kernel.result == OUTPUT
}

/// A run of rows of one plane, or the same rows of consecutive planes,
/// processed as blocks along x.
#[derive(Debug, Clone, Copy)]
struct RowGroup {
    j0: isize,
    rows: usize,
    k: isize,
    /// Planes `k..k + planes`; more than one only when the rows are all of
    /// the region's rows in a plane (see [`Plan::new`]).
    planes: usize,
    /// Index of the group's first row in the region's row numbering.
    first_row: usize,
}

/// The context, and the region's row groups in (k, j) order.
/// The position of `kind` in [`LocationKind::ALL`].
fn kind_index(kind: LocationKind) -> usize {
    match kind {
        LocationKind::CellCentre => 0,
        LocationKind::XFace => 1,
        LocationKind::YFace => 2,
        LocationKind::ZFace => 3,
    }
}

/// The context of `kernel` under `plan`.
fn context<'a>(
    kernel: &'a Kernel,
    native: Option<&'a NativeKernel>,
    fields: &'a [FieldData<'a>],
    parameters: &'a [f64],
    patch: &'a Patch,
    plan: &'a Plan,
) -> Context<'a> {
    let native = native.map(|native| NativeArguments {
        kernel: native,
        pointers: fields
            .iter()
            .map(|f| f.pointer.wrapping_offset(f.origin))
            .collect(),
        plan,
    });
    Context {
        kernel,
        native,
        fields,
        parameters,
        patch,
        layouts: Default::default(),
        width: plan.width,
        rows: plan.rows,
        halo: plan.halo,
    }
}

fn blocks_of<'r>(group: &RowGroup, region: &'r IndexBox) -> impl Iterator<Item = Block> + 'r {
    let group = *group;
    (region.lo[0]..region.hi[0])
        .step_by(TILE)
        .map(move |x0| Block {
            x0,
            x1: (x0 + TILE as isize).min(region.hi[0]),
            j0: group.j0,
            rows: group.rows,
            k: group.k,
            planes: group.planes,
        })
}

/// Splits `count` items into contiguous ranges for `threads` threads
/// (several per thread, for balance).
fn chunk_ranges(count: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let chunks = (threads * 4).clamp(1, count.max(1));
    (0..chunks)
        .map(|c| c * count / chunks..(c + 1) * count / chunks)
        .collect()
}

/// The earlier of two points in storage order (z, then y, then x).
fn earlier(a: Option<[isize; 3]>, b: Option<[isize; 3]>) -> Option<[isize; 3]> {
    match (a, b) {
        (Some(p), Some(q)) => Some(if (p[2], p[1], p[0]) <= (q[2], q[1], q[0]) {
            p
        } else {
            q
        }),
        (p, None) => p,
        (None, q) => q,
    }
}

/// A masked assignment run as a *row epilogue* of another kernel: right
/// after the main kernel has written a group of rows, this kernel fills its
/// points of the same rows (ghost points at the ends of the rows, read from
/// values just written and still in cache). The caller
/// (`watershed_operators::assign_node_then`) only builds one when the kernel
/// reads nothing but points of the same row inside the main region, so the
/// values are those of running it after the whole main kernel.
pub struct Epilogue<'a> {
    /// The masked assignment's kernel.
    pub kernel: &'a Kernel,
    /// Its compiled form, if it has one.
    pub native: Option<&'a NativeKernel>,
    /// The fields it reads, by slot.
    pub fields: &'a [FieldData<'a>],
    /// The values of the parameters it reads, by slot.
    pub parameters: &'a [f64],
    /// The points it writes (the part of its box in the main region's rows).
    pub region: IndexBox,
    /// Its plan over `region`.
    pub plan: &'a Plan,
    /// The same masked assignment as a plain copy or mirror of target
    /// points, when it has that shape: run instead of the kernel (the same
    /// values, without a kernel call per group of rows).
    pub fill: Option<PointFill>,
}

/// Runs `block` of `ctx`'s kernel, stores its rows (copying the result
/// register when the kernel reads the target) and, with `watch_finite`,
/// returns the first point written that is not finite.
fn run_and_store(
    ctx: &Context<'_>,
    scratch: &mut [f64],
    target: &TargetData,
    block: Block,
    watch_finite: bool,
) -> Option<[isize; 3]> {
    let may_be_bad = ctx.run_block(scratch, Some(target), block);
    let copy_result = ctx.kernel.result != OUTPUT;
    // The generated kernel checked the rows it wrote itself; a copied
    // result row (or the interpreter's output) is scanned here.
    let watch_finite = watch_finite && (copy_result || may_be_bad);
    if !copy_result && !watch_finite {
        return None; // the kernel wrote its rows itself (bounds checked there)
    }
    if block.planes > 1 {
        // Only kernels writing the target directly get several planes
        // (`Plan::new`): scan each plane's rows for the first bad point.
        return (0..block.planes)
            .map(|q| scan_rows(ctx, scratch, target, block.plane(q), false, watch_finite))
            .fold(None, earlier);
    }
    scan_rows(ctx, scratch, target, block, copy_result, watch_finite)
}

/// For the rows of one plane of `block`, just computed: copies the result
/// register into the target (`copy_result`) and, with `watch_finite`,
/// returns the first point written that is not finite.
fn scan_rows(
    ctx: &Context<'_>,
    scratch: &[f64],
    target: &TargetData,
    block: Block,
    copy_result: bool,
    watch_finite: bool,
) -> Option<[isize; 3]> {
    let n = (block.x1 - block.x0) as usize;
    let mut first_bad = None;
    for r in 0..block.rows {
        let first = target.origin
            + block.x0
            + (block.j0 + r as isize) * target.strides[1]
            + block.k * target.strides[2];
        assert!(
            first >= 0 && first as usize + n <= target.len,
            "target write outside the target"
        );
        if copy_result {
            let row = ctx.result_row(scratch, r, n);
            // SAFETY: in bounds (checked above); `row` is in the thread's
            // scratch, never in the target.
            unsafe {
                std::ptr::copy_nonoverlapping(row.as_ptr(), target.pointer.offset(first), n);
            }
        }
        if watch_finite {
            // SAFETY: in bounds (checked above); these are the rows this
            // block just wrote, which no other block reads or writes.
            let written = unsafe {
                std::slice::from_raw_parts(target.pointer.offset(first) as *const f64, n)
            };
            if !written.iter().fold(true, |ok, v| ok & v.is_finite()) {
                let i = written.iter().position(|v| !v.is_finite()).unwrap_or(0);
                first_bad = earlier(
                    first_bad,
                    Some([block.x0 + i as isize, block.j0 + r as isize, block.k]),
                );
            }
        }
    }
    first_bad
}

/// Runs `ctx`'s kernel over the rows `j_lo..j_hi` of the planes
/// `k_lo..k_hi` within `region` (split into blocks the context's
/// registers hold; a compiled kernel that writes the target directly takes
/// all the planes in each call).
fn run_rows(
    ctx: &Context<'_>,
    scratch: &mut [f64],
    target: &TargetData,
    region: &IndexBox,
    rows: (isize, isize, isize, isize),
) {
    let (j_lo, j_hi, k_lo, k_hi) = rows;
    let (j_lo, j_hi) = (j_lo.max(region.lo[1]), j_hi.min(region.hi[1]));
    let (k_lo, k_hi) = (k_lo.max(region.lo[2]), k_hi.min(region.hi[2]));
    if k_lo >= k_hi || j_lo >= j_hi || region.is_empty() {
        return;
    }
    let planes_per_call = if runs_many_planes(ctx.kernel, ctx.native.is_some()) {
        (k_hi - k_lo) as usize
    } else {
        1
    };
    let mut k = k_lo;
    while k < k_hi {
        let mut j0 = j_lo;
        while j0 < j_hi {
            let count = ctx.rows.min((j_hi - j0) as usize);
            let group = RowGroup {
                j0,
                rows: count,
                k,
                planes: planes_per_call,
                first_row: 0,
            };
            for block in blocks_of(&group, region) {
                run_and_store(ctx, scratch, target, block, false);
            }
            j0 += count as isize;
        }
        k += planes_per_call as isize;
    }
}

/// Evaluates `kernel` into `target` over `region`. With `watch_finite`,
/// each block's rows are scanned right after they are written (while they
/// are in cache) and the first point (z, y, x order) holding a value that
/// is not finite is returned; otherwise `None`. Every epilogue runs, in
/// order, over its points of the rows a thread has finished: after each
/// run of consecutive row groups of the same planes (`PendingRows`).
///
/// # Safety
/// The caller has done every check of `watershed_operators::assign`
/// (`evaluate.md` lists them as the evaluator's invariants): every point
/// the kernel reads over `region`, extended by the kernel's read extents,
/// lies inside the memory each [`FieldData`] describes; every point written
/// lies inside the target's memory; nothing else reads or writes the
/// target meanwhile, and a field that aliases the target is read only at
/// offset zero or outside the rows written. `plan` was made by
/// [`Plan::new`] for this kernel, region and field layouts.
/// Each epilogue's fields, target and region satisfy the same.
#[allow(clippy::too_many_arguments)]
pub unsafe fn assign(
    kernel: &Kernel,
    native: Option<&NativeKernel>,
    fields: &[FieldData<'_>],
    parameters: &[f64],
    patch: &Patch,
    target: TargetData,
    region: IndexBox,
    plan: &Plan,
    parallelism: Parallelism,
    watch_finite: bool,
    epilogues: &[Epilogue<'_>],
) -> Option<[isize; 3]> {
    if region.is_empty() {
        return None;
    }
    let ctx = context(kernel, native, fields, parameters, patch, plan);
    let groups = plan.assignment_order();
    let epilogue_contexts: SmallVec<[Context<'_>; 2]> = epilogues
        .iter()
        .map(|e| context(e.kernel, e.native, e.fields, e.parameters, patch, e.plan))
        .collect();
    let parallelism = if region.len() < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let member = Assignment {
        kernel,
        native,
        fields,
        parameters,
        target,
        region,
        watch_finite,
        epilogues,
    };
    let run_groups = |groups: &[RowGroup]| -> Option<[isize; 3]> {
        reserve_scratch(1 + epilogue_contexts.len());
        let mut scratch = ctx.scratch();
        let mut epilogue_scratch: SmallVec<[Scratch; 4]> =
            epilogue_contexts.iter().map(|c| c.scratch()).collect();
        let mut first_bad = None;
        let mut pending = None;
        for group in groups {
            let bad = run_group(&member, &ctx, &mut scratch, group);
            first_bad = earlier(first_bad, bad);
            if !epilogues.is_empty() {
                PendingRows::add(&mut pending, group, |rows| {
                    run_epilogues(&member, &epilogue_contexts, &mut epilogue_scratch, rows)
                });
            }
        }
        if let Some(rows) = pending {
            run_epilogues(&member, &epilogue_contexts, &mut epilogue_scratch, rows);
        }
        first_bad
    };
    run_in_chunks(parallelism, groups, run_groups, || None, earlier)
}

/// `run` over all of `items` (serial), or over contiguous chunks of them
/// on the threads of `parallelism`, the results combined with `merge`
/// (`identity` is its neutral element).
fn run_in_chunks<T: Sync, R: Send>(
    parallelism: Parallelism,
    items: &[T],
    run: impl Fn(&[T]) -> R + Sync + Send,
    identity: impl Fn() -> R + Sync + Send,
    merge: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    parallelism.run(|threads| {
        if threads <= 1 || items.len() < 2 {
            run(items)
        } else {
            chunk_ranges(items.len(), threads)
                .into_par_iter()
                .map(|range| run(&items[range]))
                .reduce(identity, merge)
        }
    })
}

/// Runs the blocks of one group of rows of `member`; returns the first
/// point written that is not finite when `member.watch_finite`. Its
/// epilogues run later, through [`PendingRows`].
fn run_group(
    member: &Assignment<'_>,
    ctx: &Context<'_>,
    scratch: &mut [f64],
    group: &RowGroup,
) -> Option<[isize; 3]> {
    let mut first_bad = None;
    for block in blocks_of(group, &member.region) {
        let bad = run_and_store(ctx, scratch, &member.target, block, member.watch_finite);
        first_bad = earlier(first_bad, bad);
    }
    first_bad
}

/// Rows `j_lo..j_hi` of planes `k_lo..k_hi` whose main blocks one thread
/// has run and whose epilogues have not run yet.
///
/// Epilogues read and write only the target's points in the rows they
/// run over (`evaluate.md`, aliasing rule 4), and the main kernel reads
/// the target at most pointwise in its own rows, so an epilogue may run
/// over the union of consecutive groups of one plane as well as after
/// each group: the same values. One call per side over a plane's rows
/// instead of one per group (a group is a block's 8 rows at 64 points per
/// row) cuts the periodic x fills' calls eightfold.
#[derive(Clone, Copy)]
struct PendingRows {
    j_lo: isize,
    j_hi: isize,
    k_lo: isize,
    k_hi: isize,
}

impl PendingRows {
    /// Adds `group` (whose blocks have just run) to `pending`: extended
    /// when it continues the same planes' rows, else `pending`'s
    /// epilogues run first (`flush`) and `group` starts a new run.
    fn add(
        pending: &mut Option<PendingRows>,
        group: &RowGroup,
        mut flush: impl FnMut(PendingRows),
    ) {
        let (k_lo, k_hi) = (group.k, group.k + group.planes as isize);
        let (j_lo, j_hi) = (group.j0, group.j0 + group.rows as isize);
        if let Some(p) = pending
            && (p.k_lo, p.k_hi) == (k_lo, k_hi)
            && p.j_hi == j_lo
        {
            p.j_hi = j_hi;
            return;
        }
        if let Some(p) = pending.take() {
            flush(p);
        }
        *pending = Some(PendingRows {
            j_lo,
            j_hi,
            k_lo,
            k_hi,
        });
    }
}

/// Runs every epilogue of `member`, in order, over the rows of `rows`.
fn run_epilogues(
    member: &Assignment<'_>,
    epilogue_contexts: &[Context<'_>],
    epilogue_scratch: &mut [Scratch],
    rows: PendingRows,
) {
    for ((e, c), s) in member
        .epilogues
        .iter()
        .zip(epilogue_contexts)
        .zip(epilogue_scratch.iter_mut())
    {
        match &e.fill {
            Some(fill) => {
                let mut points = e.region;
                points.lo[1] = points.lo[1].max(rows.j_lo);
                points.hi[1] = points.hi[1].min(rows.j_hi);
                points.lo[2] = points.lo[2].max(rows.k_lo);
                points.hi[2] = points.hi[2].min(rows.k_hi);
                if !points.is_empty() {
                    // SAFETY: `assign`'s contract covers each epilogue:
                    // its points and reads lie inside the target, it reads
                    // only points of its own rows that the main kernel has
                    // written, and this thread alone touches these rows.
                    unsafe { fill.run(member.target, &points) };
                }
            }
            None => run_rows(
                c,
                s,
                &member.target,
                &e.region,
                (rows.j_lo, rows.j_hi, rows.k_lo, rows.k_hi),
            ),
        }
    }
}

/// One assignment of a horizontal group (see [`assign_many`]): what
/// [`assign`] takes, as a value.
pub struct Assignment<'a> {
    /// The kernel.
    pub kernel: &'a Kernel,
    /// Its compiled form, if it has one.
    pub native: Option<&'a NativeKernel>,
    /// The fields it reads, by slot.
    pub fields: &'a [FieldData<'a>],
    /// The values of the parameters it reads, by slot.
    pub parameters: &'a [f64],
    /// Where it writes.
    pub target: TargetData,
    /// The points it writes.
    pub region: IndexBox,
    /// Whether to return the first point written that is not finite.
    pub watch_finite: bool,
    /// Masked assignments run on each group of rows right after it.
    pub epilogues: &'a [Epilogue<'a>],
}

/// Rows of a plane in one strip of a horizontal group.
const STRIP_ROWS: isize = 16;

/// Evaluates independent assignments (distinct targets, none reading
/// another's target) as one loop nest: the union of their regions is cut
/// into strips of `STRIP_ROWS` (16) rows of one plane, and every member
/// computes its rows of a strip (with its epilogues) before the next strip
/// starts, so the inputs they share (a diffusivity read by every equation)
/// come from memory once per strip instead of once per member. Each
/// member's rows, blocks and arithmetic are those of [`assign`], so the
/// values are bitwise the same as separate calls. Returns, per member, the
/// first point written that is not finite (members that watch).
///
/// # Safety
/// Every member satisfies the contract of [`assign`] (with a plan its
/// region makes), no member reads another member's target, and the
/// targets do not overlap.
pub unsafe fn assign_many(
    members: &[Assignment<'_>],
    patch: &Patch,
    parallelism: Parallelism,
) -> Vec<Option<[isize; 3]>> {
    let count = members.len();
    let mut span: Option<IndexBox> = None;
    for m in members.iter().filter(|m| !m.region.is_empty()) {
        span = Some(match span {
            None => m.region,
            Some(s) => IndexBox::new(
                [0, 1, 2].map(|a| s.lo[a].min(m.region.lo[a])),
                [0, 1, 2].map(|a| s.hi[a].max(m.region.hi[a])),
            ),
        });
    }
    let Some(span) = span else {
        return vec![None; count];
    };
    let plans: Vec<Plan> = members
        .iter()
        .map(|m| Plan::new(m.kernel, m.native.is_some(), m.fields, patch, &m.region))
        .collect();
    let contexts: Vec<(Context<'_>, Vec<Context<'_>>)> = members
        .iter()
        .zip(&plans)
        .map(|(m, plan)| {
            let ctx = context(m.kernel, m.native, m.fields, m.parameters, patch, plan);
            let epilogue_contexts = m
                .epilogues
                .iter()
                .map(|e| context(e.kernel, e.native, e.fields, e.parameters, patch, e.plan))
                .collect();
            (ctx, epilogue_contexts)
        })
        .collect();
    let mut strips = Vec::new();
    for k in span.lo[2]..span.hi[2] {
        let mut j = span.lo[1];
        while j < span.hi[1] {
            strips.push((k, j, (j + STRIP_ROWS).min(span.hi[1])));
            j += STRIP_ROWS;
        }
    }
    let points: usize = members.iter().map(|m| m.region.len()).sum();
    let parallelism = if points < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let run_strips = |strips: &[(isize, isize, isize)]| -> Vec<Option<[isize; 3]>> {
        reserve_scratch(contexts.iter().map(|(_, e)| 1 + e.len()).sum());
        let mut scratch: Vec<(Scratch, SmallVec<[Scratch; 4]>)> = contexts
            .iter()
            .map(|(c, e)| (c.scratch(), e.iter().map(|c| c.scratch()).collect()))
            .collect();
        let mut first_bad = vec![None; count];
        let mut pending: Vec<Option<PendingRows>> = vec![None; count];
        for &(k, strip_lo, strip_hi) in strips {
            for (m, member) in members.iter().enumerate() {
                let region = &member.region;
                let (j_lo, j_hi) = (strip_lo.max(region.lo[1]), strip_hi.min(region.hi[1]));
                if region.is_empty() || k < region.lo[2] || k >= region.hi[2] || j_lo >= j_hi {
                    continue;
                }
                let (ctx, epilogue_contexts) = &contexts[m];
                let (own, epilogue_scratch) = &mut scratch[m];
                let mut j0 = j_lo;
                while j0 < j_hi {
                    let rows = ctx.rows.min((j_hi - j0) as usize);
                    let group = RowGroup {
                        j0,
                        rows,
                        k,
                        planes: 1,
                        first_row: 0,
                    };
                    let bad = run_group(member, ctx, own, &group);
                    first_bad[m] = earlier(first_bad[m], bad);
                    if !member.epilogues.is_empty() {
                        PendingRows::add(&mut pending[m], &group, |rows| {
                            run_epilogues(member, epilogue_contexts, epilogue_scratch, rows)
                        });
                    }
                    j0 += rows as isize;
                }
            }
        }
        for (m, rows) in pending.into_iter().enumerate() {
            if let Some(rows) = rows {
                let (_, epilogue_contexts) = &contexts[m];
                let (_, epilogue_scratch) = &mut scratch[m];
                run_epilogues(&members[m], epilogue_contexts, epilogue_scratch, rows);
            }
        }
        first_bad
    };
    run_in_chunks(
        parallelism,
        &strips,
        run_strips,
        || vec![None; count],
        |a, b| a.into_iter().zip(b).map(|(p, q)| earlier(p, q)).collect(),
    )
}

/// Reduces the values of `kernel`'s result over `region`.
///
/// # Safety
/// As for [`assign`], without a target: every point the kernel reads over
/// `region`, extended by its read extents, lies inside the memory each
/// [`FieldData`] describes, and nothing writes those fields meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    kernel: &Kernel,
    native: Option<&NativeKernel>,
    fields: &[FieldData<'_>],
    parameters: &[f64],
    patch: &Patch,
    region: IndexBox,
    plan: &Plan,
    reduction: Reduction,
    parallelism: Parallelism,
) -> f64 {
    if region.is_empty() {
        return reduction.identity();
    }
    let ctx = context(kernel, native, fields, parameters, patch, plan);
    let groups = &plan.groups;
    let parallelism = if region.len() < PARALLEL_THRESHOLD {
        Parallelism::Serial
    } else {
        parallelism
    };
    let rows = region.extent()[1] * region.extent()[2];
    let mut partials = vec![reduction.identity(); rows];
    // Per-row partials, accumulated along x in block order.
    let run_groups = |groups: &[RowGroup], out: &mut [f64]| {
        reserve_scratch(1);
        let mut scratch = ctx.scratch();
        let offset = groups.first().map_or(0, |g| g.first_row);
        for group in groups {
            for block in blocks_of(group, &region) {
                ctx.run_block(&mut scratch, None, block);
                let n = (block.x1 - block.x0) as usize;
                for r in 0..group.rows {
                    let partial = &mut out[group.first_row - offset + r];
                    let block_value = reduction.of_row(ctx.result_row(&scratch, r, n));
                    *partial = reduction.merge(*partial, block_value);
                }
            }
        }
    };
    parallelism.run(|threads| {
        if threads <= 1 || groups.len() < 2 {
            run_groups(groups, &mut partials);
        } else {
            // Split the partials at the row boundaries of the group chunks.
            let ranges = chunk_ranges(groups.len(), threads);
            let mut pieces = Vec::with_capacity(ranges.len());
            let mut rest: &mut [f64] = &mut partials;
            for range in &ranges {
                let rows_in: usize = groups[range.clone()].iter().map(|g| g.rows).sum();
                let (piece, tail) = rest.split_at_mut(rows_in);
                pieces.push((range.clone(), piece));
                rest = tail;
            }
            pieces
                .into_par_iter()
                .for_each(|(range, piece)| run_groups(&groups[range], piece));
        }
    });
    partials
        .into_iter()
        .fold(reduction.identity(), |a, b| reduction.merge(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{KernelField, ReadExtent};
    use watershed_fields::Grid;

    /// The interpreter's group loops add in the order of the shared
    /// definition (`pairwise_sum`, which the C and CUDA emitter use), bit
    /// for bit, for every group size, on values whose sums round
    /// differently in other orders.
    #[test]
    fn the_interpreters_group_sum_is_the_pairwise_sum() {
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let magnitude = [1.0, 1e-9, 3e7][(state >> 61) as usize % 3];
            magnitude * ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
        };
        // Two rows of 13 points, 16 apart.
        let (points, stride) = (13usize, 16isize);
        let extent = Extent { n: points, rows: 2 };
        let at = |row: usize, i: usize| row * stride as usize + i;
        let group = |o: &mut [f64], rows: &[Vec<f64>], w: f64, start: Option<f64>| {
            let sources: Vec<Stream> = rows
                .iter()
                .map(|r| Stream {
                    pointer: r.as_ptr(),
                    row_stride: stride,
                })
                .collect();
            let out = OutStream {
                pointer: o.as_mut_ptr(),
                row_stride: stride,
            };
            for r in 0..extent.rows {
                // SAFETY: every row buffer and the output hold two rows of
                // 16 values, more than 13, and the output is its own buffer.
                unsafe { group_row(out, extent, r, &sources, w, start) };
            }
        };
        for size in 1..=MAX_GROUP_SOURCES {
            let rows: Vec<Vec<f64>> = (0..size)
                .map(|_| (0..32).map(|_| next()).collect())
                .collect();
            // Added to what the rows hold, or assigned from a start value
            // (over rows of NaN, which must not leak).
            for (before, start) in [(0.25, None), (f64::NAN, Some(-0.75))] {
                let mut o = vec![before; 32];
                group(&mut o, &rows, 3.0, start);
                for (row, i) in (0..2).flat_map(|row| (0..points).map(move |i| (row, i))) {
                    let tree =
                        crate::kernel::pairwise_sum(rows.iter().map(|r| r[at(row, i)]), |a, b| {
                            a + b
                        });
                    let expected = start.unwrap_or(before) + 3.0 * tree.unwrap_or(f64::NAN);
                    let got = o[at(row, i)];
                    assert_eq!(
                        got.to_bits(),
                        expected.to_bits(),
                        "{size} sources, row {row}, point {i}"
                    );
                }
                // The points between the rows are not written.
                assert_eq!(o[at(0, points)].to_bits(), before.to_bits());
            }
        }
        // Five values: ((a + b) + (c + d)) + e, not left to right.
        let five: Vec<Vec<f64>> = [1e16, 1.0, -1e16, 1.0, 1.0]
            .iter()
            .map(|&v| vec![v; 32])
            .collect();
        let mut o = vec![f64::NAN; 32];
        group(&mut o, &five, 1.0, Some(0.0));
        assert_eq!(o[0], 1.0);
        assert_eq!(five.iter().map(|v| v[0]).sum::<f64>(), 2.0);
    }

    /// The AVX2 builds of the linear-form loops give the baseline build's
    /// bits: term by term (one to seven terms), as differences, and
    /// grouped by weight, over rows of several lengths.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_linear_loops_give_the_baseline_bits() {
        if !avx2_rows() {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut state = 11u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let magnitude = [1.0, 1e-9, 3e7][(state >> 61) as usize % 3];
            magnitude * ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
        };
        let (rows, stride) = (3usize, 40isize);
        let inputs: Vec<Vec<f64>> = (0..8).map(|_| (0..120).map(|_| next()).collect()).collect();
        let stream = |i: usize| Stream {
            pointer: inputs[i].as_ptr(),
            row_stride: stride,
        };
        for n in [1usize, 3, 8, 13, 37] {
            let extent = Extent { n, rows };
            let run = |f: &dyn Fn(OutStream)| {
                let mut out = vec![f64::NAN; 120];
                f(OutStream {
                    pointer: out.as_mut_ptr(),
                    row_stride: stride,
                });
                out
            };
            for count in 1..=7 {
                let terms: Vec<(Stream, f64)> = (0..count).map(|i| (stream(i), next())).collect();
                // SAFETY: every stream and the output hold 3 rows of 40
                // values, more than `n`, and the output is its own buffer.
                let baseline = run(&|o| unsafe { linear_rows(o, extent, 0.5, &terms, false) });
                let wide = run(&|o| unsafe { linear_avx2(o, extent, 0.5, &terms, false) });
                assert_eq!(bits(&baseline), bits(&wide), "{count} terms, {n} points");
            }
            let pairs: Vec<(Stream, f64)> = (0..6)
                .map(|i| (stream(i), if i % 2 == 0 { -0.3 } else { 0.3 }))
                .collect();
            // SAFETY: as above.
            let baseline = run(&|o| unsafe { linear_rows(o, extent, 0.0, &pairs, true) });
            let wide = run(&|o| unsafe { linear_avx2(o, extent, 0.0, &pairs, true) });
            assert_eq!(bits(&baseline), bits(&wide), "differences, {n} points");
            let groups: Vec<(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>)> = vec![
                (0.75, (0..1).map(stream).collect()),
                (-2.5, (1..8).map(stream).collect()),
                (1.0, (2..5).map(stream).collect()),
            ];
            // SAFETY: as above.
            let baseline = run(&|o| unsafe { grouped_linear_rows(o, extent, 0.25, &groups) });
            let wide = run(&|o| unsafe { grouped_linear_avx2(o, extent, 0.25, &groups) });
            assert_eq!(bits(&baseline), bits(&wide), "groups, {n} points");
        }
    }

    /// Selections and comparisons in both builds: `select` equals the
    /// point-wise `if c != 0 { t } else { f }` of `Resolved::at` (NaN
    /// conditions included), and the baseline and AVX2 loops of the
    /// blend, the copy and a comparison over a [`Shape`] operand give the
    /// same bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn selections_and_comparisons_match_the_point_wise_values_in_both_builds() {
        let mut state = 5u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (state >> 59) % 8 {
                0 => 0.0,
                1 => f64::NAN,
                2 => -0.0,
                _ => (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5,
            }
        };
        let (rows, stride) = (3usize, 40isize);
        let inputs: Vec<Vec<f64>> = (0..4).map(|_| (0..120).map(|_| next()).collect()).collect();
        let stream = |i: usize| Stream {
            pointer: inputs[i].as_ptr(),
            row_stride: stride,
        };
        let run = |f: &dyn Fn(OutStream)| {
            let mut out = vec![f64::NAN; 120];
            f(OutStream {
                pointer: out.as_mut_ptr(),
                row_stride: stride,
            });
            out
        };
        let condition = Resolved::One(stream(0), 1.0);
        let if_true = Resolved::Two(stream(1), 0.5, stream(2), 0.5);
        let if_false = Resolved::One(stream(3), -3.0);
        for n in [1usize, 5, 8, 37] {
            let extent = Extent { n, rows };
            // SAFETY: every stream and the output hold 3 rows of 40 values,
            // more than `n`, and the output is its own buffer.
            let selected = run(&|o| unsafe { select(o, extent, condition, if_true, if_false) });
            for r in 0..rows {
                for i in 0..n {
                    // SAFETY: `r` and `i` are inside the rows read above.
                    let expected = unsafe {
                        if condition.at(r, i) != 0.0 {
                            if_true.at(r, i)
                        } else {
                            if_false.at(r, i)
                        }
                    };
                    let got = selected[r * stride as usize + i];
                    assert_eq!(got.to_bits(), expected.to_bits(), "row {r}, point {i}");
                }
            }
            if !avx2_rows() {
                continue;
            }
            let (c, t) = (Plain(stream(0)), Pair(stream(1), 0.5, stream(2), 0.5));
            let f = Scaled(stream(3), -3.0);
            // SAFETY: as above; AVX2 was detected.
            let baseline = run(&|o| unsafe {
                map1_lanes(o, extent, f, |v| v);
                blend_lanes(o, extent, c, t);
            });
            // SAFETY: as above.
            let wide = run(&|o| unsafe {
                map1_lanes_avx2(o, extent, f, |v| v);
                blend_lanes_avx2(o, extent, c, t);
            });
            assert_eq!(bits(&baseline), bits(&wide), "selection, {n} points");
            let shape = Shape(Resolved::Two(stream(1), 0.25, stream(2), 0.25));
            let minimum = |x: f64, y: f64| if x < y { x } else { y };
            // SAFETY: as above.
            let baseline = run(&|o| unsafe { map2_lanes(o, extent, c, shape, minimum) });
            // SAFETY: as above.
            let wide = run(&|o| unsafe { map2_lanes_avx2(o, extent, c, shape, minimum) });
            assert_eq!(bits(&baseline), bits(&wide), "minimum, {n} points");
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn bits(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    /// A kernel that reads one cell field with the z reach `z`.
    fn kernel_reading(z: isize) -> Kernel {
        Kernel {
            instructions: Vec::new(),
            extensions: Vec::new(),
            registers: 1,
            halo: 0,
            fields: vec![KernelField {
                id: 1,
                name: "phi".into(),
                location: LocationKind::CellCentre,
                extent: ReadExtent {
                    min: [-1, -1, -z],
                    max: [1, 1, z],
                },
                transfer: None,
            }],
            parameters: Vec::new(),
            location: Some(LocationKind::CellCentre),
            result: OUTPUT,
            native: OnceLock::new(),
            native_unchecked: OnceLock::new(),
            cuda: OnceLock::new(),
            cuda_checked: OnceLock::new(),
        }
    }

    /// The (k, j) groups of `region` with `rows` rows each.
    fn groups_of(region: &IndexBox, rows: usize) -> Vec<RowGroup> {
        let mut groups = Vec::new();
        for k in region.lo[2]..region.hi[2] {
            let mut j0 = region.lo[1];
            while j0 < region.hi[1] {
                let count = rows.min((region.hi[1] - j0) as usize);
                groups.push(RowGroup {
                    j0,
                    rows: count,
                    k,
                    planes: 1,
                    first_row: 0,
                });
                j0 += count as isize;
            }
        }
        groups
    }

    /// A cell field of 256 x 300 x 6 points (one ghost layer) and its
    /// values: planes of 0.6 MiB.
    fn large_plane_field() -> (FieldLayout, Vec<f64>) {
        let grid = Grid::new([256, 300, 6], [1.0; 3], [0.0; 3]).expect("valid grid");
        let layout = FieldLayout::new(&grid.whole_domain(1), LocationKind::CellCentre);
        let data = vec![0.0; layout.allocated_len()];
        (layout, data)
    }

    #[test]
    fn large_planes_read_along_z_are_visited_in_bands_of_every_plane() {
        // 256 x 300 points per plane: a band-row holds the target row
        // (2 KiB) and three planes of phi's row (3 x 2064 B), so a band
        // is BAND_BYTES / 8240 B = 63 rows: three groups of 16.
        let (layout, data) = large_plane_field();
        let fields = [FieldData::new(&data, &layout)];
        let region = layout.interior();
        let groups = groups_of(&region, 16);
        let order = band_order(&kernel_reading(1), &fields, &region, 16, &groups);
        assert_eq!(order.len(), groups.len());
        // Every group exactly once.
        let mut seen: Vec<(isize, isize)> = order.iter().map(|g| (g.k, g.j0)).collect();
        seen.sort_unstable();
        let mut all: Vec<(isize, isize)> = groups.iter().map(|g| (g.k, g.j0)).collect();
        all.sort_unstable();
        assert_eq!(seen, all);
        // First band: rows 0..48 of planes 0, 1, ..., 5, then rows 48..96.
        let first: Vec<(isize, isize)> = order[..4].iter().map(|g| (g.k, g.j0)).collect();
        assert_eq!(first, [(0, 0), (0, 16), (0, 32), (1, 0)]);
        assert_eq!((order[18].k, order[18].j0), (0, 48));
        // The last band holds the plane's last, shorter group.
        let last = order.last().expect("groups");
        assert_eq!((last.k, last.j0, last.rows), (5, 288, 12));
    }

    #[test]
    fn small_planes_and_pointwise_kernels_keep_plane_order() {
        let (layout, data) = large_plane_field();
        let fields = [FieldData::new(&data, &layout)];
        let region = layout.interior();
        let groups = groups_of(&region, 16);
        // No read along z: no plane is read again.
        assert!(band_order(&kernel_reading(0), &fields, &region, 16, &groups).is_empty());
        // A plane whose rows fit the budget.
        let small = IndexBox {
            lo: [0, 0, 0],
            hi: [256, 20, 6],
        };
        let small_groups = groups_of(&small, 16);
        assert!(band_order(&kernel_reading(1), &fields, &small, 16, &small_groups).is_empty());
    }

    /// The AVX2 build of a row reduction gives the generic lanes' bits (a
    /// NaN for a NaN) for every kind, over rows of every length around the lane count, with
    /// NaN, infinities, signed zeros, ties and large and small magnitudes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_row_reductions_give_the_generic_lanes_bits() {
        if !avx2_rows() {
            eprintln!("skipped: no AVX2");
            return;
        }
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            1e300,
            -1e-300,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for trial in 0..400 {
            let len = trial % 41;
            let values: Vec<f64> = (0..len)
                .map(|_| {
                    let r = next();
                    // Rows of specials only (ties, signed zeros, NaN
                    // against NaN), of ordinary values only, and mixed.
                    let special = match trial % 4 {
                        0 => true,
                        1 => false,
                        _ => r % 11 == 0,
                    };
                    if special {
                        // Three neighbours in the list per row, so that
                        // some rows hold only signed zeros and ones.
                        specials[(trial / 4 + (r >> 8) as usize % 3) % specials.len()]
                    } else {
                        ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
                            * 2f64.powi((r % 40) as i32 - 20)
                    }
                })
                .collect();
            for kind in [
                Reduction::Sum,
                Reduction::SumOfSquares,
                Reduction::Min,
                Reduction::Max,
            ] {
                let generic = kind.of_row_lanes(&values);
                // SAFETY: AVX2 was detected above.
                let wide = unsafe { kind.of_row_avx2(&values) };
                // A NaN's sign and payload depend on which operand an
                // instruction propagates; only its being NaN is kept.
                let same = if generic.is_nan() {
                    wide.is_nan()
                } else {
                    generic.to_bits() == wide.to_bits()
                };
                assert!(same, "{kind:?} of {values:?}: {generic} vs {wide}");
            }
        }
    }
}
