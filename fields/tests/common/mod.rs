//! Helpers shared by the fields crate's integration tests.

use std::process::Command;

/// The Python interpreter with h5py, or `None` (after saying why) when the
/// test may be skipped. `scripts/test.sh` sets `WATERSHED_PYTHON` and
/// `WATERSHED_REQUIRE_H5PY=1`, so in CI a missing h5py fails the test.
pub fn python_with_h5py() -> Option<String> {
    let python = std::env::var("WATERSHED_PYTHON").unwrap_or_else(|_| "python3".into());
    let works = Command::new(&python)
        .args(["-c", "import h5py"])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    if std::env::var("WATERSHED_REQUIRE_H5PY").is_ok_and(|v| v == "1") {
        panic!(
            "h5py is required (WATERSHED_REQUIRE_H5PY=1) but '{python} -c \"import h5py\"' failed; run scripts/test.sh, which installs it"
        );
    }
    eprintln!("skipped: '{python}' cannot import h5py; run scripts/test.sh to install it");
    None
}
