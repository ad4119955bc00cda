//! Checkpoints and restarts through the `watershed` program: a restarted
//! run is bitwise identical to an uninterrupted one (a transport case and
//! the cavity), only the newest two checkpoints are kept, wrong restart
//! files are refused without touching the output, and a run killed at any
//! moment leaves readable dumps, a valid XDMF and a usable checkpoint.

#[path = "../../fields/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use watershed_fields::io::read_field_from_file;
use watershed_fields::{CellCentre, Location, SpatialField, XFace, YFace};

fn watershed(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_watershed"))
        .args(args)
        .current_dir(dir)
        .env("WATERSHED_DISABLE_CUDA", "1")
        .output()
        .expect("the watershed binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn values<L: Location>(file: &Path, name: &str) -> Vec<u64> {
    let field: SpatialField<L> = read_field_from_file(file, name).unwrap();
    field
        .values()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn checkpoints(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint_") && n.ends_with(".h5"))
        .collect();
    names.sort();
    names
}

/// Runs `case` to step `2k` in one go (checkpointing every `k`), and again
/// from the checkpoint at `k` in another directory; the final dumps must
/// agree bit for bit in every field of `fields`.
fn restart_is_bitwise(case: &str, sets: &[&str], k: u64, fields: &[(&str, char)]) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let total = (2 * k).to_string();
    let every = k.to_string();
    let mut args = vec![
        "run",
        case,
        "--steps",
        &total,
        "--checkpoint-every",
        &every,
        "--output",
        "a",
        "--quiet",
        "--threads",
        "2",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (code, out, err) = watershed(root, &args);
    assert!(code == 0 || code == 3, "{out}\n{err}");
    assert_eq!(
        checkpoints(&root.join("a")),
        [
            format!("checkpoint_{:08}.h5", k),
            format!("checkpoint_{:08}.h5", 2 * k)
        ]
    );
    std::fs::create_dir(root.join("b")).unwrap();
    let checkpoint = format!("b/checkpoint_{k:08}.h5");
    std::fs::copy(
        root.join(format!("a/checkpoint_{k:08}.h5")),
        root.join(&checkpoint),
    )
    .unwrap();
    let (code, out, err) = watershed(
        root,
        &[
            "run",
            case,
            "--restart",
            &checkpoint,
            "--steps",
            &total,
            "--output",
            "b",
            "--quiet",
            "--threads",
            "1",
        ],
    );
    assert!(code == 0 || code == 3, "{out}\n{err}");
    assert!(
        out.contains(&format!("steps {k} (now at step {total}")),
        "{out}"
    );
    let name = format!("{case}_{:08}.h5", 2 * k);
    let (a, b) = (root.join("a").join(&name), root.join("b").join(&name));
    for &(field, location) in fields {
        let same = match location {
            'x' => values::<XFace>(&a, field) == values::<XFace>(&b, field),
            'y' => values::<YFace>(&a, field) == values::<YFace>(&b, field),
            _ => values::<CellCentre>(&a, field) == values::<CellCentre>(&b, field),
        };
        assert!(same, "{case}: field {field} differs after the restart");
    }
    // The restarted series lists the dump at the restart step and the end.
    let xdmf = std::fs::read_to_string(root.join(format!("b/{case}.xmf"))).unwrap();
    assert!(
        xdmf.contains(&format!("{case}_{k:08}.h5:"))
            && xdmf.contains(&format!("{case}_{:08}.h5:", 2 * k)),
        "{xdmf}"
    );
}

#[test]
fn a_restarted_transport_run_is_bitwise_identical() {
    restart_is_bitwise(
        "advection",
        &["cells=24", "scheme=\"limited\""],
        7,
        &[("c", 'c')],
    );
    restart_is_bitwise(
        "reacting-species",
        &["cells=16", "flow=computed"],
        4,
        &[("Y_A", 'c'), ("Y_C", 'c'), ("u", 'x')],
    );
    // The species and their computed flow on 2 x 2 patches: the species
    // gathered into the checkpoint, the flow whole.
    restart_is_bitwise(
        "reacting-species",
        &["cells=16", "flow=computed", "patches=2,2,1"],
        3,
        &[
            ("Y_A", 'c'),
            ("Y_B", 'c'),
            ("u", 'x'),
            ("v", 'y'),
            ("p", 'c'),
        ],
    );
}

/// The reacting species carried by the prescribed flow on 2 x 2 and 4 x 1
/// patches give one patch's bits: the species and the velocity shown.
#[test]
fn reacting_species_on_patches_give_one_patchs_bits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (output, patches) in [("one", "1,1,1"), ("four", "2,2,1"), ("strips", "4,1,1")] {
        let patches = format!("patches={patches}");
        let (code, out, err) = watershed(
            root,
            &[
                "run",
                "reacting-species",
                "--steps",
                "5",
                "--output",
                output,
                "--quiet",
                "--set",
                "cells=16",
                "--set",
                &patches,
            ],
        );
        assert!(code == 0, "{out}\n{err}");
    }
    let end = "reacting-species_00000005.h5";
    let at = |output: &str| root.join(output).join(end);
    for other in ["four", "strips"] {
        for species in ["Y_A", "Y_B", "Y_C"] {
            assert!(
                values::<CellCentre>(&at(other), species)
                    == values::<CellCentre>(&at("one"), species),
                "{other}: {species} differs from one patch's"
            );
        }
        assert!(values::<XFace>(&at(other), "u") == values::<XFace>(&at("one"), "u"));
        assert!(values::<YFace>(&at(other), "v") == values::<YFace>(&at("one"), "v"));
    }
    // Not all zeros: C was produced.
    let c = values::<CellCentre>(&at("one"), "Y_C");
    assert!(c.iter().any(|&bits| f64::from_bits(bits) > 0.0));
}

/// The hand-built ExprLib graph on 2 x 1 x 2 patches in one process,
/// with each step's exchange overlapped with its interior work or not,
/// gives one patch's bits at every dump; so does the overlapped run
/// continued from its step-3 checkpoint (the first step after a restart,
/// like the first of a run, reads the ghosts it was loaded with).
#[test]
fn the_exprlib_graph_on_patches_overlapped_or_not_gives_one_patchs_bits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let run = |output: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "exprlib-scalability",
            "--steps",
            "6",
            "--dump-every",
            "3",
            "--quiet",
            "--output",
            output,
            "--set",
            "pdes=3",
            "--set",
            "cells=8",
            "--set",
            "variant=\"independent\"",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = watershed(root, &args);
        assert!(code == 0, "{output}: {out}\n{err}");
    };
    run("one", &[]);
    run("plain", &["--set", "patches=2,1,2"]);
    run(
        "overlapped",
        &[
            "--set",
            "patches=2,1,2",
            "--set",
            "overlap_exchange=true",
            "--checkpoint-every",
            "3",
        ],
    );
    run(
        "resumed",
        &[
            "--set",
            "patches=2,1,2",
            "--set",
            "overlap_exchange=true",
            "--restart",
            "overlapped/checkpoint_00000003.h5",
        ],
    );
    for dump in [
        "exprlib-scalability_00000003.h5",
        "exprlib-scalability_00000006.h5",
    ] {
        for other in ["plain", "overlapped", "resumed"] {
            if other == "resumed" && dump.ends_with("3.h5") {
                continue;
            }
            for phi in ["phi0", "phi1", "phi2"] {
                assert!(
                    values::<CellCentre>(&root.join(other).join(dump), phi)
                        == values::<CellCentre>(&root.join("one").join(dump), phi),
                    "{other}: {phi} of {dump} differs from one patch's"
                );
            }
        }
    }
}

