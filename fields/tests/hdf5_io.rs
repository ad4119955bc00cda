//! HDF5 tests: fields written and read back are equal with their attributes,
//! mismatches are refused, and the files are readable by h5py (a standard
//! HDF5 tool, independent of our reader).

mod common;

use common::python_with_h5py;
use std::process::Command;
use std::sync::Mutex;
use watershed_fields::io::{
    GhostSelection, read_field, read_field_from_file, read_field_window, write_field,
    write_field_to_file,
};
use watershed_fields::*;

/// HDF5 opens files without close-on-exec, so a Python process spawned by one
/// test thread inherits (and keeps locked) a file another thread is writing.
/// Tests that touch files take this lock so the h5py test runs alone.
static FILES: Mutex<()> = Mutex::new(());

fn files_lock() -> std::sync::MutexGuard<'static, ()> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// A field with distinct values everywhere, ghosts included.
fn numbered<L: Location>(name: &str, patch: &Patch) -> SpatialField<L> {
    let mut field = SpatialField::<L>::new(name, patch, Device::Cpu).unwrap();
    let layout = field.layout().clone();
    let values = field.values_mut().unwrap();
    for index in layout.allocated() {
        let [x, y, z] = layout.coordinate(index);
        values[layout.linear_index(index)] = x + 10.0 * y + 100.0 * z;
    }
    field
}

fn patch() -> Patch {
    let grid = Grid::new([7, 5, 3], [1.4, 1.0, 0.6], [0.5, -1.0, 2.0])
        .unwrap()
        .with_periodic([false, true, false]);
    Patch::new(
        &grid,
        [2, 0, 0],
        [5, 5, 3],
        GhostWidth {
            minus: [1, 2, 1],
            plus: [2, 1, 1],
        },
    )
    .unwrap()
}

fn round_trip<L: Location>() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fields.h5");
    let patch = patch();
    let field = numbered::<L>("rho", &patch);
    write_field_to_file(&path, "with_ghosts", &field, GhostSelection::WithGhosts).unwrap();
    write_field_to_file(&path, "interior", &field, GhostSelection::Interior).unwrap();

    let full: SpatialField<L> = read_field_from_file(&path, "with_ghosts").unwrap();
    assert_eq!(full.name(), "rho");
    assert_eq!(full.layout(), field.layout());
    assert_eq!(
        full.values().unwrap(),
        field.values().unwrap(),
        "{}",
        L::KIND
    );

    let interior: SpatialField<L> = read_field_from_file(&path, "interior").unwrap();
    assert_eq!(
        interior.interior_view().unwrap(),
        field.interior_view().unwrap()
    );
    for region in interior.layout().ghost_regions() {
        for index in region {
            assert_eq!(
                interior.values().unwrap()[interior.layout().linear_index(index)],
                0.0
            );
        }
    }
}

#[test]
fn every_location_round_trips_with_and_without_ghosts() {
    let _files = files_lock();
    round_trip::<CellCentre>();
    round_trip::<XFace>();
    round_trip::<YFace>();
    round_trip::<ZFace>();
}

/// A field larger than one chunk (about 4 MiB) is written chunk by chunk,
/// its interior cut from the ghosted values plane by plane: every point
/// reads back with its bits, with and without ghosts, whole or as a window
/// across the chunks' seams.
#[test]
fn a_field_of_several_chunks_round_trips() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.h5");
    let grid = Grid::new([96, 80, 150], [1.0, 1.0, 1.0], [0.0; 3]).unwrap();
    let patch = Patch::new(
        &grid,
        [0; 3],
        [96, 80, 150],
        GhostWidth {
            minus: [1, 2, 1],
            plus: [2, 1, 3],
        },
    )
    .unwrap();
    let field = numbered::<ZFace>("big", &patch);
    write_field_to_file(&path, "with_ghosts", &field, GhostSelection::WithGhosts).unwrap();
    write_field_to_file(&path, "interior", &field, GhostSelection::Interior).unwrap();
    let full: SpatialField<ZFace> = read_field_from_file(&path, "with_ghosts").unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(full.values().unwrap()), bits(field.values().unwrap()));
    let interior: SpatialField<ZFace> = read_field_from_file(&path, "interior").unwrap();
    assert_eq!(
        interior.interior_view().unwrap(),
        field.interior_view().unwrap()
    );
    let file = hdf5::File::open(&path).unwrap();
    for name in ["with_ghosts", "interior"] {
        let chunks = file.dataset(name).unwrap().num_chunks().unwrap();
        assert!(chunks > 1, "{name}: {chunks} chunk(s)");
    }
    let window = Patch::new(&grid, [10, 5, 40], [30, 20, 60], GhostWidth::uniform(1)).unwrap();
    let part: SpatialField<ZFace> = read_field_window(&file, "with_ghosts", &window).unwrap();
    let layout = part.layout().clone();
    for index in layout.allocated() {
        let global = [0, 1, 2].map(|a| index[a] + window.offset()[a] as isize);
        assert_eq!(
            part.values().unwrap()[layout.linear_index(index)].to_bits(),
            field.values().unwrap()[field.layout().linear_index(global)].to_bits(),
            "{index:?}"
        );
    }
}

