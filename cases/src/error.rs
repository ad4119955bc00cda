//! The errors of the case library and the `watershed` program: each names
//! the case, key, file or field at fault and says what to do.

use std::path::PathBuf;
use watershed_exprgraph::GraphError;
use watershed_fields::FieldError;
use watershed_io::OutputError;
use watershed_solvers::SolverError;

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// The case's default.
    Default,
    /// A configuration file, at a line (1-based) when known.
    File {
        /// The file.
        path: PathBuf,
        /// The line of the key.
        line: Option<usize>,
    },
    /// A `--set key=value` override.
    Set,
    /// The configuration stored in a restart file.
    Checkpoint,
}

impl std::fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigOrigin::Default => write!(f, "the default"),
            ConfigOrigin::File {
                path,
                line: Some(line),
            } => write!(f, "{}, line {line}", path.display()),
            ConfigOrigin::File { path, line: None } => write!(f, "{}", path.display()),
            ConfigOrigin::Set => write!(f, "--set"),
            ConfigOrigin::Checkpoint => write!(f, "the restart file's configuration"),
        }
    }
}

/// Errors of cases, configurations, output and restarts.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// No case of that name.
    #[error("unknown case `{name}`; `watershed list` shows the cases: {known}")]
    UnknownCase {
        /// The name asked for.
        name: String,
        /// The registered names.
        known: String,
    },
    /// A configuration file or `--set` that is not valid TOML, or names a
    /// key the case does not have, or gives a value of the wrong type.
    #[error("configuration of `{case}` ({origin}): {message}")]
    ConfigSyntax {
        /// The case.
        case: String,
        /// Where the text came from.
        origin: ConfigOrigin,
        /// What the parser said (with the line and column for files).
        message: String,
    },
    /// A key the case's configuration does not have.
    #[error("configuration of `{case}` ({origin}): unknown key `{key}`; the keys are: {known}")]
    UnknownKey {
        /// The case.
        case: String,
        /// The key.
        key: String,
        /// Where it came from.
        origin: ConfigOrigin,
        /// The keys the case has.
        known: String,
    },
    /// A value outside its allowed range.
    #[error(
        "configuration of `{case}` ({origin}): {key} = {value} is out of range; allowed: {allowed}"
    )]
    ConfigValue {
        /// The case.
        case: String,
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: String,
        /// Where it came from.
        origin: Box<ConfigOrigin>,
    },
    /// A configuration file that cannot be read.
    #[error("cannot read the configuration file {path}: {source}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A restart file that cannot be used.
    #[error("restart file {path}: {reason}")]
    Restart {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// A device that was asked for and is not there.
    #[error("device: {0}")]
    Device(String),
    /// Options that contradict each other or the case.
    #[error("{0}")]
    Usage(String),
    /// An output folder, file or chart that cannot be written or read.
    #[error(transparent)]
    Io(#[from] OutputError),
    /// A solver error.
    #[error(transparent)]
    Solver(#[from] SolverError),
    /// A field or HDF5 error.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A graph error.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl CaseError {
    /// The error of files per rank asked of a case that cannot write
    /// them (see `crate::driver::OutputFiles::PerRank`).
    pub fn per_rank_refused(case: &str) -> Self {
        CaseError::Usage(format!(
            "`{case}` cannot write its dumps and checkpoints per rank (--per-rank-files): it does not run on patches (set patches=PX,PY,PZ with more than one patch, or run it on several ranks); leave --per-rank-files out and rank 0 writes the whole domain"
        ))
    }
}

impl From<watershed_operators::OperatorError> for CaseError {
    fn from(e: watershed_operators::OperatorError) -> Self {
        CaseError::Solver(SolverError::from(e))
    }
}

/// Results of this crate.
pub type CaseResult<T> = Result<T, CaseError>;
