//! The interpreter's vectorised math over rows: one- and two-argument
//! functions (`exp`, `log`, `pow`, ...) through the shared `vmath`
//! definitions, AVX2 and AVX-512 where the CPU has them.

use super::features::wide_math;
use super::lanes::Extent;
use super::lanes::Lane;
use super::lanes::OutStream;
use super::lanes::Resolved;
use super::lanes::map1_rows;
use super::lanes::map2_rows;
use super::lanes::with_lane;

/// A vector-math function of one argument (`vmath`), a type so that its
/// loops inline it (a function pointer or a closure shared by many lane
/// combinations stays a call per element).
pub(super) trait Math1 {
    fn apply(x: f64) -> f64;
}

/// A vector-math function of two arguments (see [`Math1`]).
pub(super) trait Math2 {
    fn apply(x: f64, y: f64) -> f64;
}

macro_rules! math_functions {
    ($($name:ident => $f:path),* $(,)?) => {$(
        pub(super) struct $name;
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

pub(super) struct PowFn;

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
pub(super) unsafe fn math1_lanes<F: Math1, A: Lane>(out: OutStream, extent: Extent, a: A) {
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
pub(super) unsafe fn math1_lanes_avx2<F: Math1, A: Lane>(out: OutStream, extent: Extent, a: A) {
    // SAFETY: forwarded.
    unsafe { map1_rows(out, extent, a, |x| F::apply(x)) }
}

/// [`map2_rows`] for a vector-math function, baseline build.
///
/// # Safety
/// As [`map2_rows`].
#[inline(never)]
pub(super) unsafe fn math2_lanes<F: Math2, A: Lane, B: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    b: B,
) {
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
pub(super) unsafe fn math2_lanes_avx2<F: Math2, A: Lane, B: Lane>(
    out: OutStream,
    extent: Extent,
    a: A,
    b: B,
) {
    // SAFETY: forwarded.
    unsafe { map2_rows(out, extent, a, b, |x, y| F::apply(x, y)) }
}

/// A unary vector-math loop: the AVX2 + FMA build where the CPU has it.
///
/// # Safety
/// Every stream covers `extent`, and `out` overlaps no input.
#[inline(always)]
pub(super) unsafe fn math1<F: Math1>(out: OutStream, extent: Extent, a: Resolved) {
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
pub(super) unsafe fn math2<F: Math2>(out: OutStream, extent: Extent, a: Resolved, b: Resolved) {
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
            B::Add => super::lanes::map2($out, $extent, $a, $b, |x, y| x + y),
            B::Subtract => super::lanes::map2($out, $extent, $a, $b, |x, y| x - y),
            B::Multiply => super::lanes::map2($out, $extent, $a, $b, |x, y| x * y),
            B::Divide => super::lanes::map2($out, $extent, $a, $b, |x, y| x / y),
            B::Pow => super::math::math2::<super::math::PowFn>($out, $extent, $a, $b),
            // Each its own loop (a closure over `op.apply` kept a match per
            // point and did not vectorise); the same expressions as
            // `BinaryOp::apply`, so the same bits.
            B::Min => {
                super::lanes::common2($out, $extent, $a, $b, |x, y| if x < y { x } else { y })
            }
            B::Max => {
                super::lanes::common2($out, $extent, $a, $b, |x, y| if x > y { x } else { y })
            }
            B::Less => super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x < y)),
            B::LessEqual => super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x <= y)),
            B::Greater => super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x > y)),
            B::GreaterEqual => {
                super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x >= y))
            }
            B::Equal => super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x == y)),
            B::NotEqual => super::lanes::common2($out, $extent, $a, $b, |x, y| f64::from(x != y)),
            B::And => super::lanes::common2($out, $extent, $a, $b, |x, y| {
                f64::from((x != 0.0) & (y != 0.0))
            }),
            B::Or => super::lanes::common2($out, $extent, $a, $b, |x, y| {
                f64::from((x != 0.0) | (y != 0.0))
            }),
        }
    }};
}
pub(super) use dispatch_binary;

macro_rules! dispatch_unary {
    ($op:expr, $out:expr, $extent:expr, $a:expr) => {{
        use crate::pointwise::UnaryOp as U;
        match $op {
            U::Negate => super::lanes::map1($out, $extent, $a, |x| -x),
            U::Exp => super::math::math1::<super::math::ExpFn>($out, $extent, $a),
            U::Log => super::math::math1::<super::math::LogFn>($out, $extent, $a),
            U::Sin => super::math::math1::<super::math::SinFn>($out, $extent, $a),
            U::Cos => super::math::math1::<super::math::CosFn>($out, $extent, $a),
            U::Tanh => super::math::math1::<super::math::TanhFn>($out, $extent, $a),
            U::Sqrt => super::lanes::map1($out, $extent, $a, f64::sqrt),
            U::Abs => super::lanes::map1($out, $extent, $a, f64::abs),
            U::Not => super::lanes::map1($out, $extent, $a, |x| f64::from(x == 0.0)),
        }
    }};
}
pub(super) use dispatch_unary;
