//! What a case is: the options it is built from ([`CaseOptions`]), what
//! building it gives ([`Prepared`]) and how the program knows it
//! ([`CaseInfo`]). The cases themselves are in [`crate::cases`], their list
//! in [`crate::registry`].

use crate::driver::{Simulation, Stop};
use crate::error::CaseResult;
use std::path::PathBuf;
use std::rc::Rc;
use watershed_fields::ranks::{RankLink, SingleProcess};

/// What a case is built from.
#[derive(Debug, Clone, Default)]
pub struct CaseOptions {
    /// A TOML configuration file.
    pub config_file: Option<PathBuf>,
    /// `key=value` overrides, applied in order after the file.
    pub sets: Vec<String>,
    /// The configuration stored in the checkpoint being restarted from.
    pub checkpoint_config: Option<String>,
    /// Threads for graph execution (1: serial).
    pub threads: usize,
    /// `threads` is an upper bound: each graph times its first executions
    /// on one thread and on `threads` and keeps the faster
    /// (`ExecutionMode::Adaptive`). The command line sets it when neither
    /// `--threads` nor `WATERSHED_THREADS` names a count.
    pub adaptive_threads: bool,
    /// Where the case's graph nodes run (`--device`): the whole step on a
    /// GPU, the thesis' heterogeneous rule for the ExprLib test, or the
    /// CPU.
    pub placement: watershed_exprgraph::PlacementPolicy,
    /// The ranks of a decomposed run and how they reach each other
    /// (`None`: one process). Cases that decompose (`patches` in their
    /// configuration) spread their patches over them.
    pub ranks: Option<Rc<dyn RankLink>>,
}

impl CaseOptions {
    /// The rank link of the run: the one given, or a single process.
    pub fn rank_link(&self) -> Rc<dyn RankLink> {
        self.ranks.clone().unwrap_or_else(|| Rc::new(SingleProcess))
    }
}

/// A case ready to run.
pub struct Prepared {
    /// The simulation.
    pub simulation: Box<dyn Simulation>,
    /// Its configuration as TOML (stored in checkpoints).
    pub config_text: String,
    /// When it stops unless the command line says otherwise.
    pub stop: Stop,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("case", &self.simulation.case())
            .field("stop", &self.stop)
            .finish()
    }
}

/// A case the `watershed` program can run.
#[derive(Clone, Copy)]
pub struct CaseInfo {
    /// The name given to `watershed run`.
    pub name: &'static str,
    /// One line saying what the case computes and checks.
    pub description: &'static str,
    /// The documented default configuration (TOML).
    pub documented_config: &'static str,
    /// Builds the simulation.
    pub prepare: fn(&CaseOptions) -> CaseResult<Prepared>,
    /// The effective configuration as TOML (for `--print-config`).
    pub config_text: fn(&CaseOptions) -> CaseResult<String>,
}

impl std::fmt::Debug for CaseInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaseInfo")
            .field("name", &self.name)
            .field("description", &self.description)
            .finish()
    }
}