/// A decomposed run gives the bits of one patch, and its checkpoint
/// restarts on another patch layout with the same bits: advection on one
/// patch, on 2 x 2 patches with a checkpoint halfway, and from that
/// checkpoint on 4 x 1 patches.
#[test]
fn a_transport_run_restarts_on_another_patch_layout() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let run = |output: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "advection",
            "--steps",
            "10",
            "--output",
            output,
            "--quiet",
            "--set",
            "cells=24",
        ];
        args.extend(extra);
        let (code, out, err) = watershed(root, &args);
        assert!(code == 0 || code == 3, "{out}\n{err}");
        out
    };
    run("one", &["--set", "patches=1,1,1"]);
    run(
        "four",
        &["--set", "patches=2,2,1", "--checkpoint-every", "5"],
    );
    let out = run(
        "moved",
        &[
            "--restart",
            "four/checkpoint_00000005.h5",
            "--set",
            "patches=4,1,1",
        ],
    );
    assert!(out.contains("steps 5 (now at step 10"), "{out}");
    let end = "advection_00000010.h5";
    let reference = values::<CellCentre>(&root.join("one").join(end), "c");
    for other in ["four", "moved"] {
        assert!(
            values::<CellCentre>(&root.join(other).join(end), "c") == reference,
            "{other}: the final dump differs from one patch's"
        );
    }
}

