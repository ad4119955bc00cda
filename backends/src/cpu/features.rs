//! What this CPU can do, detected once: the AVX2 builds of the row loops,
//! the AVX2 + FMA builds of the vector math, and [`two_builds!`], which
//! makes an entry point that picks the AVX2 build of a loop where it runs.

/// Whether this CPU runs the AVX2 builds of the row loops of reductions
/// and linear forms (detected once; the check is a load of a cached flag).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn avx2_rows() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Whether this CPU runs the AVX2 + FMA builds of the vector-math loops.
#[inline(always)]
pub(super) fn wide_math() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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
        pub(super) unsafe fn $entry($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if super::features::avx2_rows() {
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
        pub(super) unsafe fn $avx2($($arg: $ty),*) {
            // SAFETY: forwarded.
            unsafe { $rows($($arg),*) }
        }
    };
}
pub(super) use two_builds;
