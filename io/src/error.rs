//! The errors of writing and reading a run's output.

use std::path::PathBuf;
use watershed_exprgraph::GraphError;
use watershed_fields::FieldError;

/// What went wrong with an output folder, file or chart.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// An output folder or file that cannot be written, would be
    /// overwritten, or does not hold what this crate wrote.
    #[error("output {path}: {reason}")]
    Output {
        /// The folder or file.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// A chart or image that could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The PNG file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A field or HDF5 error.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A graph error (a dumped graph field that is not there).
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl OutputError {
    /// An [`OutputError::Output`] about `path`.
    pub fn output(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        OutputError::Output {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Results of this crate.
pub type OutputResult<T> = Result<T, OutputError>;