/// The DFG cylinder (an immersed body) on 4 x 2 patches, its projection
/// replicated, gives one patch's bits: every dumped field and the force
/// coefficients of every step.
#[test]
fn the_cylinder_on_patches_gives_one_patchs_bits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let run = |output: &str, patches: &str| {
        let args = [
            "run",
            "cylinder",
            "--steps",
            "4",
            "--dump-every",
            "2",
            "--output",
            output,
            "--quiet",
            "--set",
            "cells=16",
            "--set",
            "replicate_projection=true",
            "--set",
            patches,
        ];
        let (code, out, err) = watershed(root, &args);
        assert!(code == 0 || code == 3, "{out}\n{err}");
    };
    run("one", "patches=1,1,1");
    run("eight", "patches=4,2,1");
    for step in [2, 4] {
        let file = format!("cylinder_{step:08}.h5");
        let (one, eight) = (root.join("one").join(&file), root.join("eight").join(&file));
        assert!(
            values::<XFace>(&eight, "u") == values::<XFace>(&one, "u")
                && values::<YFace>(&eight, "v") == values::<YFace>(&one, "v")
                && values::<CellCentre>(&eight, "p") == values::<CellCentre>(&one, "p"),
            "{file}: the dump on patches differs from one patch's"
        );
    }
    let forces =
        |run: &str| std::fs::read_to_string(root.join(run).join("cylinder_forces.csv")).unwrap();
    let one = forces("one");
    assert_eq!(one.lines().count(), 5, "{one}");
    assert_eq!(forces("eight"), one);
}