#[test]
fn attributes_describe_the_stored_points() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let file = hdf5::File::create(dir.path().join("a.h5")).unwrap();
    let group = file.create_group("dump_0").unwrap();
    let field = numbered::<XFace>("u", &patch());
    write_field(&group, "u", &field, GhostSelection::Interior).unwrap();
    let dataset = group.dataset("u").unwrap();
    // 5 cells on a +x boundary patch: 6 x faces. Shape is (nz, ny, nx).
    assert_eq!(dataset.shape(), vec![3, 5, 6]);
    let text = |name: &str| {
        dataset
            .attr(name)
            .unwrap()
            .read_scalar::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .to_string()
    };
    let reals = |name: &str| dataset.attr(name).unwrap().read_raw::<f64>().unwrap();
    let counts = |name: &str| dataset.attr(name).unwrap().read_raw::<u64>().unwrap();
    assert_eq!(text("location"), "XFace");
    assert_eq!(text("field_name"), "u");
    assert_eq!(text("scalar_type"), "f64");
    for (spacing, expected) in reals("spacing")
        .into_iter()
        .zip([1.4 / 7.0, 0.2, 0.6 / 3.0])
    {
        assert_eq!(spacing, expected);
    }
    let origin = reals("origin");
    assert!((origin[0] - (0.5 + 2.0 * 0.2)).abs() < 1e-12, "{origin:?}");
    assert!((origin[1] - (-1.0 + 0.1)).abs() < 1e-12, "{origin:?}");
    assert_eq!(counts("extents"), vec![6, 5, 3]);
    assert_eq!(counts("ghost_width_minus"), vec![0, 0, 0]);
    assert_eq!(counts("patch_ghosts_minus"), vec![1, 2, 1]);
    assert_eq!(counts("periodic"), vec![0, 1, 0]);
    // Values: x + 10 y + 100 z at the first stored point.
    let data = dataset.read_raw::<f64>().unwrap();
    assert!((data[0] - (origin[0] + 10.0 * origin[1] + 100.0 * origin[2])).abs() < 1e-12);
}

#[test]
fn reading_the_wrong_location_or_a_missing_dataset_names_the_file() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    let field = numbered::<CellCentre>("T", &patch());
    write_field_to_file(&path, "T", &field, GhostSelection::Interior).unwrap();
    let err = read_field_from_file::<XFace, f64>(&path, "T").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("b.h5")
            && message.contains("CellCentre field")
            && message.contains("XFace"),
        "{message}"
    );
    let err = read_field_from_file::<CellCentre, f64>(&path, "missing").unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    let err = read_field_from_file::<CellCentre, f64>(dir.path().join("none.h5"), "T").unwrap_err();
    assert!(err.to_string().contains("none.h5"), "{err}");
}

#[test]
fn writing_over_an_existing_dataset_is_refused_and_keeps_the_old_data() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.h5");
    let first = numbered::<CellCentre>("T", &patch());
    write_field_to_file(&path, "T", &first, GhostSelection::Interior).unwrap();
    let mut second = numbered::<CellCentre>("T", &patch());
    second.fill(-1.0).unwrap();
    assert!(write_field_to_file(&path, "T", &second, GhostSelection::Interior).is_err());
    let back: SpatialField<CellCentre> = read_field_from_file(&path, "T").unwrap();
    assert_eq!(
        back.interior_view().unwrap(),
        first.interior_view().unwrap()
    );
}

#[test]
fn f32_fields_round_trip() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let file = hdf5::File::create(dir.path().join("d.h5")).unwrap();
    let mut field = SpatialField::<CellCentre, f32>::new("single", &patch(), Device::Cpu).unwrap();
    for (i, v) in field.values_mut().unwrap().iter_mut().enumerate() {
        *v = i as f32 * 0.5;
    }
    write_field(&file, "single", &field, GhostSelection::WithGhosts).unwrap();
    let back: SpatialField<CellCentre, f32> = read_field(&file, "single").unwrap();
    assert_eq!(back.values().unwrap(), field.values().unwrap());
}

