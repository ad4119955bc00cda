//! Every case's output as a ParaView user sees it: each case is run with a
//! few dumps, each of its XDMF documents is opened with pvpython's default
//! reader (`OpenDataFile`, what File > Open picks), and what ParaView
//! returns is compared with the HDF5 files by h5py: times, array names,
//! components, locations and every value, bit for bit; the main document
//! of each case is rendered (a slice through the middle in 3D) and the
//! image must show the data (scripts/viewer/*.py say how).
//!
//! Needs ParaView (`pvpython`) and `xvfb-run` from apt
//! (scripts/viewer-tools.sh installs them). With `WATERSHED_VIEWER_TEST=1`
//! (set by .ci/run) a missing ParaView fails the test; otherwise the test
//! says it is skipped.

#[path = "../../fields/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One pvpython at a time: two `xvfb-run -a` started together can pick the
/// same display, and one of them then fails ("bad X server connection").
static ONE_VIEWER: Mutex<()> = Mutex::new(());

fn found(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether ParaView is here; panics when `WATERSHED_VIEWER_TEST=1` asks
/// for the test and it is not.
fn paraview_available() -> bool {
    if found("pvpython") && found("xvfb-run") {
        return true;
    }
    let switch = std::env::var("WATERSHED_VIEWER_TEST").unwrap_or_default();
    if switch == "1" {
        panic!(
            "WATERSHED_VIEWER_TEST=1 asks for the viewer test, but pvpython or xvfb-run is missing: run scripts/test.sh as root (scripts/viewer-tools.sh installs paraview, python3-paraview, xvfb and xauth with apt)"
        );
    }
    eprintln!(
        "skipped: the viewer test needs pvpython and xvfb-run (apt: paraview python3-paraview xvfb xauth; scripts/viewer-tools.sh){}",
        if switch.is_empty() {
            String::new()
        } else {
            format!(" (WATERSHED_VIEWER_TEST={switch})")
        }
    );
    false
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/viewer")
}

/// Runs pvpython on `script` (in scripts/viewer) under a virtual X server:
/// it writes `report` about `documents` and its renderings into `root`.
/// One pvpython at a time ([`ONE_VIEWER`]).
fn paraview_sees(script: &str, report: &Path, root: &Path, documents: &[PathBuf]) {
    let see = || {
        Command::new("xvfb-run")
            .args(["-a", "pvpython"])
            .arg(scripts().join(script))
            .arg(report)
            .arg(root)
            .args(documents)
            .output()
            .unwrap()
    };
    let _viewer = ONE_VIEWER.lock().unwrap_or_else(|e| e.into_inner());
    let mut seen = see();
    // The virtual X server sometimes fails to come up in time on a busy
    // machine ("bad X server connection", twice in a row once while two
    // builds ran beside the suite): up to three more tries, a little later
    // each time, for that reason only.
    for pause in [1, 3, 6] {
        if seen.status.success() || !text(&seen).contains("bad X server connection") {
            break;
        }
        eprintln!("the virtual X server was not ready; trying again in {pause} s");
        std::thread::sleep(std::time::Duration::from_secs(pause));
        seen = see();
    }
    assert!(
        seen.status.success() && report.exists(),
        "pvpython failed: {}",
        text(&seen)
    );
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn paraview_s_default_reader_shows_every_case_s_fields_where_and_when_they_are() {
    if !paraview_available() {
        return;
    }
    let Some(python) = common::python_with_h5py() else {
        return;
    };
    // Renderings stay for a look: target/tmp/viewer/*.png.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let cases: [(&str, &[&str]); 10] = [
        // 2D flow: staggered u, v, derived velocity, speed, vorticity.
        ("lid-driven-cavity", &["cells=16"]),
        // Inflow and outflow.
        ("channel", &["cells=8"]),
        // An immersed body: its mask and distance.
        ("cylinder", &["cells=16"]),
        // 3D flow, periodic: the vorticity vector.
        ("taylor-green", &["cells=8", "dimensions=3"]),
        // 2D periodic flow.
        ("taylor-green-2d", &["cells=16"]),
        ("heat", &["cells=8"]),
        ("advection", &["cells=16"]),
        ("reacting-species", &["cells=8"]),
        ("exprlib-scalability", &["cells=8"]),
        ("wasatch-scalability", &["cells=8"]),
    ];
    let mut documents = Vec::new();
    for (output, settings) in cases {
        let case = output.trim_end_matches("-2d");
        let directory = root.join(output);
        let mut args = vec![
            "run".to_string(),
            case.to_string(),
            "--output".into(),
            directory.to_string_lossy().into_owned(),
            "--steps".into(),
            "4".into(),
            "--dump-every".into(),
            "2".into(),
            "--quiet".into(),
        ];
        for setting in settings {
            args.extend(["--set".to_string(), setting.to_string()]);
        }
        let run = Command::new(env!("CARGO_BIN_EXE_watershed"))
            .args(&args)
            .env("WATERSHED_DISABLE_CUDA", "1")
            .output()
            .unwrap();
        // A short run may fail its case's check (exit 3); the output is
        // what is checked here.
        let code = run.status.code().unwrap_or(-1);
        assert!(
            code == 0 || code == 3,
            "{case}: exit {code}\n{}",
            text(&run)
        );
        let mut found: Vec<PathBuf> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "xmf"))
            .collect();
        found.sort();
        assert!(
            found
                .iter()
                .any(|p| p.file_name().unwrap().to_string_lossy() == format!("{case}.xmf")),
            "{case}: no main document in {found:?}"
        );
        documents.extend(found);
    }
    let report = root.join("report.json");
    paraview_sees("paraview_sees.py", &report, &root, &documents);
    let compared = Command::new(&python)
        .arg(scripts().join("compare_with_hdf5.py"))
        .arg(&report)
        .output()
        .unwrap();
    let verdict = text(&compared);
    assert!(compared.status.success(), "{verdict}");
    println!("{verdict}");
    // Every document, and the arrays a flow's user colours by.
    assert!(
        verdict.contains(&format!("viewer check: ok {} documents", documents.len())),
        "{verdict}"
    );
    for needle in [
        "lid-driven-cavity.xmf: 3 times, 12 arrays",
        "lid-driven-cavity_xface.xmf: 3 times, 3 arrays",
        "taylor-green-2d/taylor-green.xmf: 3 times, 12 arrays",
        "taylor-green/taylor-green_zface.xmf: 3 times, 3 arrays",
        "rendered coloured by speed",
    ] {
        assert!(verdict.contains(needle), "{needle} missing:\n{verdict}");
    }
}