/// The cylinder restarted at step 2 of 4, from a whole checkpoint and
/// from one written per rank on 2 x 2 patches, continues its force
/// history without a gap (the bodies' weighted momentum is in the
/// checkpoint) and gives the uninterrupted run's dumps and forces, bit for
/// bit; the dumps per rank hold the staggered components' pieces.
#[test]
fn a_restarted_cylinder_keeps_every_force_and_its_files_per_rank_their_bits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let run = |output: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "cylinder",
            "--steps",
            "4",
            "--dump-every",
            "2",
            "--output",
            output,
            "--quiet",
            "--set",
            "cells=16",
        ];
        args.extend(extra);
        let (code, out, err) = watershed(root, &args);
        assert!(code == 0 || code == 3, "{out}\n{err}");
    };
    let forces =
        |run: &str| std::fs::read_to_string(root.join(run).join("cylinder_forces.csv")).unwrap();
    run("straight", &[]);
    run("whole", &["--checkpoint-every", "2"]);
    std::fs::remove_file(root.join("whole/checkpoint_00000004.h5")).unwrap();
    run("whole", &["--restart", "whole/checkpoint_00000002.h5"]);
    let straight = forces("straight");
    assert_eq!(straight.lines().count(), 5, "{straight}");
    assert_eq!(forces("whole"), straight);
    let last = "cylinder_00000004.h5";
    let reference = root.join("straight").join(last);
    assert!(
        values::<XFace>(&root.join("whole").join(last), "u") == values::<XFace>(&reference, "u")
    );
    // On 2 x 2 patches, files per rank (one rank writes every patch).
    let patches = ["--set", "patches=2,2,1", "--per-rank-files"];
    run(
        "patches",
        &[&patches[..], &["--checkpoint-every", "2"]].concat(),
    );
    run("patches-alone", &patches[..2]);
    run(
        "patches",
        &[
            &patches[..],
            &["--restart", "patches/checkpoint_00000002.h5"],
        ]
        .concat(),
    );
    assert_eq!(forces("patches"), forces("patches-alone"));
    // The step-4 dump put together from its patches: u on the x faces
    // (17 x 16 over 4 patches, those on the outflow side one plane
    // longer) and p, as the run without a restart wrote them whole.
    let whole = hdf5::File::open(root.join("patches-alone").join(last)).unwrap();
    let whole_u = whole.dataset("u").unwrap();
    let (ny, nx) = (whole_u.shape()[1], whole_u.shape()[2]);
    let expected: Vec<u64> = whole_u
        .read_raw::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let rank_file = root.join("patches").join("cylinder_00000004.rank00000.h5");
    let file = hdf5::File::open(&rank_file).unwrap();
    let mut u = vec![u64::MAX; nx * ny];
    for patch in 0..4 {
        let group = file.group(&format!("patch_{patch:05}")).unwrap();
        let offset: Vec<u64> = group.attr("offset").unwrap().read_raw().unwrap();
        let dataset = group.dataset("u").unwrap();
        let shape = dataset.shape();
        let cells = (nx - 1) / 2;
        let wide = if offset[0] == 0 { cells } else { cells + 1 };
        assert_eq!(shape[2], wide, "patch {patch}: {shape:?}");
        let piece: Vec<f64> = dataset.read_raw().unwrap();
        for j in 0..shape[1] {
            for i in 0..shape[2] {
                u[(offset[1] as usize + j) * nx + offset[0] as usize + i] =
                    piece[j * shape[2] + i].to_bits();
            }
        }
    }
    assert!(u == expected, "u put together from the patches differs");
}

#[test]
fn a_restarted_cavity_is_bitwise_identical() {
    restart_is_bitwise(
        "lid-driven-cavity",
        &["cells=16", "integrator=\"ssp-rk3\""],
        12,
        &[("u", 'x'), ("v", 'y'), ("p", 'c')],
    );
}

#[test]
fn a_restarted_channel_is_bitwise_identical() {
    // An inflow given as an expression and a convective outflow, whose
    // speed is set from the state at each step's start.
    restart_is_bitwise(
        "channel",
        &["cells=8"],
        10,
        &[("u", 'x'), ("v", 'y'), ("p", 'c')],
    );
}

