//! The interpreter's linear combinations: stencil differences, grouped
//! sums in the shared pairwise order, fused products, and point fills.

use super::features::two_builds;
use super::lanes::Extent;
use super::lanes::Lane;
use super::lanes::Minus;
use super::lanes::OutStream;
use super::lanes::Plain;
use super::lanes::Resolved;
use super::lanes::Stream;
use super::lanes::Sum;
use crate::kernel::MAX_GROUP_SOURCES;
use smallvec::SmallVec;

/// The loops of [`linear`], built into each of its entry points.
///
/// # Safety
/// As [`linear`].
#[inline(always)]
pub(super) unsafe fn linear_rows(
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
pub(super) unsafe fn differences(out: OutStream, extent: Extent, terms: &[(Stream, f64)]) {
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
pub(super) unsafe fn grouped_linear_rows(
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
pub(super) unsafe fn group_row(
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
pub(super) fn small_group<const M: usize>(
    o: &mut [f64],
    sources: [&[f64]; M],
    w: f64,
    start: Option<f64>,
) {
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
pub(super) fn large_group<const K: usize>(
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
pub(super) unsafe fn tree_at<const M: usize>(s: &[&[f64]; M], i: usize) -> f64 {
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
pub(super) enum FactorShape {
    Plain,
    Sum,
    Minus,
}

pub(super) fn factor_shape(factor: &Resolved) -> FactorShape {
    match factor {
        Resolved::Two(_, _, _, w1) if *w1 == 1.0 => FactorShape::Sum,
        Resolved::Two(..) => FactorShape::Minus,
        _ => FactorShape::Plain,
    }
}

/// Lanes built from a fused factor of their shape.
pub(super) trait Factor: Lane {
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
pub(super) unsafe fn product_lanes<A: Factor, B: Factor, const K: usize, const ASSIGN: bool>(
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
pub(super) const MAX_FUSED_PRODUCTS: usize = 3;

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
pub(super) unsafe fn product_pass_rows(
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
pub(super) unsafe fn fill_points(
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
