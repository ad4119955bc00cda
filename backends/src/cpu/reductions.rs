//! The row reductions of the CPU executor: one block's row reduced in
//! [`REDUCTION_LANES`] interleaved accumulators, merged pairwise (the order
//! the C and CUDA emitters reproduce), with an AVX2 build.

use super::features::avx2_rows;
use crate::vocabulary::{REDUCTION_LANES, Reduction};

impl Reduction {
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
    pub(super) fn of_row(self, values: &[f64]) -> f64 {
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
    pub(super) unsafe fn of_row_avx2(self, values: &[f64]) -> f64 {
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
    pub(super) fn of_row_lanes(self, values: &[f64]) -> f64 {
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