#[test]
fn wrong_restart_files_are_refused_and_nothing_is_clobbered() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (code, _, err) = watershed(
        root,
        &[
            "run",
            "advection",
            "--set",
            "cells=16",
            "--steps",
            "4",
            "--checkpoint-every",
            "2",
            "--output",
            "adv",
            "--quiet",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let before = std::fs::read(root.join("adv/advection_00000004.h5")).unwrap();
    let refuse = |args: &[&str], needle: &str| {
        let (code, out, err) = watershed(root, args);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(err.contains(needle), "{needle} not in: {err}");
    };
    refuse(
        &[
            "run",
            "heat",
            "--restart",
            "adv/checkpoint_00000004.h5",
            "--output",
            "adv",
        ],
        "it was written by case `advection`, not `heat`",
    );
    refuse(
        &[
            "run",
            "advection",
            "--restart",
            "adv/checkpoint_00000004.h5",
            "--set",
            "cells=32",
            "--output",
            "adv",
        ],
        "it holds a [16, 16, 1]-cell grid, this run configures [32, 32, 1] cells",
    );
    refuse(
        &[
            "run",
            "advection",
            "--restart",
            "adv/advection_00000004.h5",
            "--output",
            "adv",
        ],
        "not a Watershed checkpoint",
    );
    std::fs::write(root.join("junk.h5"), "junk").unwrap();
    refuse(
        &[
            "run",
            "advection",
            "--restart",
            "junk.h5",
            "--output",
            "adv",
        ],
        "not a readable HDF5 file",
    );
    refuse(
        &[
            "run",
            "advection",
            "--restart",
            "missing.h5",
            "--output",
            "adv",
        ],
        "restart file missing.h5: no such file",
    );
    assert_eq!(
        std::fs::read(root.join("adv/advection_00000004.h5")).unwrap(),
        before
    );
    assert_eq!(checkpoints(&root.join("adv")).len(), 2);
}

/// A real run killed (SIGKILL) while it writes dumps and checkpoints: every
/// dump the XDMF lists is complete and readable, the XDMF is valid, and
/// the newest checkpoint restarts.
#[test]
fn a_killed_run_leaves_valid_output_and_a_usable_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let python = common::python_with_h5py();
    for (round, wait_for) in [(0, 4usize), (1, 9)] {
        let out = format!("killed{round}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_watershed"))
            .args([
                "run",
                "lid-driven-cavity",
                "--set",
                "cells=48",
                "--end-time",
                "1000",
                "--dump-every",
                "2",
                "--checkpoint-every",
                "3",
                "--output",
                &out,
                "--quiet",
                "--threads",
                "1",
            ])
            .current_dir(root)
            .env("WATERSHED_DISABLE_CUDA", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let out_dir = root.join(&out);
        loop {
            let dumps = std::fs::read_dir(&out_dir)
                .map(|d| {
                    d.flatten()
                        .filter(|e| {
                            let name = e.file_name().to_string_lossy().into_owned();
                            name.starts_with("lid-driven-cavity_") && name.ends_with(".h5")
                        })
                        .count()
                })
                .unwrap_or(0);
            if dumps >= wait_for || started.elapsed() > Duration::from_secs(120) {
                break;
            }
            std::thread::sleep(Duration::from_millis(7 + 13 * round as u64));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let xdmf = out_dir.join("lid-driven-cavity.xmf");
        let text = std::fs::read_to_string(&xdmf).unwrap();
        let listed: Vec<&str> = text
            .split("Format=\"HDF\">")
            .skip(1)
            .map(|s| s.split(':').next().unwrap())
            .collect();
        assert!(listed.len() >= 3 * (wait_for - 1), "{text}");
        for file in &listed {
            let _: SpatialField<XFace> = read_field_from_file(out_dir.join(file), "u").unwrap();
        }
        if let Some(python) = &python {
            let status = Command::new(python)
                .args([
                    "-c",
                    "import sys, xml.etree.ElementTree as ET; ET.parse(sys.argv[1])",
                ])
                .arg(&xdmf)
                .status()
                .unwrap();
            assert!(status.success());
        }
        let newest = checkpoints(&out_dir)
            .pop()
            .expect("a checkpoint was written");
        let restart = format!("{out}/{newest}");
        let (code, stdout, err) = watershed(
            root,
            &[
                "run",
                "lid-driven-cavity",
                "--restart",
                &restart,
                "--steps",
                "40",
                "--output",
                &out,
                "--quiet",
            ],
        );
        assert!(code == 0 || code == 3, "{stdout}\n{err}");
        assert!(stdout.contains("now at step 40"), "{stdout}");
    }
}