#[test]
fn files_are_readable_by_h5py() {
    let _files = files_lock();
    let Some(python) = python_with_h5py() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.h5");
    let field = numbered::<YFace>("v", &patch());
    write_field_to_file(&path, "v", &field, GhostSelection::Interior).unwrap();
    let script = r#"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["v"]
    a = d.attrs
    print(d.shape)
    print(a["location"], a["field_name"], [int(n) for n in a["extents"]])
    print(repr(float(d[()].sum())), repr(float(d[0, 0, 0])), repr(float(d[2, 1, 3])))
"#;
    let output = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "h5py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // y faces on a periodic y axis: 5 faces; shape is (nz, ny, nx).
    assert_eq!(lines[0], "(3, 5, 5)");
    assert_eq!(lines[1], "YFace v [5, 5, 3]");
    let interior = field.interior_view().unwrap();
    let numbers: Vec<f64> = lines[2]
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let sum: f64 = interior.iter().sum();
    assert!(
        (numbers[0] - sum).abs() <= 1e-9 * sum.abs().max(1.0),
        "sum {} vs {sum}",
        numbers[0]
    );
    assert_eq!(numbers[1], interior[[0, 0, 0]]);
    // h5py index [k, j, i] is our [i, j, k].
    assert_eq!(numbers[2], interior[[3, 1, 2]]);
}

#[test]
fn a_failed_write_names_the_callers_file_not_the_temporary_one() {
    let _files = files_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fields.h5");
    let field = numbered::<CellCentre>("rho", &patch());
    let error = watershed_fields::io::replace_file(&path, |file| {
        write_field(file, "rho", &field, GhostSelection::Interior)?;
        // The same name twice: refused inside the write.
        write_field(file, "rho", &field, GhostSelection::Interior)
    })
    .unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(!text.contains(".fields.h5."), "{text}");
    // And nothing is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A window of a stored whole-domain field (a patch of a decomposed run,
/// ghosts included) reads the stored values at its points, for every
/// location; a window reaching beyond what is stored, or on another grid,
/// is refused naming the dataset.
#[test]
fn a_window_reads_its_part_of_a_stored_field() {
    fn check<L: Location>() {
        let _guard = files_lock();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("whole.h5");
        let grid = Grid::new([12, 8, 6], [1.2, 0.8, 0.6], [0.5, -1.0, 2.0])
            .unwrap()
            .with_periodic([true, false, false]);
        let whole = numbered::<L>("phi", &grid.whole_domain(2));
        write_field_to_file(&path, "phi", &whole, GhostSelection::WithGhosts).unwrap();
        let file = hdf5::File::open(&path).unwrap();
        let layout = PatchLayout::new(&grid, [3, 2, 1], GhostWidth::uniform(1)).unwrap();
        let mut compared = 0;
        for index in 0..layout.len() {
            let patch = layout.patch(index).unwrap();
            let part: SpatialField<L> = read_field_window(&file, "phi", &patch).unwrap();
            let (w, p) = (whole.layout(), part.layout());
            let offset = patch.offset().map(|o| o as isize);
            for local in p.allocated().iter() {
                let global = [0, 1, 2].map(|a| local[a] + offset[a]);
                assert_eq!(
                    part.values().unwrap()[p.linear_index(local)].to_bits(),
                    whole.values().unwrap()[w.linear_index(global)].to_bits(),
                    "{} patch {index} at {local:?}",
                    L::KIND
                );
                compared += 1;
            }
        }
        assert!(compared > 0);
        // Three ghost layers reach beyond the two stored.
        let wide = PatchLayout::new(&grid, [3, 2, 1], GhostWidth::uniform(3))
            .unwrap()
            .patch(0)
            .unwrap();
        let error = read_field_window::<L, f64>(&file, "phi", &wide).unwrap_err();
        assert!(
            matches!(error, FieldError::Hdf5Format { ref dataset, ref reason, .. }
                if dataset == "phi" && reason.contains("needs")),
            "{error}"
        );
        let other = Grid::new([12, 8, 6], [1.0; 3], [0.0; 3]).unwrap();
        let error = read_field_window::<L, f64>(&file, "phi", &other.whole_domain(1)).unwrap_err();
        assert!(
            matches!(error, FieldError::Hdf5Format { ref reason, .. } if reason.contains("grid")),
            "{error}"
        );
    }
    check::<CellCentre>();
    check::<XFace>();
    check::<YFace>();
    check::<ZFace>();
}
