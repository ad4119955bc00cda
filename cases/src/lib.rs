//! # watershed-cases
//!
//! The case library behind the `watershed` program, usable from your own
//! crate:
//!
//! * [`driver`]: the [`Simulation`](driver::Simulation) trait and the run
//!   loop ([`driver::run`]) with dumps, checkpoints, progress, a per-step
//!   observer, a whole-run trace and the end-of-run summary;
//! * [`interrupt`]: SIGINT and SIGTERM end a run after its step, with a checkpoint;
//! * [`collective`]: what the ranks of a decomposed run agree on (rank 0
//!   writes; the others dump and checkpoint in memory, in step);
//! * [`rank_trace`]: the trace of a run on several ranks, gathered onto
//!   rank 0;
//! * [`checkpoint`]: atomic checkpoints and bitwise restarts;
//! * [`config`]: strict TOML configurations with `--set` overrides;
//! * [`setup`]: a case's graph options, execution mode, integrator and
//!   configuration from its options;
//! * [`solver_state`]: a solver's fields in dumps and checkpoints;
//! * [`progress`]: the progress bar;
//! * [`case`]: what a case is ([`CaseInfo`], [`case::CaseOptions`],
//!   [`case::Prepared`]);
//! * [`cases`]: the cases themselves, listed by [`registered_cases`]
//!   ([`registry`]).
//!
//! The output (HDF5 dumps with their XDMF series, one run per folder, CSV
//! series, PNG charts) is `watershed_io`'s, usable without a
//! [`Simulation`](driver::Simulation).
//!
//! ```
//! use watershed_cases::{find_case, registry::CaseOptions};
//! // Build the cavity on a small grid and take three steps.
//! let options = CaseOptions {
//!     sets: vec!["cells=16".into()],
//!     threads: 1,
//!     ..Default::default()
//! };
//! let mut prepared = (find_case("lid-driven-cavity")?.prepare)(&options)?;
//! let sim = prepared.simulation.as_mut();
//! for _ in 0..3 {
//!     let dt = sim.next_dt()?;
//!     sim.step(dt)?;
//! }
//! assert_eq!(sim.steps(), 3);
//! # Ok::<(), watershed_cases::CaseError>(())
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod case;
pub mod cases;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod derived;
pub mod driver;
pub mod error;
pub mod inspect;
pub mod interrupt;
pub mod progress;
pub mod rank_trace;
pub mod registry;
pub mod setup;
pub mod solver_state;
pub mod steady;

pub use error::{CaseError, CaseResult, ConfigOrigin};
pub use registry::{CaseInfo, find_case, registered_cases};

/// Facts about this build and machine, for `watershed --version` and run
/// summaries.
pub fn build_summary() -> String {
    let gpus = watershed_fields::gpu::gpu_count();
    let gpu_line = match watershed_fields::gpu::gpu_unavailable_reason(0) {
        None if watershed_fields::gpu::gpus_are_emulated() => format!(
            "{gpus} emulated GPU(s) on the host (WATERSHED_EMULATE_GPUS, a test device: kernels run on the CPU)"
        ),
        None => format!("{gpus} CUDA device(s)"),
        Some(reason) => format!("no CUDA device ({reason}); running on the CPU"),
    };
    format!(
        "watershed {} ({} build)\nGPUs: {gpu_line}",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )
}
