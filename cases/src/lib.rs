//! # watershed-cases
//!
//! The library of runnable cases behind the `watershed` command: each case
//! has a name, a one-line description and (in later issues) a TOML
//! configuration and a runner that writes HDF5 + XDMF output.
//!
//! The registry is empty until the solvers exist; `watershed list` says so.

#![warn(missing_docs)]

/// A case the `watershed` program can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseInfo {
    /// The name given to `watershed run`.
    pub name: &'static str,
    /// One line saying what the case computes and checks.
    pub description: &'static str,
}

/// Every registered case, sorted by name.
pub fn registered_cases() -> Vec<CaseInfo> {
    Vec::new()
}

/// Facts about this build and machine, for `watershed --version` and run
/// summaries.
pub fn build_summary() -> String {
    let gpus = watershed_fields::gpu::gpu_count();
    let gpu_line = match watershed_fields::gpu::gpu_unavailable_reason(0) {
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
