//! The CPU executor: runs a [`Kernel`](crate::kernel::Kernel) over the rows
//! of a region, serially or on rayon threads, on the row interpreter or
//! through compiled C.
//!
//! The region is cut into *blocks*: at most [`TILE`](crate::vocabulary::TILE) points along x times a
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
#![doc = include_str!("design.md")]
//!
//! | module | its one job |
//! | --- | --- |
//! | `features` | what this CPU can do (AVX2, FMA), and the two builds of a row loop |
//! | `threads` | the thread policy ([`Parallelism`]) and the chunks dealt to threads |
//! | `blocks` | block planning ([`Plan`]), row groups, the band order |
//! | `interpreter` | a kernel's instructions over one block, or the call into compiled C |
//! | `lanes`, `math`, `linear` | the interpreter's row primitives: streams, maps and selections; vectorised math; linear combinations and products |
//! | `reductions` | a block row's reduction in interleaved lanes (AVX2 where the CPU has it) |
//! | `transfer` | grid-transfer rows between multigrid levels |
//! | `scratch` | per-thread block registers from a bounded pool |
//! | `run` | the entry points: [`assign`], [`assign_many`], [`reduce`] |
//!
//! What it shares with the code generator (tile, field views, reduction
//! kinds) is in [`crate::vocabulary`], so that neither imports the other.

mod blocks;
mod features;
mod interpreter;
mod lanes;
mod linear;
mod math;
mod reductions;
mod run;
mod scratch;
#[cfg(test)]
mod tests;
mod threads;
mod transfer;

pub use blocks::{BLOCK_POINTS, Plan};
pub use run::{Assignment, Epilogue, assign, assign_many, reduce};
pub use threads::{PARALLEL_THRESHOLD, Parallelism};