/// Runs the watershed program with `args` (a short run may fail its
/// case's check, exit 3: the output is what is checked).
fn run_watershed(args: &[String]) {
    let run = Command::new(env!("CARGO_BIN_EXE_watershed"))
        .args(args)
        .env("WATERSHED_DISABLE_CUDA", "1")
        .output()
        .unwrap();
    let code = run.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 3,
        "{args:?}: exit {code}\n{}",
        text(&run)
    );
}

#[test]
fn paraview_s_default_reader_shows_a_per_rank_files_as_one_dataset_of_patches_equal_to_the_whole_dump()
 {
    if !paraview_available() {
        return;
    }
    let Some(python) = common::python_with_h5py() else {
        return;
    };
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer-patches");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    // A 2D case on 2 x 2 patches, a 3D one on 2 x 1 x 2 and a flow (its
    // staggered components in documents of their own, each patch's piece
    // of a face field one plane longer where it ends on a wall) on 2 x 2,
    // each run twice: once per rank, once whole.
    let cases: [(&str, &[&str]); 3] = [
        ("advection", &["cells=16", "patches=2,2,1"]),
        ("wasatch-scalability", &["cells=8", "patches=2,1,2"]),
        ("lid-driven-cavity", &["cells=16", "patches=2,2,1"]),
    ];
    let mut documents = Vec::new();
    let mut pairs = Vec::new();
    for (case, settings) in cases {
        let per_rank = root.join(format!("{case}-per-rank"));
        let whole = root.join(format!("{case}-whole"));
        for (directory, extra) in [(&per_rank, Some("--per-rank-files")), (&whole, None)] {
            let mut args: Vec<String> = [
                "run",
                case,
                "--steps",
                "4",
                "--dump-every",
                "2",
                "--quiet",
                "--output",
            ]
            .map(String::from)
            .to_vec();
            args.push(directory.to_string_lossy().into_owned());
            args.extend(extra.map(String::from));
            for setting in settings {
                args.extend(["--set".to_string(), setting.to_string()]);
            }
            run_watershed(&args);
        }
        let faces: &[&str] = if case == "lid-driven-cavity" {
            &["", "_xface", "_yface"]
        } else {
            &[""]
        };
        for location in faces {
            let document = per_rank.join(format!("{case}{location}.xmf"));
            pairs.push(format!("{}={}", document.display(), whole.display()));
            documents.push(document);
        }
    }
    let report = root.join("report.json");
    paraview_sees("paraview_sees_patches.py", &report, &root, &documents);
    let compared = Command::new(&python)
        .arg(scripts().join("compare_patches.py"))
        .arg(&report)
        .args(&pairs)
        .output()
        .unwrap();
    let verdict = text(&compared);
    assert!(compared.status.success(), "{verdict}");
    println!("{verdict}");
    // 3 dumps each: 4 patches of advection, 4 of wasatch-scalability, 4
    // of each of the cavity's three documents.
    for needle in [
        "patches check: ok 5 documents, 60 blocks",
        "advection.xmf: 3 times, 4 patches",
        "wasatch-scalability.xmf: 3 times, 4 patches",
        "lid-driven-cavity.xmf: 3 times, 4 patches",
        "lid-driven-cavity_xface.xmf: 3 times, 4 patches",
        "lid-driven-cavity_yface.xmf: 3 times, 4 patches",
    ] {
        assert!(verdict.contains(needle), "{needle} missing:\n{verdict}");
    }
}
