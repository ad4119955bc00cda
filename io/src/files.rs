//! Files written whole or not at all: text written to a temporary file and
//! renamed into place, the names of those temporaries (swept when a run
//! starts), and the numbered files of a series (`NAME_<step>.h5`).

use crate::error::{OutputError, OutputResult};
use std::io::Write as _;
use std::path::Path;

/// Writes `text` to `path` atomically: a temporary file in the same
/// directory, synced, renamed over `path`, directory synced.
pub fn write_text_file_atomically(path: &Path, text: &str) -> OutputResult<()> {
    let directory = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temporary = directory.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map_or("file".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let error = |action: &str, e: std::io::Error| OutputError::Output {
        path: path.to_path_buf(),
        reason: format!("{action}: {e}"),
    };
    let result = (|| {
        let mut file =
            std::fs::File::create(&temporary).map_err(|e| error("creating a temporary file", e))?;
        file.write_all(text.as_bytes())
            .map_err(|e| error("writing", e))?;
        file.sync_all().map_err(|e| error("syncing", e))?;
        std::fs::rename(&temporary, path).map_err(|e| error("renaming into place", e))?;
        std::fs::File::open(directory)
            .and_then(|d| d.sync_all())
            .map_err(|e| error("syncing the directory", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// True for the name of a temporary file that an atomic writer of this
/// crate or `watershed_fields::io` writes before renaming it into place:
/// `.NAME.PID-N.tmp` (HDF5) or `.NAME.PID.tmp` (text).
pub fn is_writers_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name != ".tmp"
}

/// The step of a file named `{prefix}_{step}.h5`.
pub fn numbered_file_step(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_prefix('_')?
        .strip_suffix(".h5")?
        .parse()
        .ok()
}
