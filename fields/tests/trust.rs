//! Bad sizes and bad files are errors, never undefined behaviour or lost
//! data: checked arithmetic on sizes from the API and from files, scalar
//! types and checksums on read, atomic replacement of files (a writer
//! killed at random moments), and write errors (a full disk) returned.

mod common;

use common::python_with_h5py;
use std::path::{Path, PathBuf};
use std::process::Command;
use watershed_fields::io::{
    GhostSelection, read_field_from_file, replace_file, update_file, write_field,
    write_field_to_file,
};
use watershed_fields::{
    CellCentre, Device, FieldError, GhostWidth, Grid, Patch, SpatialField, XFace,
};

/// A scratch directory removed when the test ends (pass or fail).
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("watershed-trust-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

#[test]
fn sizes_that_overflow_are_errors() {
    // (2^21 - 2)^3 cells: the byte count wrapped to 0 and the field segfaulted.
    let n = (1 << 21) - 2;
    let error = Grid::new([n; 3], [1.0; 3], [0.0; 3]).unwrap_err();
    assert!(
        matches!(&error, FieldError::InvalidGrid { reason } if reason.contains("address")),
        "{error:?}"
    );

    // A valid grid, absurd ghost layers: refused when the field is made.
    let grid = Grid::new([100, 100, 100], [1.0; 3], [0.0; 3]).unwrap();
    for ghosts in [usize::MAX / 4, 1 << 40, usize::MAX] {
        let patch = grid.whole_domain(ghosts);
        let error = SpatialField::<XFace>::new("huge", &patch, Device::Cpu).unwrap_err();
        assert!(
            matches!(&error, FieldError::InvalidGrid { reason } if reason.contains("huge")),
            "{ghosts}: {error:?}"
        );
    }

    // A patch offset that overflows.
    let error =
        Patch::new(&grid, [usize::MAX, 0, 0], [1, 1, 1], GhostWidth::uniform(1)).unwrap_err();
    assert!(matches!(error, FieldError::InvalidGrid { .. }), "{error:?}");

    // Spacings whose 1/h^2 overflows.
    for length in [1e-300, 1e-170] {
        let error = Grid::new([10, 1, 1], [length, 1.0, 1.0], [0.0; 3]).unwrap_err();
        assert!(
            matches!(&error, FieldError::InvalidGrid { reason } if reason.contains("1/h^2")),
            "{length}: {error:?}"
        );
    }
    let error = Grid::from_spacing([4, 4, 1], [f64::NAN, 1.0, 1.0], [0.0; 3]).unwrap_err();
    assert!(matches!(error, FieldError::InvalidGrid { .. }));
}

fn sample(name: &str, value: f64) -> SpatialField<CellCentre> {
    let patch = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut field = SpatialField::<CellCentre>::new(name, &patch, Device::Cpu).unwrap();
    field.fill(value).unwrap();
    field
}

#[test]
fn dataset_names_are_checked_before_anything_is_written() {
    let dir = temp_dir("names");
    let path = dir.join("fields.h5");
    write_field_to_file(&path, "phi", &sample("phi", 1.0), GhostSelection::Interior).unwrap();
    let before = std::fs::read(&path).unwrap();
    for (name, words) in [
        ("phi", "already exists"),
        ("", "non-empty"),
        ("/", "non-empty"),
        ("bad\0name", "NUL"),
    ] {
        let error = write_field_to_file(&path, name, &sample("x", 2.0), GhostSelection::Interior)
            .unwrap_err();
        assert!(
            matches!(&error, FieldError::Hdf5Format { reason, .. } if reason.contains(words)),
            "{name:?}: {error:?}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is untouched"
    );
    let phi: SpatialField<CellCentre> = read_field_from_file(&path, "phi").unwrap();
    assert!(phi.values().unwrap().contains(&1.0));
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
}

/// A child process started (by any thread) while a file is being written
/// inherits the open temporary file and outlives the write; the file it
/// became must still open, and take further writes, while that child
/// runs. (With HDF5's file lock on the temporary file, the child kept an
/// exclusive lock on the renamed file: "unable to lock file".)
#[test]
fn a_child_started_during_a_write_leaves_the_file_usable() {
    let dir = temp_dir("inherited");
    let path = dir.join("fields.h5");
    write_field_to_file(&path, "phi", &sample("phi", 1.0), GhostSelection::Interior).unwrap();
    let mut children = Vec::new();
    let written = update_file(&path, |file| {
        children.push(
            Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("start `sleep`"),
        );
        write_field(file, "psi", &sample("psi", 2.0), GhostSelection::Interior)
    });
    let read = written.and_then(|()| read_field_from_file::<CellCentre, f64>(&path, "psi"));
    let rewritten =
        write_field_to_file(&path, "chi", &sample("chi", 3.0), GhostSelection::Interior);
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let psi = read.unwrap();
    assert!(psi.values().unwrap().contains(&2.0));
    rewritten.unwrap();
    let chi: SpatialField<CellCentre> = read_field_from_file(&path, "chi").unwrap();
    assert!(chi.values().unwrap().contains(&3.0));
}

#[test]
fn reading_checks_the_scalar_type_and_the_size_attributes() {
    let dir = temp_dir("types");
    let path = dir.join("fields.h5");
    write_field_to_file(
        &path,
        "phi",
        &sample("phi", 3.0),
        GhostSelection::WithGhosts,
    )
    .unwrap();
    // f64 into f32: an error, never silent infinities or rounding.
    let error = read_field_from_file::<CellCentre, f32>(&path, "phi").unwrap_err();
    assert!(
        matches!(&error, FieldError::Hdf5Format { reason, .. } if reason.contains("f64") && reason.contains("f32")),
        "{error:?}"
    );
    // Absurd or malformed size attributes.
    for (attribute, value) in [
        ("patch_ghosts_minus", [1e15, 1.0, 1.0]),
        ("patch_ghosts_plus", [1.0, 1e6, 1.0]),
        ("grid_cells", [-3.0, 5.0, 4.0]),
        ("grid_cells", [f64::NAN, 5.0, 4.0]),
        ("patch_cells", [2.5, 5.0, 4.0]),
        ("patch_offset", [1e30, 0.0, 0.0]),
        ("ghost_width_minus", [1e12, 0.0, 0.0]),
    ] {
        let copy = dir.join(format!("{attribute}-{}.h5", value[0].abs().log10() as i64));
        std::fs::copy(&path, &copy).unwrap();
        {
            let file = hdf5::File::open_rw(&copy).unwrap();
            let dataset = file.dataset("phi").unwrap();
            dataset.delete_attr(attribute).unwrap();
            dataset
                .new_attr_builder()
                .with_data(&value)
                .create(attribute)
                .unwrap();
        }
        let error = read_field_from_file::<CellCentre, f64>(&copy, "phi").unwrap_err();
        assert!(
            matches!(&error, FieldError::Hdf5Format { .. }),
            "{attribute} = {value:?}: {error:?}"
        );
    }
}

#[test]
fn corrupted_bytes_are_detected_by_the_checksum() {
    let dir = temp_dir("checksum");
    let path = dir.join("fields.h5");
    let marker = 1_234.567_890_123_f64;
    write_field_to_file(
        &path,
        "phi",
        &sample("phi", marker),
        GhostSelection::Interior,
    )
    .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let pattern = marker.to_le_bytes();
    let at = bytes
        .windows(8)
        .position(|w| w == pattern)
        .expect("the values are stored uncompressed");
    bytes[at + 3] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    // Named as what it is (HDF5 says "filter returned failure"), with the
    // file and the dataset.
    match read_field_from_file::<CellCentre, f64>(&path, "phi") {
        Err(FieldError::Hdf5Format {
            file,
            dataset,
            reason,
        }) => {
            assert_eq!(file, path);
            assert_eq!(dataset, "phi");
            assert!(reason.contains("Fletcher-32 checksum"), "{reason}");
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
}

/// The child side of the process tests (run by them, not on its own).
#[test]
#[ignore = "helper: started as a child process by the kill and full-disk tests"]
fn child_writer() {
    let Ok(path) = std::env::var("WATERSHED_CHILD_PATH") else {
        return;
    };
    let mode = std::env::var("WATERSHED_CHILD_MODE").unwrap_or_default();
    let patch = Grid::new([64, 64, 64], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut field = SpatialField::<CellCentre>::new("big", &patch, Device::Cpu).unwrap();
    let mut generation = 2.0;
    loop {
        field.fill(generation).unwrap();
        let outcome = replace_file(&path, |file| {
            write_field(file, "big", &field, GhostSelection::WithGhosts)?;
            write_field(file, "big_copy", &field, GhostSelection::WithGhosts)
        });
        if mode == "full" {
            match outcome {
                Ok(()) => println!("CHILD-RESULT: ok"),
                Err(e) => println!("CHILD-RESULT: error: {e}"),
            }
            return;
        }
        outcome.unwrap();
        generation += 1.0;
    }
}

fn write_generation(path: &Path, value: f64) {
    let patch = Grid::new([64, 64, 64], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut field = SpatialField::<CellCentre>::new("big", &patch, Device::Cpu).unwrap();
    field.fill(value).unwrap();
    replace_file(path, |file| {
        write_field(file, "big", &field, GhostSelection::WithGhosts)?;
        write_field(file, "big_copy", &field, GhostSelection::WithGhosts)
    })
    .unwrap();
}

fn child(path: &Path, mode: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            "child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WATERSHED_CHILD_PATH", path)
        .env("WATERSHED_CHILD_MODE", mode);
    command
}

/// An h5py check that the file is complete: both datasets read, every
/// value of both equal to one generation.
fn h5py_verdict(python: &str, path: &Path) -> String {
    let script = r#"
import sys, h5py, numpy
with h5py.File(sys.argv[1], "r") as f:
    a = f["big"][...]; b = f["big_copy"][...]
    assert a.shape == (66, 66, 66) and b.shape == a.shape
    assert numpy.all(a == a.flat[0]) and numpy.all(b == a.flat[0]), "mixed values"
    print("complete", a.flat[0])
"#;
    let out = Command::new(python)
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A writer replacing a 2 x 2.3 MB file in a loop, killed (SIGKILL) at
/// pseudo-random moments 12 times: the file is always complete and
/// readable by h5py, holding one generation's values.
#[test]
fn a_killed_writer_never_leaves_a_broken_file() {
    let Some(python) = python_with_h5py() else {
        return;
    };
    let dir = temp_dir("kill");
    let path = dir.join("state.h5");
    write_generation(&path, 1.0);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut generations = std::collections::BTreeSet::new();
    for round in 0..12 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = 40 + seed % 400;
        let mut running = child(&path, "kill")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        running.kill().unwrap();
        running.wait().unwrap();
        let verdict = h5py_verdict(&python, &path);
        assert!(
            verdict.starts_with("complete"),
            "round {round} (killed after {delay} ms): {verdict}"
        );
        generations.insert(verdict.trim().to_string());
        let ours: SpatialField<CellCentre> = read_field_from_file(&path, "big").unwrap();
        assert!(ours.values().unwrap().iter().all(|v| v.is_finite()));
    }
    // Leftover temporaries from killed writers may remain; the file is whole.
    eprintln!("generations seen: {generations:?}");
}

/// A write that fails for lack of space (here a file-size limit) is an
/// error, and the previous file is intact.
#[test]
fn a_failed_write_is_an_error_and_keeps_the_old_file() {
    let dir = temp_dir("full");
    let path = dir.join("state.h5");
    write_generation(&path, 1.0);
    let before = std::fs::read(&path).unwrap();
    // 1 MB file-size limit, SIGXFSZ ignored: writes past it fail with EFBIG.
    let exe = std::env::current_exe().unwrap();
    let output = Command::new("bash")
        .arg("-c")
        .arg("ulimit -f 1024; trap '' XFSZ; exec \"$0\" --ignored --exact child_writer --nocapture --test-threads=1")
        .arg(exe)
        .env("WATERSHED_CHILD_PATH", &path)
        .env("WATERSHED_CHILD_MODE", "full")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("CHILD-RESULT: error"),
        "the write past the limit must fail: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the old file is intact"
    );
}
