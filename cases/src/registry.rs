//! The registry of cases: names, descriptions, documented configurations
//! and how to build each one's simulation.

use crate::config::{CaseConfig, to_text};
use crate::driver::{Simulation, Stop};
use crate::error::{CaseError, CaseResult};
use std::path::PathBuf;

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

/// The effective configuration of `case` as TOML.
pub fn config_text_of<C: CaseConfig>(case: &str, options: &CaseOptions) -> CaseResult<String> {
    let loaded = crate::setup::load_config::<C>(case, options)?;
    to_text(case, &loaded)
}

/// Every registered case, sorted by name.
pub fn registered_cases() -> Vec<CaseInfo> {
    let mut cases = vec![
        crate::cases::cavity::INFO,
        crate::cases::channel::INFO,
        crate::cases::cylinder::INFO,
        crate::cases::taylor_green::INFO,
        crate::cases::heat::INFO,
        crate::cases::advection::INFO,
        crate::cases::reacting::INFO,
        crate::cases::scalability::EXPRLIB_INFO,
        crate::cases::scalability::WASATCH_INFO,
    ];
    cases.sort_by_key(|c| c.name);
    cases
}

/// The case called `name`.
pub fn find_case(name: &str) -> CaseResult<CaseInfo> {
    let cases = registered_cases();
    cases
        .iter()
        .find(|c| c.name == name)
        .copied()
        .ok_or_else(|| CaseError::UnknownCase {
            name: name.into(),
            known: cases.iter().map(|c| c.name).collect::<Vec<_>>().join(", "),
        })
}

#[cfg(test)]
mod tests {
    use crate::cases::{advection, cavity, heat, reacting, scalability, taylor_green};
    use crate::config::CaseConfig;

    fn documented_is_default<C: CaseConfig + PartialEq>() {
        let parsed: C = toml::from_str(C::DOCUMENTED).expect("the documented file parses");
        assert_eq!(parsed, C::default(), "{}", C::DOCUMENTED);
        assert_eq!(C::default().check_ranges(), None);
    }

    #[test]
    fn every_documented_file_holds_the_defaults() {
        documented_is_default::<cavity::CavityConfig>();
        documented_is_default::<taylor_green::TaylorGreenConfig>();
        documented_is_default::<heat::HeatConfig>();
        documented_is_default::<advection::AdvectionConfig>();
        documented_is_default::<reacting::ReactingConfig>();
        documented_is_default::<scalability::ScalabilityConfig<scalability::ExprLibKind>>();
        documented_is_default::<scalability::ScalabilityConfig<scalability::WasatchKind>>();
    }
}
