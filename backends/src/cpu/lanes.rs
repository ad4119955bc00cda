//! The interpreter's row primitives: operand streams resolved to strided
//! rows, and the maps, blends and selections over them (AVX2 where the
//! CPU has it).

use super::features::avx2_rows;

/// The values of one source over a block: its first row's first point and
/// the distance between consecutive rows.
#[derive(Clone, Copy)]
pub(super) struct Stream {
    pub(super) pointer: *const f64,
    pub(super) row_stride: isize,
}

/// Where an instruction writes over a block.
#[derive(Clone, Copy)]
pub(super) struct OutStream {
    pub(super) pointer: *mut f64,
    pub(super) row_stride: isize,
}

/// An operand resolved to memory for one instruction call.
#[derive(Clone, Copy)]
pub(super) enum Resolved {
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
    pub(super) unsafe fn at(&self, r: usize, i: usize) -> f64 {
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
pub(super) trait Lane: Copy {
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
pub(super) struct Splat(pub(super) f64);

#[derive(Clone, Copy)]
pub(super) struct Plain(pub(super) Stream);

/// `a + b`.
#[derive(Clone, Copy)]
pub(super) struct Sum(pub(super) Stream, pub(super) Stream);

/// `a - b`.
#[derive(Clone, Copy)]
pub(super) struct Minus(pub(super) Stream, pub(super) Stream);

#[derive(Clone, Copy)]
pub(super) struct Scaled(pub(super) Stream, pub(super) f64);

/// `w * (a + b)`: interpolants.
#[derive(Clone, Copy)]
pub(super) struct ScaledSum(pub(super) Stream, pub(super) Stream, pub(super) f64);

/// `w * (b - a)`: gradients and divergences.
#[derive(Clone, Copy)]
pub(super) struct ScaledDifference(pub(super) Stream, pub(super) Stream, pub(super) f64);

#[derive(Clone, Copy)]
pub(super) struct Pair(
    pub(super) Stream,
    pub(super) f64,
    pub(super) Stream,
    pub(super) f64,
);

impl Stream {
    #[inline(always)]
    pub(super) unsafe fn on_row(self, r: usize) -> Stream {
        Stream {
            // SAFETY: the caller keeps `r` within the block.
            pointer: unsafe { self.pointer.offset(r as isize * self.row_stride) },
            row_stride: self.row_stride,
        }
    }
    #[inline(always)]
    pub(super) unsafe fn at(self, i: usize) -> f64 {
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
            super::lanes::Resolved::Constant(c) => {
                let $lane = super::lanes::Splat(c);
                $body
            }
            super::lanes::Resolved::One(s, w) if w == 1.0 => {
                let $lane = super::lanes::Plain(s);
                $body
            }
            super::lanes::Resolved::One(s, w) => {
                let $lane = super::lanes::Scaled(s, w);
                $body
            }
            super::lanes::Resolved::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == 1.0 => {
                let $lane = super::lanes::Sum(s0, s1);
                $body
            }
            super::lanes::Resolved::Two(s0, w0, s1, w1) if w0 == 1.0 && w1 == -1.0 => {
                let $lane = super::lanes::Minus(s0, s1);
                $body
            }
            super::lanes::Resolved::Two(s0, w0, s1, w1) if w0 == w1 => {
                let $lane = super::lanes::ScaledSum(s0, s1, w0);
                $body
            }
            super::lanes::Resolved::Two(s0, w0, s1, w1) if w0 == -w1 => {
                let $lane = super::lanes::ScaledDifference(s0, s1, w1);
                $body
            }
            super::lanes::Resolved::Two(s0, w0, s1, w1) => {
                let $lane = super::lanes::Pair(s0, w0, s1, w1);
                $body
            }
        }
    };
}
pub(super) use with_lane;

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
pub(super) struct Shape(pub(super) Resolved);

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
pub(super) struct Extent {
    pub(super) n: usize,
    pub(super) rows: usize,
}

/// One row of a unary loop. Taking the output as `&mut [f64]` tells LLVM it
/// overlaps no input (even once inlined), so the loop vectorises without
/// run-time alias checks.
#[inline(always)]
pub(super) unsafe fn row1<A: Lane>(o: &mut [f64], a: A, f: &impl Fn(f64) -> f64) {
    for (i, o) in o.iter_mut().enumerate() {
        // SAFETY: the caller guarantees `a` covers the row.
        *o = f(unsafe { a.at(i) });
    }
}

/// One row of a binary loop (see [`row1`]).
#[inline(always)]
pub(super) unsafe fn row2<A: Lane, B: Lane>(
    o: &mut [f64],
    a: A,
    b: B,
    f: &impl Fn(f64, f64) -> f64,
) {
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
pub(super) unsafe fn map1_rows<A: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    f: impl Fn(f64) -> f64,
) {
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
pub(super) unsafe fn map2_rows<A: Lane, B: Lane>(
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
pub(super) unsafe fn map1_lanes<A: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    f: impl Fn(f64) -> f64,
) {
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
pub(super) unsafe fn map1_lanes_avx2<A: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    f: impl Fn(f64) -> f64,
) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, f) }
}

/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(never)]
pub(super) unsafe fn map2_lanes<A: Lane, B: Lane>(
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
pub(super) unsafe fn map2_lanes_avx2<A: Lane, B: Lane>(
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
pub(super) unsafe fn map1(
    out: OutStream,
    extent: Extent,
    a: Resolved,
    f: impl Fn(f64) -> f64 + Copy,
) {
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
pub(super) unsafe fn map2(
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
pub(super) unsafe fn common2(
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
pub(super) unsafe fn blend_rows<C: Lane, T: Lane>(out: OutStream, extent: Extent, c: C, t: T) {
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
pub(super) unsafe fn blend_lanes<C: Lane, T: Lane>(out: OutStream, extent: Extent, c: C, t: T) {
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
pub(super) unsafe fn blend_lanes_avx2<C: Lane, T: Lane>(
    out: OutStream,
    extent: Extent,
    c: C,
    t: T,
) {
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
pub(super) unsafe fn select(out: OutStream, extent: Extent, c: Resolved, t: Resolved, f: Resolved) {
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
