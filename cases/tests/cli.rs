//! The `watershed` program end to end: listing, configuration errors (exact
//! messages and exit status 2, nothing written), HDF5 + XDMF output read by
//! an independent reader, inspect, DOT and trace files, devices, and the
//! output-directory rules.

#[path = "../../fields/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

fn watershed_in(dir: &Path, args: &[&str]) -> Outcome {
    run_watershed(dir, args, false)
}

/// The program in `dir`; GPUs stay disabled unless `gpus` (so that the
/// messages the tests expect do not depend on the machine).
fn run_watershed(dir: &Path, args: &[&str], gpus: bool) -> Outcome {
    let mut command = Command::new(env!("CARGO_BIN_EXE_watershed"));
    command.args(args).current_dir(dir).env_remove("RUST_LOG");
    if gpus {
        command.env_remove("WATERSHED_DISABLE_CUDA");
    } else {
        command.env("WATERSHED_DISABLE_CUDA", "1");
    }
    let output = command.output().expect("the watershed binary runs");
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn watershed(args: &[&str]) -> Outcome {
    watershed_in(&std::env::temp_dir(), args)
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn version_names_the_package_version_and_the_devices() {
    let out = watershed(&["--version"]);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout
            .starts_with(&format!("watershed {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("no CUDA device (GPUs are disabled by WATERSHED_DISABLE_CUDA)"),
        "{}",
        out.stdout
    );
}

/// `WATERSHED_EMULATE_GPUS` makes the device layer report emulated GPUs,
/// says so, and names a malformed value; `WATERSHED_DISABLE_CUDA` hides
/// emulated GPUs too.
#[test]
fn version_names_emulated_gpus_and_a_malformed_request() {
    let version = |emulate: &str, disable: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_watershed"));
        command
            .arg("--version")
            .env("WATERSHED_EMULATE_GPUS", emulate)
            .env_remove("WATERSHED_DISABLE_CUDA");
        if disable {
            command.env("WATERSHED_DISABLE_CUDA", "1");
        }
        let output = command.output().unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let two = version("2", false);
    assert!(two.contains("GPUs: 2 emulated GPU(s) on the host"), "{two}");
    let malformed = version("two", false);
    assert!(
        malformed.contains("no CUDA device (WATERSHED_EMULATE_GPUS=\"two\" is not a number"),
        "{malformed}"
    );
    let hidden = version("2", true);
    assert!(
        hidden.contains("no CUDA device (GPUs are disabled by WATERSHED_DISABLE_CUDA)"),
        "{hidden}"
    );
}

#[test]
fn list_names_every_case_with_a_line() {
    let out = watershed(&["list"]);
    assert_eq!(out.code, 0);
    for case in watershed_cases::registered_cases() {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(case.name))
            .unwrap_or_else(|| panic!("{} missing from\n{}", case.name, out.stdout));
        assert!(line.contains(case.description), "{line}");
    }
}

#[test]
fn an_unknown_command_fails_with_usage() {
    let out = watershed(&["frobnicate"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("Usage"), "{}", out.stderr);
}

/// Runs a command that must be refused with exit status 2, writing nothing
/// into a fresh output directory; returns stderr.
fn refused(args: &[&str]) -> String {
    let dir = temp();
    let output = dir.path().join("out");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--output", path(&output), "--quiet"]);
    let out = watershed_in(dir.path(), &all);
    assert_eq!(out.code, 2, "stdout {}\nstderr {}", out.stdout, out.stderr);
    assert!(
        !output.exists(),
        "a refused run created its output directory"
    );
    out.stderr
}

#[test]
fn dumps_per_rank_are_refused_for_a_case_that_is_not_on_patches() {
    let message = refused(&[
        "run",
        "lid-driven-cavity",
        "--set",
        "cells=16",
        "--steps",
        "1",
        "--per-rank-files",
    ]);
    assert!(
        message.contains(
            "`lid-driven-cavity` cannot write its dumps and checkpoints per rank (--per-rank-files)"
        ),
        "{message}"
    );
}

#[test]
fn configuration_errors_name_the_key_the_value_the_range_and_the_line() {
    let e = refused(&["run", "no-such-case"]);
    assert!(
        e.contains("unknown case `no-such-case`") && e.contains("lid-driven-cavity"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--set", "cels=8"]);
    assert!(
        e.contains("unknown key `cels`") && e.contains("cells") && e.contains("--set"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--set", "cells=many"]);
    assert!(
        e.contains("--set cells=many") && e.contains("invalid type"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--set", "cells=2"]);
    assert!(
        e.contains("cells = 2 is out of range") && e.contains("4 ..= 512") && e.contains("(--set)"),
        "{e}"
    );
    let e = refused(&["run", "advection", "--set", "scheme=\"fancy\""]);
    assert!(
        e.contains("scheme = \"fancy\"") && e.contains("\"central\", \"upwind\", \"limited\""),
        "{e}"
    );
    let e = refused(&["run", "heat", "--set", "cells"]);
    assert!(e.contains("not of the form key=value"), "{e}");

    let dir = temp();
    let file = dir.path().join("heat.toml");
    std::fs::write(&file, "# my run\ncells = 16\n\ndiffusivity = -1.0\n").unwrap();
    let e = refused(&["run", "heat", "--config", path(&file)]);
    assert!(
        e.contains("diffusivity = -1 is out of range") && e.contains("heat.toml, line 4"),
        "{e}"
    );
    std::fs::write(&file, "cells = 16\ncolour = \"blue\"\n").unwrap();
    let e = refused(&["run", "heat", "--config", path(&file)]);
    assert!(
        e.contains("unknown field `colour`") && e.contains("line 2"),
        "{e}"
    );
    std::fs::write(&file, "cells = \"sixteen\"\n").unwrap();
    let e = refused(&["run", "heat", "--config", path(&file)]);
    assert!(e.contains("invalid type") && e.contains("line 1"), "{e}");
    let e = refused(&["run", "heat", "--config", "/no/such/file.toml"]);
    assert!(
        e.contains("cannot read the configuration file /no/such/file.toml"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--threads", "0"]);
    assert!(e.contains("--threads must be at least 1"), "{e}");
    let e = refused(&["run", "heat", "--end-time", "nan"]);
    assert!(e.contains("--end-time NaN must be finite"), "{e}");
    let e = refused(&["run", "heat", "--dump-every", "0"]);
    assert!(e.contains("--dump-every must be at least 1"), "{e}");
    let e = refused(&["run", "heat", "--device", "gpu"]);
    assert!(
        e.contains("--device gpu: GPU 0 is not available") && e.contains("--device cpu"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--device", "tpu"]);
    assert!(e.contains("expected auto, cpu, gpu or gpu:K"), "{e}");
    let e = refused(&["run", "advection", "--convergence"]);
    assert!(
        e.contains("--convergence is an option of the heat case"),
        "{e}"
    );
}

#[test]
fn print_config_shows_the_documented_defaults_and_the_overrides() {
    let out = watershed(&["run", "lid-driven-cavity", "--print-config"]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("# Reynolds number"), "{}", out.stdout);
    assert!(out.stdout.contains("re = 100.0"), "{}", out.stdout);
    let out = watershed(&[
        "run",
        "lid-driven-cavity",
        "--print-config",
        "--set",
        "re=400",
    ]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("re = 400.0"), "{}", out.stdout);
}

#[test]
fn emit_prints_every_kernel_of_the_case_in_c_and_cuda_without_running() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "wasatch-scalability",
            "--emit",
            "c",
            "--set",
            "pdes=3",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // One heading comment and one function per kernel; the coupled source
    // written out in each equation is one hoisted kernel.
    let functions = out.stdout.matches("\nlong long k").count();
    let headings = out.stdout.matches("\n/* node `").count();
    assert!(functions >= 4 && functions == headings, "{}", out.stdout);
    assert!(out.stdout.contains("/* node `cse0`"), "{}", out.stdout);
    // The helpers (printed once) define `ws_exp` and call it from `ws_tanh`
    // and `ws_pow`; the kernels call it three times.
    let in_helpers = watershed_operators::vmath::source(watershed_operators::vmath::Dialect::C)
        .matches("ws_exp(")
        .count();
    assert_eq!(
        out.stdout.matches("ws_exp(").count() - in_helpers,
        3,
        "three exp calls besides the helpers: {}",
        out.stdout
    );
    assert!(!dir.path().join("output").exists(), "--emit runs nothing");
    let out = watershed(&[
        "run",
        "wasatch-scalability",
        "--emit",
        "cuda",
        "--set",
        "pdes=2",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("extern \"C\" __global__ void k0_cse0("),
        "{}",
        out.stdout
    );
    let out = watershed(&["run", "wasatch-scalability", "--emit", "fortran"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("fortran"), "{}", out.stderr);
}

#[test]
fn cases_run_on_the_gpu_pass_their_checks_and_report_its_memory() {
    let dir = temp();
    let on_cpu = run_watershed(
        dir.path(),
        &[
            "run", "heat", "--device", "cpu", "--quiet", "--output", "cpu",
        ],
        false,
    );
    assert_eq!(on_cpu.code, 0, "{}", on_cpu.stderr);
    assert!(
        on_cpu.stdout.contains("GPU: none used") && !on_cpu.stdout.contains("GPU calls"),
        "{}",
        on_cpu.stdout
    );
    let Some(_) = watershed_fields::gpu::gpu_for_tests(
        "cases_run_on_the_gpu_pass_their_checks_and_report_its_memory",
    ) else {
        return;
    };
    // Taylor-Green: the flow's whole step, its pressure solve included,
    // on the GPU, against the analytic decay.
    for (case, output) in [
        ("heat", "heat"),
        ("advection", "advection"),
        ("taylor-green", "taylor-green"),
    ] {
        let out = run_watershed(
            dir.path(),
            &[
                "run", case, "--device", "gpu", "--quiet", "--output", output,
            ],
            true,
        );
        assert_eq!(out.code, 0, "{case}: {}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("PASSED"), "{case}: {}", out.stdout);
        assert!(
            out.stdout.contains("device: GPU 0 (the whole step"),
            "{case}: {}",
            out.stdout
        );
        assert!(
            out.stdout.contains("GPU: GPU 0 ") && out.stdout.contains("MiB (pool peak"),
            "{case}: {}",
            out.stdout
        );
        // The driver calls of the steady state: kernels launched, and the
        // host waiting at the step's end.
        let calls = out
            .stdout
            .lines()
            .find(|l| l.starts_with("GPU calls: "))
            .unwrap_or_else(|| panic!("{case}: no GPU calls line: {}", out.stdout));
        assert!(
            calls.contains(" launches")
                && calls.contains(" host waits")
                && calls.contains(" per step over the run"),
            "{case}: {calls}"
        );
        assert!(dir.path().join(output).join(format!("{case}.xmf")).exists());
    }
}

#[test]
fn plan_prints_each_graphs_placement_copies_and_streams_without_running() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "exprlib-scalability",
            "--plan",
            "gpu",
            "--set",
            "pdes=3",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Every node of the ExprLib graph is a language node: all on the GPU,
    // and only the host's values (3 solution fields and gamma) go in.
    assert!(out.stdout.contains("graph `exprlib`:"), "{}", out.stdout);
    assert!(
        out.stdout.contains("all on GPU 0: 0 node(s) on the CPU"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("4 copy(ies) per execution"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stdout.matches("CPU -> GPU 0 at the start").count(),
        4,
        "{}",
        out.stdout
    );
    assert!(!dir.path().join("output").exists(), "--plan runs nothing");
    let out = watershed(&[
        "run",
        "exprlib-scalability",
        "--plan",
        "gpu-sync",
        "--set",
        "pdes=3",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("1 stream(s), 0 event(s)"),
        "{}",
        out.stdout
    );
    let out = watershed(&["run", "exprlib-scalability", "--plan", "fpga"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("fpga"), "{}", out.stderr);
}

/// An XDMF check with h5py and the standard XML parser: well-formed, XDMF
/// 3, a temporal collection whose times increase, and every HDF reference
/// naming an existing dataset of the stated shape; topology dimensions are
/// the data's plus one.
const XDMF_CHECK: &str = r#"
import sys, os, h5py
import xml.etree.ElementTree as ET
path = sys.argv[1]
location = sys.argv[2]
root = ET.parse(path).getroot()
assert root.tag == "Xdmf" and root.get("Version") == "3.0", root.attrib
temporal = root.find("Domain/Grid")
assert temporal.get("CollectionType") == "Temporal"
times = []
checked = 0
names = set()
for grid in temporal.findall("Grid"):
    # One uniform grid per dump, the same name at every time.
    assert grid.get("GridType") == "Uniform", grid.attrib
    names.add(grid.get("Name"))
    times.append(float(grid.find("Time").get("Value")))
    topo = [int(v) for v in grid.find("Topology").get("Dimensions").split()]
    for attribute in grid.findall("Attribute"):
        assert attribute.get("Center") == "Cell"
        item = attribute.find("DataItem")
        shape = [int(v) for v in item.get("Dimensions").split()]
        vector = attribute.get("AttributeType") == "Vector"
        assert len(shape) == (4 if vector else 3), (shape, vector)
        # Points: one more than the cells along a resolved axis, one plane
        # along an unresolved one.
        assert [s + 1 if s > 1 else 1 for s in shape[:3]] == topo, (shape, topo)
        file, dataset = item.text.strip().split(":")
        with h5py.File(os.path.join(os.path.dirname(path), file), "r") as f:
            assert list(f[dataset].shape) == shape, (file, dataset, f[dataset].shape, shape)
            assert f[dataset].attrs["location"] == location, (dataset, f[dataset].attrs["location"])
            assert abs(f.attrs["time"] - times[-1]) <= 1e-12 * max(1.0, abs(times[-1]))
        checked += 1
assert len(names) <= 1, names
assert times == sorted(times) and len(set(times)) == len(times), times
print("ok", len(times), checked)
"#;

/// Checks one XDMF document against the HDF5 files it names, whose
/// datasets must all be at `location`.
fn check_xdmf(python: &str, xdmf: &Path, location: &str) -> String {
    let out = Command::new(python)
        .args(["-c", XDMF_CHECK])
        .arg(xdmf)
        .arg(location)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn a_run_writes_hdf5_dumps_an_xdmf_series_plots_a_trace_and_a_dot_graph() {
    let dir = temp();
    let out_dir = dir.path().join("cavity");
    let trace = dir.path().join("trace.json");
    let dot = dir.path().join("graph.dot");
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--set",
            "cells=16",
            "--steps",
            "20",
            "--dump-every",
            "5",
            "--output",
            path(&out_dir),
            "--trace",
            path(&trace),
            "--dot",
            path(&dot),
            "--threads",
            "2",
        ],
    );
    // 20 steps are far from steady: the check fails (exit 3) and says why.
    assert_eq!(out.code, 3, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("NOT steady"), "{}", out.stdout);
    for needle in [
        "ms/step",
        "cell updates/s",
        // The stepping's rate leaves out the first step, which compiles.
        "of which the first step (kernel compilation, placement)",
        "cell updates/s over the 19 steps after the first",
        "memory high-water: CPU",
        "slowest expressions",
        // Which five nodes are slowest depends on the machine's timing
        // (momentum/u was not always among them): any node of the graph.
        "\n  momentum/",
        "check: centreline velocities vs Ghia et al. (1982), Re = 100 — FAILED",
        "lid-driven-cavity.xmf",
        "lid-driven-cavity_xface.xmf, lid-driven-cavity_yface.xmf",
        "threads: 2",
    ] {
        assert!(
            out.stdout.contains(needle),
            "{needle} missing:\n{}",
            out.stdout
        );
    }
    // Progress lines go to stderr when it is not a terminal (quick runs may
    // finish before the first line is due), never to stdout.
    assert!(!out.stdout.contains("ETA"), "{}", out.stdout);
    for step in [0, 5, 10, 15, 20] {
        let file = out_dir.join(format!("lid-driven-cavity_{step:08}.h5"));
        let u: watershed_fields::SpatialField<watershed_fields::XFace> =
            watershed_fields::io::read_field_from_file(&file, "u").unwrap();
        assert_eq!(u.layout().interior_extent(), [17, 16, 1]);
    }
    for png in ["lid-driven-cavity_u.png", "lid-driven-cavity_v.png"] {
        let bytes = std::fs::read(out_dir.join(png)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png}");
    }
    let trace = std::fs::read_to_string(trace).unwrap();
    // Every step executes the momentum graph once per stage (forward
    // Euler: once), and every execution is in the trace.
    assert!(
        trace.matches("\"name\":\"u\"").count() >= 20,
        "{}",
        &trace[..trace.len().min(400)]
    );
    let dot = std::fs::read_to_string(dot).unwrap();
    assert!(dot.contains("digraph watershed") && dot.contains("cluster_legend"));
    if let Some(python) = common::python_with_h5py() {
        // 5 dumps x (p and the derived velocity, speed, vorticity).
        let verdict = check_xdmf(
            &python,
            &out_dir.join("lid-driven-cavity.xmf"),
            "CellCentre",
        );
        assert!(verdict.contains("ok 5 20"), "{verdict}");
        // The staggered u and v on their own meshes.
        for (document, location) in [("xface", "XFace"), ("yface", "YFace")] {
            let path = out_dir.join(format!("lid-driven-cavity_{document}.xmf"));
            let verdict = check_xdmf(&python, &path, location);
            assert!(verdict.contains("ok 5 5"), "{verdict}");
        }
        assert!(!out_dir.join("lid-driven-cavity_zface.xmf").exists());
    }
    let inspect = watershed(&[
        "inspect",
        path(&out_dir.join("lid-driven-cavity_00000010.h5")),
    ]);
    assert_eq!(inspect.code, 0, "{}", inspect.stderr);
    for needle in [
        "@case = lid-driven-cavity",
        "@step = 10",
        "@time = ",
        "dataset /u: shape [1, 16, 17]",
        "@location = XFace",
        "dataset /p: shape [1, 16, 16]",
    ] {
        assert!(
            inspect.stdout.contains(needle),
            "{needle}:\n{}",
            inspect.stdout
        );
    }

    // The same directory again: refused, nothing touched.
    let before = std::fs::read(out_dir.join("lid-driven-cavity_00000020.h5")).unwrap();
    let again = watershed_in(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--set",
            "cells=16",
            "--steps",
            "3",
            "--output",
            path(&out_dir),
            "--quiet",
        ],
    );
    assert_eq!(again.code, 2);
    assert!(
        again
            .stderr
            .contains("already holds the results of a `lid-driven-cavity` run")
            && again.stderr.contains("--overwrite"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read(out_dir.join("lid-driven-cavity_00000020.h5")).unwrap(),
        before
    );
    // With --overwrite the old dumps go and the series is the new run's.
    let over = watershed_in(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--set",
            "cells=16",
            "--steps",
            "3",
            "--output",
            path(&out_dir),
            "--quiet",
            "--overwrite",
        ],
    );
    assert_eq!(over.code, 3, "{}", over.stderr);
    assert!(!out_dir.join("lid-driven-cavity_00000020.h5").exists());
    assert!(out_dir.join("lid-driven-cavity_00000003.h5").exists());
}

#[test]
fn inspect_refuses_what_is_not_hdf5() {
    let dir = temp();
    let file = dir.path().join("notes.h5");
    std::fs::write(&file, "not hdf5").unwrap();
    let out = watershed(&["inspect", path(&file)]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("not a readable HDF5 file"),
        "{}",
        out.stderr
    );
    let out = watershed(&["inspect", "/no/such.h5"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no such file"), "{}", out.stderr);
}

#[test]
fn the_heat_convergence_study_reports_second_order_and_a_plot() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--convergence",
            "--set",
            "cells=12",
            "--output",
            "conv",
        ],
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("observed orders"), "{}", out.stdout);
    let png: PathBuf = dir.path().join("conv/heat_convergence.png");
    assert_eq!(&std::fs::read(png).unwrap()[..4], b"\x89PNG");
}

#[test]
fn bench_writes_a_table_and_charts() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "bench",
            "--pdes",
            "2",
            "--sizes",
            "8",
            "--threads",
            "1,2",
            "--steps",
            "2",
            "--output",
            "b",
        ],
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let table = std::fs::read_to_string(dir.path().join("b/scalability.md")).unwrap();
    // 3 ExprLib variants + 1 Wasatch, 2 thread counts each.
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| exprlib")).count(),
        6,
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| wasatch")).count(),
        2,
        "{table}"
    );
    for png in ["exprlib_speedup.png", "wasatch_speedup.png"] {
        assert_eq!(
            &std::fs::read(dir.path().join("b").join(png)).unwrap()[..4],
            b"\x89PNG"
        );
    }
}

/// The bits of every dataset of every dump in `dir` (sorted by file name).
/// Asserts that `got` (a GPU run's datasets) holds `want`'s bits, and that
/// something was written.
fn assert_same_dumps(case: &str, got: &[(String, Vec<u64>)], want: &[(String, Vec<u64>)]) {
    assert!(!want.is_empty(), "{case}: no dump written");
    assert_eq!(got.len(), want.len(), "{case}: datasets");
    for ((name, g), (_, w)) in got.iter().zip(want) {
        let differing = g.iter().zip(w).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "{case}: {name}: {differing} values differ");
    }
}

fn dumps(dir: &Path) -> Vec<(String, Vec<u64>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "h5"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = hdf5::File::open(&path).unwrap();
        let mut names = file.member_names().unwrap();
        names.sort();
        for name in names {
            let values = file.dataset(&name).unwrap().read_raw::<f64>().unwrap();
            let label = format!("{}:{name}", path.file_name().unwrap().to_string_lossy());
            out.push((label, values.iter().map(|v| v.to_bits()).collect()));
        }
    }
    out
}

/// Every case run with `--device gpu` (its whole step on the GPU; the
/// ExprLib test under the heterogeneous rule) writes dumps with the bits
/// of its CPU run, and the same check line: the flows' pressure solve
/// included. Where no GPU can be used it reports "skipped" (CI runs it on
/// an emulated GPU).
#[test]
fn every_case_on_the_gpu_writes_the_bits_of_its_cpu_run() {
    let Some(_) = watershed_fields::gpu::gpu_for_tests(
        "every_case_on_the_gpu_writes_the_bits_of_its_cpu_run",
    ) else {
        return;
    };
    let dir = temp();
    let cases: [(&str, &[&str]); 7] = [
        ("heat", &["--set", "cells=8", "--steps", "3"]),
        ("advection", &["--steps", "3"]),
        ("lid-driven-cavity", &["--set", "cells=16", "--steps", "4"]),
        ("taylor-green", &["--set", "cells=16", "--steps", "3"]),
        (
            "reacting-species",
            &["--set", "flow=computed", "--steps", "3"],
        ),
        (
            "wasatch-scalability",
            &["--set", "cells=8", "--set", "pdes=3", "--steps", "2"],
        ),
        (
            "exprlib-scalability",
            &["--set", "cells=8", "--set", "pdes=3", "--steps", "2"],
        ),
    ];
    for (case, settings) in cases {
        let mut results = Vec::new();
        for device in ["cpu", "gpu"] {
            let output = format!("{case}-{device}");
            let mut args = vec!["run", case];
            args.extend_from_slice(settings);
            args.extend(["--device", device, "--threads", "1", "--quiet"]);
            args.extend(["--output", output.as_str()]);
            let out = run_watershed(dir.path(), &args, true);
            // A shortened run may fail its check (exit 3), the same way on
            // both devices.
            assert!(
                out.code == 0 || out.code == 3,
                "{case} on the {device}: {}\n{}",
                out.stdout,
                out.stderr
            );
            let check: Vec<String> = out
                .stdout
                .lines()
                .filter(|l| l.starts_with("check:"))
                .map(String::from)
                .collect();
            results.push((out.code, check, dumps(&dir.path().join(&output))));
        }
        let (gpu, cpu) = (results.pop().unwrap(), results.pop().unwrap());
        assert_eq!(gpu.0, cpu.0, "{case}: exit codes");
        assert_eq!(gpu.1, cpu.1, "{case}: check lines");
        assert_same_dumps(case, &gpu.2, &cpu.2);
    }
}

#[test]
fn cuda_graphs_replay_repeating_steps_with_the_cpus_bits_and_are_refused_where_they_cannot() {
    // Without a GPU: the graphs on the CPU cannot be replayed.
    let stderr = refused(&[
        "run",
        "exprlib-scalability",
        "--device",
        "cpu",
        "--cuda-graphs",
    ]);
    assert!(
        stderr.contains("--cuda-graphs: graph `exprlib` cannot replay its steps")
            && stderr.contains("it runs on the CPU"),
        "{stderr}"
    );
    let Some(_) = watershed_fields::gpu::gpu_for_tests(
        "cuda_graphs_replay_repeating_steps_with_the_cpus_bits_and_are_refused_where_they_cannot",
    ) else {
        return;
    };
    let dir = temp();
    // The cavity's pressure solve tests its convergence on the host.
    let out = run_watershed(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--device",
            "gpu",
            "--cuda-graphs",
            "--quiet",
            "--output",
            "cavity",
        ],
        true,
    );
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("cannot replay its steps") && out.stderr.contains("iterative solve"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("cavity").exists());
    // The ExprLib test (two steps alternate as its state fields swap) and
    // two SSP-RK3 cases (their stages repeat every three steps).
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            "exprlib-scalability",
            "exprlib",
            &["--set", "cells=8", "--set", "pdes=3", "--steps", "8"],
        ),
        ("heat", "heat", &["--set", "cells=8", "--steps", "12"]),
        ("advection", "advection", &["--steps", "12"]),
    ];
    for (case, graph, settings) in cases {
        let mut results = Vec::new();
        for (device, extra) in [("cpu", None), ("gpu", Some("--cuda-graphs"))] {
            let output = format!("{case}-{device}");
            let mut args = vec!["run", case, "--device", device, "--threads", "1", "--quiet"];
            args.extend(settings);
            args.extend(extra);
            args.extend(["--output", output.as_str()]);
            let out = run_watershed(dir.path(), &args, true);
            // A shortened run may fail its check (exit 3), the same way on
            // both devices.
            assert!(
                out.code == 0 || out.code == 3,
                "{case} on the {device}: {}\n{}",
                out.stdout,
                out.stderr
            );
            if extra.is_some() {
                let prefix = format!("CUDA graphs of `{graph}`:");
                let line = out
                    .stdout
                    .lines()
                    .find(|l| l.starts_with(&prefix))
                    .unwrap_or_else(|| panic!("{case}: no replay line in {}", out.stdout));
                let replayed: u64 = line
                    .split_whitespace()
                    .nth(4)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{line}"));
                assert!(replayed >= 3, "{case}: {line}");
                assert!(!line.contains("failed"), "{case}: {line}");
            }
            let check: Vec<String> = out
                .stdout
                .lines()
                .filter(|l| l.starts_with("check:"))
                .map(String::from)
                .collect();
            results.push((out.code, check, dumps(&dir.path().join(&output))));
        }
        let (gpu, cpu) = (results.pop().unwrap(), results.pop().unwrap());
        assert_eq!(gpu.0, cpu.0, "{case}: exit codes");
        assert_eq!(gpu.1, cpu.1, "{case}: check lines");
        assert_same_dumps(case, &gpu.2, &cpu.2);
    }
}

#[test]
fn gpu_scratch_in_stream_order_is_reported_and_refused_with_cuda_graphs() {
    // Without a GPU: an allocator that does not exist is a usage error.
    let stderr = refused(&["run", "heat", "--gpu-scratch", "malloc"]);
    assert!(
        stderr.contains("invalid value 'malloc'") && stderr.contains("stream-ordered"),
        "{stderr}"
    );
    let Some(_) = watershed_fields::gpu::gpu_for_tests(
        "gpu_scratch_in_stream_order_is_reported_and_refused_with_cuda_graphs",
    ) else {
        return;
    };
    let dir = temp();
    let out = run_watershed(
        dir.path(),
        &[
            "run",
            "heat",
            "--device",
            "gpu",
            "--gpu-scratch",
            "stream-ordered",
            "--cuda-graphs",
            "--quiet",
            "--output",
            "both",
        ],
        true,
    );
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("--gpu-scratch stream-ordered: graph `heat`")
            && out.stderr.contains("StepReplay::CudaGraph"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("both").exists());
    // The advection case on the GPU (every node checks that what it
    // writes is finite) with its check words allocated in stream order
    // gives the CPU's bits, and says how many allocations it made: the
    // same number in each of its 3 steps.
    let mut results = Vec::new();
    for (device, scratch) in [("cpu", "pool"), ("gpu", "stream-ordered")] {
        let output = format!("advection-{device}");
        let out = run_watershed(
            dir.path(),
            &[
                "run",
                "advection",
                "--device",
                device,
                "--gpu-scratch",
                scratch,
                "--threads",
                "1",
                "--quiet",
                "--steps",
                "3",
                "--output",
                &output,
            ],
            true,
        );
        assert!(
            out.code == 0 || out.code == 3,
            "{}\n{}",
            out.stdout,
            out.stderr
        );
        let reported = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("GPU scratch in stream order: "));
        assert_eq!(
            reported.is_some(),
            scratch == "stream-ordered",
            "{}",
            out.stdout
        );
        if let Some(line) = reported {
            let allocations: u64 = line
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            assert!(allocations > 0 && allocations.is_multiple_of(3), "{line}");
        }
        results.push(dumps(&dir.path().join(&output)));
    }
    assert_same_dumps("advection", &results[1], &results[0]);
}

/// `--trace` of a run on the GPU shows the GPU side too: each GPU node's
/// kernels on a track per stream under a "GPU 0" process, next to the
/// host threads that enqueued them.
#[test]
fn a_trace_of_a_gpu_run_puts_its_kernels_on_stream_tracks() {
    let Some(_) = watershed_fields::gpu::gpu_for_tests(
        "a_trace_of_a_gpu_run_puts_its_kernels_on_stream_tracks",
    ) else {
        return;
    };
    let dir = temp();
    let trace = dir.path().join("trace.json");
    let out = run_watershed(
        dir.path(),
        &[
            "run",
            "heat",
            "--device",
            "gpu",
            "--steps",
            "3",
            "--quiet",
            "--trace",
            path(&trace),
        ],
        true,
    );
    assert!(
        out.code == 0 || out.code == 3,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let json = std::fs::read_to_string(&trace).unwrap();
    assert!(json.contains("\"args\":{\"name\":\"GPU 0\"}"), "{json}");
    assert!(
        json.contains("\"args\":{\"name\":\"heat: stream 0\"}"),
        "{json}"
    );
    // The heat step's nodes: each one enqueued by the host ("gpu") and run
    // on a stream ("gpu kernels"), once per step at least.
    let host = json.matches("\"cat\":\"gpu\",").count();
    let kernels = json.matches("\"cat\":\"gpu kernels\"").count();
    assert!(
        kernels >= 3 && kernels == host,
        "{kernels} kernel spans, {host} host spans: {json}"
    );
}

/// Truncates every cached shared object under `cache` to half its length;
/// returns how many there were.
fn truncate_objects(cache: &Path) -> usize {
    let mut count = 0;
    let mut stack = vec![cache.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "so") {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
                count += 1;
            }
        }
    }
    count
}

/// A truncated object in a kernel cache (the C back end's, the emulated
/// GPU's) is rebuilt, not loaded: loading it used to kill the next run
/// with SIGBUS and no message.
#[test]
fn a_truncated_kernel_in_the_cache_is_rebuilt_not_loaded() {
    let dir = temp();
    let cache = dir.path().join("cache");
    let run = |output: &str, gpu: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_watershed"));
        command
            .args([
                "run", "heat", "--set", "cells=8", "--steps", "2", "--output", output,
            ])
            .current_dir(dir.path())
            .env_remove("WATERSHED_KERNEL_CACHE")
            .env("XDG_CACHE_HOME", &cache)
            .env("RUST_LOG", "warn");
        if gpu {
            command
                .args(["--device", "gpu"])
                .env_remove("WATERSHED_DISABLE_CUDA")
                .env("WATERSHED_EMULATE_GPUS", "1");
        } else {
            command.env("WATERSHED_DISABLE_CUDA", "1");
        }
        command.output().unwrap()
    };
    // Two steps do not reach the heat check's accuracy (exit status 3):
    // what matters is that the run ends by itself, not by a signal.
    let ended = |o: &std::process::Output| matches!(o.status.code(), Some(0 | 3));
    for gpu in [false, true] {
        let first = run(if gpu { "g1" } else { "c1" }, gpu);
        assert!(ended(&first), "{first:?}");
        let truncated = truncate_objects(&cache);
        assert!(truncated > 0, "the first run cached no kernel");
        let second = run(if gpu { "g2" } else { "c2" }, gpu);
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(ended(&second), "gpu {gpu}: {:?} {stderr}", second.status);
        assert!(stderr.contains("is not whole"), "gpu {gpu}: {stderr}");
        // The rebuilt objects are whole again: a third run loads them
        // without a note.
        let third = run(if gpu { "g3" } else { "c3" }, gpu);
        let stderr = String::from_utf8_lossy(&third.stderr);
        assert!(ended(&third), "gpu {gpu}: {:?} {stderr}", third.status);
        assert!(!stderr.contains("is not whole"), "gpu {gpu}: {stderr}");
    }
}

/// `--overwrite` replaces the whole earlier run, its checkpoints too (they
/// used to stay, and the newest-two rule then deleted the new run's own,
/// so the summary named a checkpoint that no longer existed), and says so.
#[test]
fn overwrite_removes_the_earlier_runs_checkpoints() {
    let dir = temp();
    let args = |steps: &'static str| {
        vec![
            "run",
            "heat",
            "--set",
            "cells=8",
            "--steps",
            steps,
            "--checkpoint-every",
            "1",
            "--output",
            "out",
        ]
    };
    let first = watershed_in(dir.path(), &args("4"));
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    assert!(dir.path().join("out/checkpoint_00000004.h5").exists());
    let mut again = args("1");
    again.push("--overwrite");
    let second = watershed_in(dir.path(), &again);
    assert!(matches!(second.code, 0 | 3), "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains("--overwrite: removed the earlier run's 2 dump(s) and 2 checkpoint(s)"),
        "{}",
        second.stderr
    );
    let names: Vec<String> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint_"))
        .collect();
    assert_eq!(names, ["checkpoint_00000001.h5"], "{names:?}");
    assert!(
        second.stdout.contains("checkpoint_00000001.h5"),
        "{}",
        second.stdout
    );
}

/// A 3D Taylor-Green run into `dir/out` that would go on for hours (the
/// tests stop it); its stdout and stderr are piped with `capture`, else
/// dropped.
fn long_run(dir: &Path, capture: bool) -> std::process::Child {
    let output = || {
        if capture {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        }
    };
    Command::new(env!("CARGO_BIN_EXE_watershed"))
        .args([
            "run",
            "taylor-green",
            "--set",
            "dimensions=3",
            "--set",
            "cells=16",
            "--set",
            "end_time=100000",
            "--output",
            "out",
            "--quiet",
        ])
        .current_dir(dir)
        .env("WATERSHED_DISABLE_CUDA", "1")
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap()
}

/// Two runs into one output folder: the second is refused while the first
/// holds the folder, naming it; when the first is killed, its lock is
/// stale and a third run takes the folder over (and frees it at its end).
#[test]
fn a_second_run_into_a_busy_output_folder_is_refused() {
    let dir = temp();
    let mut first = long_run(dir.path(), false);
    let lock = dir.path().join("out/.watershed.lock");
    let started = std::time::Instant::now();
    while !lock.exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the first run never took the folder"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = watershed_in(
        dir.path(),
        &["run", "taylor-green", "--output", "out", "--overwrite"],
    );
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first run ended before the second was refused"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    assert_ne!(second.code, 0, "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains("is being written by another run (`taylor-green`, pid"),
        "{}",
        second.stderr
    );
    // Killed: its lock is stale, and the next run takes the folder over.
    assert!(lock.exists());
    let mut third = Command::new(env!("CARGO_BIN_EXE_watershed"));
    third
        .args([
            "run",
            "taylor-green",
            "--set",
            "cells=8",
            "--steps",
            "2",
            "--output",
            "out",
            "--overwrite",
        ])
        .current_dir(dir.path())
        .env("WATERSHED_DISABLE_CUDA", "1")
        .env("RUST_LOG", "warn");
    let third = third.output().unwrap();
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(matches!(third.status.code(), Some(0 | 3)), "{stderr}");
    assert!(stderr.contains("taking the folder over"), "{stderr}");
    assert!(!lock.exists(), "the lock outlived its run");
}

/// SIGINT and SIGTERM end a run after its step: a checkpoint of the state
/// reached, the message says where it stopped and how to continue, the
/// exit status is 130 / 143, and the run continues from the checkpoint.
#[test]
fn a_signal_ends_the_run_with_a_checkpoint_to_continue_from() {
    for (signal, status) in [("INT", 130), ("TERM", 143)] {
        let dir = temp();
        let child = long_run(dir.path(), true);
        // Wait until a few steps are on disk (the energy series).
        let csv = dir.path().join("out/taylor-green_energy.csv");
        let started = std::time::Instant::now();
        while std::fs::read_to_string(&csv).map_or(0, |t| t.lines().count()) < 4 {
            assert!(started.elapsed() < std::time::Duration::from_secs(120));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let sent = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(status), "{signal}: {stdout}");
        assert!(
            stdout.contains(&format!("interrupted by SIG{signal} after step")),
            "{stdout}"
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with("interrupted"))
            .unwrap();
        let checkpoint = line
            .split("Checkpoint: ")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .unwrap()
            .to_string();
        assert!(dir.path().join(&checkpoint).exists(), "{checkpoint}");
        assert!(!dir.path().join("out/.watershed.lock").exists());
        // Continue from it for two more steps.
        let step: u64 = line
            .split("after step ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let again = watershed_in(
            dir.path(),
            &[
                "run",
                "taylor-green",
                "--set",
                "dimensions=3",
                "--set",
                "cells=16",
                "--set",
                "end_time=100000",
                "--output",
                "out",
                "--restart",
                &checkpoint,
                "--steps",
                &(step + 2).to_string(),
            ],
        );
        assert!(matches!(again.code, 0 | 3), "{}", again.stderr);
        assert!(
            again.stdout.contains(&format!("reached step {}", step + 2)),
            "{}",
            again.stdout
        );
    }
}

/// The dumps (`heat_<step>.h5`) in `dir`, by step.
fn dump_steps(dir: &Path) -> Vec<u64> {
    let mut steps: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("heat_")?
                .strip_suffix(".h5")?
                .parse()
                .ok()
        })
        .collect();
    steps.sort();
    steps
}

/// A restart keeps the run's dump and checkpoint schedule (stored in the
/// checkpoint) when it is not given again, so the dumps after the restart
/// step are written again, and deletes no dump; a stop the checkpoint has
/// passed is refused;
/// a restart into another run's folder is refused without --overwrite and
/// leaves that run whole.
#[test]
fn restarts_keep_the_schedule_and_never_touch_another_runs_folder() {
    let dir = temp();
    let first = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--set",
            "cells=8",
            "--steps",
            "6",
            "--dump-every",
            "2",
            "--checkpoint-every",
            "3",
            "--output",
            "a",
        ],
    );
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    assert_eq!(dump_steps(&dir.path().join("a")), [0, 2, 4, 6]);
    let checkpoint = "a/checkpoint_00000003.h5";
    // Steps count from the start: 3 is where the checkpoint already is.
    let early = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "a",
            "--restart",
            checkpoint,
            "--steps",
            "3",
        ],
    );
    assert_eq!(early.code, 2, "{}", early.stderr);
    assert!(
        early
            .stderr
            .contains("--steps 3: the checkpoint is at step 3"),
        "{}",
        early.stderr
    );
    // Without --dump-every the restart keeps the schedule.
    let again = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "a",
            "--restart",
            checkpoint,
            "--steps",
            "6",
        ],
    );
    assert!(matches!(again.code, 0 | 3), "{}", again.stderr);
    // Dumps at 4 and 6 again, and one at the restart's start (step 3).
    assert_eq!(dump_steps(&dir.path().join("a")), [0, 2, 3, 4, 6]);
    let xdmf = std::fs::read_to_string(dir.path().join("a/heat.xmf")).unwrap();
    assert!(xdmf.contains("heat_00000006.h5"), "{xdmf}");
    // A restart that stops earlier deletes no dump it does not rewrite:
    // step 6 stays, in the series after step 4.
    let six = std::fs::read(dir.path().join("a/heat_00000006.h5")).unwrap();
    let shorter = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "a",
            "--restart",
            checkpoint,
            "--steps",
            "4",
        ],
    );
    assert!(matches!(shorter.code, 0 | 3), "{}", shorter.stderr);
    assert_eq!(dump_steps(&dir.path().join("a")), [0, 2, 3, 4, 6]);
    assert_eq!(
        std::fs::read(dir.path().join("a/heat_00000006.h5")).unwrap(),
        six
    );
    let xdmf = std::fs::read_to_string(dir.path().join("a/heat.xmf")).unwrap();
    let (four, six_at) = (
        xdmf.find("heat_00000004.h5").unwrap(),
        xdmf.find("heat_00000006.h5").unwrap(),
    );
    assert!(four < six_at, "{xdmf}");
    // Another run's folder: refused, and that run keeps every dump.
    let other = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--set",
            "cells=8",
            "--steps",
            "6",
            "--dump-every",
            "1",
            "--output",
            "b",
        ],
    );
    assert!(matches!(other.code, 0 | 3), "{}", other.stderr);
    let into_other = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "b",
            "--restart",
            checkpoint,
            "--steps",
            "6",
        ],
    );
    assert_eq!(into_other.code, 2, "{}", into_other.stderr);
    assert!(
        into_other.stderr.contains("holds another run's results"),
        "{}",
        into_other.stderr
    );
    assert_eq!(dump_steps(&dir.path().join("b")), [0, 1, 2, 3, 4, 5, 6]);
    // With --overwrite the folder is replaced whole by the continued run.
    let replaced = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "b",
            "--restart",
            checkpoint,
            "--steps",
            "6",
            "--overwrite",
        ],
    );
    assert!(matches!(replaced.code, 0 | 3), "{}", replaced.stderr);
    assert_eq!(dump_steps(&dir.path().join("b")), [3, 4, 6]);
}

/// A subnormal `--dump-interval` is refused by name (it used to skip every
/// dump: the dump times overflowed); nothing is written.
#[test]
fn a_dump_interval_too_small_to_count_is_refused() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--set",
            "cells=8",
            "--dump-interval",
            "1e-310",
            "--output",
            "o",
        ],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--dump-interval 1e-310 is too small"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("o").exists());
}

/// A checkpoint whose step is stored as a signed -1 is refused, naming the
/// attribute (HDF5 used to clip it to step 0 and the run restarted there).
#[test]
fn a_checkpoint_step_of_another_type_is_refused() {
    let dir = temp();
    let first = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--set",
            "cells=8",
            "--steps",
            "2",
            "--checkpoint-every",
            "2",
            "--output",
            "o",
        ],
    );
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    let checkpoint = dir.path().join("o/checkpoint_00000002.h5");
    {
        // Without HDF5's file lock: another test of this binary may start
        // a child process meanwhile, which inherits the open file (HDF5
        // does not open it close-on-exec) and with it an exclusive lock
        // that outlives this block, so the restart below could not open
        // the file ("unable to lock file").
        let mut options = hdf5::File::with_options();
        options.with_fapl(|fapl| fapl.file_locking(false));
        let file = options.open_rw(&checkpoint).unwrap();
        file.delete_attr("step").unwrap();
        file.new_attr::<i64>()
            .create("step")
            .unwrap()
            .write_scalar(&-1i64)
            .unwrap();
    }
    let restart = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--output",
            "o",
            "--restart",
            "o/checkpoint_00000002.h5",
            "--steps",
            "4",
        ],
    );
    assert_eq!(restart.code, 2, "{}", restart.stderr);
    assert!(
        restart
            .stderr
            .contains("attribute `step` is stored as Integer"),
        "{}",
        restart.stderr
    );
}

/// Every dataset of `file` as bits, by name.
fn dataset_bits(file: &Path) -> Vec<(String, Vec<u64>)> {
    let file = hdf5::File::open(file).unwrap();
    let mut names = file.member_names().unwrap();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let values = file.dataset(&name).unwrap().read_raw::<f64>().unwrap();
            (name, values.iter().map(|v| v.to_bits()).collect())
        })
        .collect()
}

#[test]
fn the_interpreter_and_the_compiled_c_give_the_same_bits_in_every_flow_and_transport_case() {
    let dir = temp();
    for (case, sets, steps) in [
        ("heat", vec!["cells=12"], 6),
        ("advection", vec!["cells=16"], 6),
        ("lid-driven-cavity", vec!["cells=16"], 6),
        ("taylor-green", vec!["cells=8", "dimensions=3"], 3),
    ] {
        let mut dumps = Vec::new();
        for backend in ["interpreter", "c"] {
            let output = dir.path().join(format!("{case}-{backend}"));
            let mut command = Command::new(env!("CARGO_BIN_EXE_watershed"));
            command
                .args(["run", case, "--quiet", "--threads", "2", "--output"])
                .arg(&output)
                .args(["--steps", &steps.to_string()])
                .env("WATERSHED_DISABLE_CUDA", "1")
                .env("WATERSHED_BACKEND", backend);
            for set in &sets {
                command.args(["--set", set]);
            }
            let out = command.output().unwrap();
            assert!(
                matches!(out.status.code(), Some(0 | 3)),
                "{case} on {backend}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            dumps.push(dataset_bits(&output.join(format!("{case}_{steps:08}.h5"))));
        }
        assert!(!dumps[0].is_empty());
        for ((name, interpreted), (_, compiled)) in dumps[0].iter().zip(&dumps[1]) {
            let differ = interpreted
                .iter()
                .zip(compiled)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(differ, 0, "{case}: {differ} values of {name} differ");
        }
    }
}

/// Like [`refused`], with extra environment variables.
fn refused_with_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = temp();
    let output = dir.path().join("out");
    let mut command = Command::new(env!("CARGO_BIN_EXE_watershed"));
    command
        .args(args)
        .args(["--output", path(&output), "--quiet"])
        .current_dir(dir.path())
        .env("WATERSHED_DISABLE_CUDA", "1");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        !output.exists(),
        "a refused run created its output directory"
    );
    stderr
}

#[test]
fn settings_a_run_cannot_honour_are_refused_up_front_by_name() {
    let e = refused(&["run", "heat", "--threads", "100000"]);
    assert!(
        e.contains("--threads 100000 is more threads than this machine's")
            && e.contains("give at most"),
        "{e}"
    );
    let e = refused_with_env(&["run", "heat"], &[("WATERSHED_THREADS", "100000")]);
    assert!(e.contains("WATERSHED_THREADS 100000"), "{e}");
    let e = refused_with_env(&["run", "heat"], &[("WATERSHED_BACKEND", "fortran")]);
    assert!(
        e.contains("WATERSHED_BACKEND = `fortran` is not a back end")
            && e.contains("`interpreter` or `c`"),
        "{e}"
    );
    // A forced back end that cannot be honoured is an error, not the
    // interpreter in disguise.
    let e = refused_with_env(
        &["run", "heat"],
        &[("WATERSHED_BACKEND", "c"), ("CC", "/no/such/compiler")],
    );
    assert!(
        e.contains("WATERSHED_BACKEND=c asks for compiled kernels")
            && e.contains("/no/such/compiler"),
        "{e}"
    );
    let e = refused_with_env(&["run", "heat"], &[("WATERSHED_KERNEL_CACHE_MB", "lots")]);
    assert!(e.contains("WATERSHED_KERNEL_CACHE_MB = `lots`"), "{e}");
    let e = refused_with_env(&["run", "heat"], &[("WATERSHED_CFLAGS", "-O2 -ffast-math")]);
    assert!(e.contains("WATERSHED_CFLAGS contains `-ffast-math`"), "{e}");
    // Files written at the end are checked before the run.
    let e = refused(&["run", "heat", "--dot", "/no/such/folder/graph.dot"]);
    assert!(
        e.contains("/no/such/folder/graph.dot")
            && e.contains("does not exist")
            && e.contains("--dot"),
        "{e}"
    );
    let e = refused(&["run", "heat", "--trace", "/tmp"]);
    assert!(e.contains("is a directory") && e.contains("--trace"), "{e}");
    // A negative time reaches the program's own check, not clap's.
    let e = refused(&["run", "heat", "--end-time", "-1"]);
    assert!(e.contains("--end-time -1 must be finite"), "{e}");
}

#[test]
fn bench_settings_are_checked_and_its_memory_estimated_before_it_starts() {
    for (args, needle) in [
        (vec!["--pdes", "0"], "--pdes 0"),
        (vec!["--sizes", "0"], "--sizes 0"),
        (vec!["--threads", "0"], "--threads must be at least 1"),
        (vec!["--steps", "0"], "--steps 0"),
        (
            vec!["--pdes", "100000000", "--sizes", "64"],
            "--pdes 100000000 with --sizes 64 needs about",
        ),
    ] {
        let dir = temp();
        let output = dir.path().join("bench");
        let mut all = vec!["bench", "--output", path(&output)];
        all.extend(args.iter().copied());
        let out = watershed_in(dir.path(), &all);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(!output.exists(), "{args:?}: the output folder was created");
    }
}

#[test]
fn temporary_files_of_killed_writers_are_swept_at_the_start_with_a_note() {
    let dir = temp();
    let output = dir.path().join("out");
    std::fs::create_dir(&output).unwrap();
    let stale = output.join(".heat_00000004.h5.4194305-0.tmp");
    std::fs::write(&stale, vec![0u8; 3 << 20]).unwrap();
    let other = output.join("notes.txt");
    std::fs::write(&other, "mine").unwrap();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "heat",
            "--set",
            "cells=8",
            "--steps",
            "2",
            "--quiet",
            "--output",
            path(&output),
        ],
    );
    assert!(matches!(out.code, 0 | 3), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("removed 1 stale temporary file(s) (3.0 MiB) that killed writers left in"),
        "{}",
        out.stderr
    );
    assert!(!stale.exists());
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "mine");
}

#[test]
fn a_huge_configuration_value_is_not_echoed_whole() {
    // One argument may hold at most 128 KiB (Linux MAX_ARG_STRLEN).
    let huge = format!("\"{}\"", "x".repeat(100_000));
    let e = refused(&["run", "advection", "--set", &format!("scheme={huge}")]);
    assert!(
        e.contains("scheme = \"") && e.contains("characters)"),
        "{}",
        &e[..e.len().min(600)]
    );
    assert!(e.len() < 2_000, "{} bytes of message", e.len());
    let dir = temp();
    let file = dir.path().join("big.toml");
    std::fs::write(&file, format!("cells = {}\n", "9".repeat(1_000_000))).unwrap();
    let e = refused(&["run", "advection", "--config", path(&file)]);
    assert!(
        e.contains("big.toml") && e.len() < 4_000,
        "{} bytes: {}",
        e.len(),
        &e[..e.len().min(600)]
    );
}

/// `--trace` of a decomposed run shows its seam exchanges and reductions
/// on their own track beside the patches' graphs.
#[test]
fn the_trace_of_a_decomposed_run_shows_its_exchanges() {
    let dir = temp();
    let trace = dir.path().join("trace.json");
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "advection",
            "--set",
            "cells=16",
            "--set",
            "patches=2,1,1",
            "--steps",
            "4",
            "--quiet",
            "--output",
            path(&dir.path().join("out")),
            "--trace",
            path(&trace),
        ],
    );
    assert!(
        out.code == 0 || out.code == 3,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout
            .contains("exchanges and reductions across patches:"),
        "{}",
        out.stdout
    );
    let trace = std::fs::read_to_string(trace).unwrap();
    // SSP-RK3: three seam exchanges a step, one reduction (the time step).
    assert!(
        trace.contains("exchanges across patches"),
        "{}",
        &trace[..trace.len().min(400)]
    );
    assert!(
        trace.matches("\"name\":\"seams\"").count() >= 12,
        "{}",
        &trace[..trace.len().min(400)]
    );
    assert!(trace.matches("\"name\":\"reduction\"").count() >= 4);
    assert!(trace.contains("advection patch 1"));
}

/// A flow's summary reports its Poisson solves: one per projection, at
/// least one CG iteration each, and a final relative residual within the
/// solve's tolerance (1e-10, `default_poisson_options`).
#[test]
fn a_flows_summary_reports_its_poisson_solves_within_their_tolerance() {
    let dir = temp();
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--set",
            "cells=16",
            "--steps",
            "4",
            "--quiet",
            "--output",
            path(&dir.path().join("out")),
        ],
    );
    assert!(
        out.code == 0 || out.code == 3,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("Poisson solves: "))
        .unwrap_or_else(|| panic!("no Poisson solves line:\n{}", out.stdout));
    let number = |after: &str, until: &str| -> f64 {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest[..rest.find(until).unwrap_or(rest.len())]
            .trim()
            .parse()
            .unwrap()
    };
    let solves = number("Poisson solves: ", " in the stepping");
    let mean = number("stepping, ", " CG iterations");
    let most = number("(at most ", ")");
    let residual = number("residual at most ", "\n");
    assert!(solves >= 4.0, "{line}");
    assert!(mean >= 1.0 && most >= mean, "{line}");
    assert!(residual > 0.0 && residual <= 1e-10, "{line}");
}

/// `--trace` of a decomposed flow shows what runs outside its graphs: the
/// exchange of the state's seams every stage and the gather of the
/// velocity and `psi` once a step on the exchange track, each stage's
/// Poisson solve on a track of its own.
#[test]
fn the_trace_of_a_decomposed_flow_shows_its_solves_and_exchanges() {
    let dir = temp();
    let trace = dir.path().join("trace.json");
    let out = watershed_in(
        dir.path(),
        &[
            "run",
            "lid-driven-cavity",
            "--set",
            "cells=16",
            "--set",
            "patches=2,2,1",
            "--steps",
            "3",
            "--quiet",
            "--output",
            path(&dir.path().join("out")),
            "--trace",
            path(&trace),
        ],
    );
    assert!(
        out.code == 0 || out.code == 3,
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let trace = std::fs::read_to_string(trace).unwrap();
    let head = &trace[..trace.len().min(600)];
    assert!(
        trace.contains("\"name\":\"Poisson solve on patches\""),
        "{head}"
    );
    assert!(
        trace.contains("\"name\":\"exchanges across patches\""),
        "{head}"
    );
    // The cavity's integrator has one projection per stage: at least one
    // solve and one state exchange per step, the step's reductions on the
    // patches once a step and after the initial projection, and the
    // gather of the whole velocity and psi only for what reads them (the
    // last dump, onto rank 0 alone; the energy each step adds the
    // patches' sums).
    let solves = trace
        .matches("\"name\":\"div(u*), the solve and its exchanges\"")
        .count();
    let seams = trace.matches("\"name\":\"seams of the velocity\"").count();
    let reductions = trace
        .matches("\"name\":\"the step's reductions on the patches\"")
        .count();
    let gathers = trace
        .matches("\"name\":\"gather of the velocity and psi\"")
        .count();
    let onto_rank_0 = trace
        .matches("\"name\":\"gather of the velocity and psi onto rank 0\"")
        .count();
    assert!(
        solves >= 3 && seams == solves,
        "{solves} solves, {seams} state exchanges"
    );
    assert!(
        reductions == 4 && reductions <= solves + 1,
        "{reductions} step reductions, {solves} solves"
    );
    assert_eq!(
        (gathers, onto_rank_0),
        (0, 1),
        "gathers of the whole velocity onto every rank, onto rank 0"
    );
    assert!(trace.contains("correction patch 3"), "{head}");
}

/// The 16-cell cavity on 2 x 2 patches run quietly in `dir` with `extra`.
fn cavity_on_patches(dir: &Path, extra: &[&str]) -> Outcome {
    let mut args = vec![
        "run",
        "lid-driven-cavity",
        "--set",
        "cells=16",
        "--set",
        "patches=2,2,1",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    watershed_in(dir, &args)
}

/// [`cavity_on_patches`] restarted with [`restart_at_step_2`].
fn cavity_restart_at_step_2(dir: &Path, extra: &[&str]) -> Outcome {
    cavity_on_patches(dir, &restart_at_step_2(extra))
}

/// The arguments restarting from `o/checkpoint_00000002.h5` to step 4
/// (dumped there) in `o`, then `extra`.
fn restart_at_step_2<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--restart",
        "o/checkpoint_00000002.h5",
        "--steps",
        "4",
        "--output",
        "o",
        "--dump-every",
        "4",
    ];
    args.extend_from_slice(extra);
    args
}

/// A decomposed flow's checkpoint in one file restarts with each rank
/// reading only its own patches' windows (the pressure formed from `psi`
/// with the scale the checkpoint keeps) to the bits of a straight run,
/// and another space order (other ghost layers) is refused naming the
/// file, the field and both layouts, before anything is read.
#[test]
fn a_flows_checkpoint_in_one_file_restarts_its_patches_bitwise_and_refuses_another_order() {
    let dir = temp();
    let straight = cavity_on_patches(
        dir.path(),
        &["--steps", "4", "--dump-every", "4", "--output", "straight"],
    );
    assert!(matches!(straight.code, 0 | 3), "{}", straight.stderr);
    let first = cavity_on_patches(
        dir.path(),
        &["--steps", "2", "--checkpoint-every", "2", "--output", "o"],
    );
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    let restart = |extra: &[&str]| cavity_restart_at_step_2(dir.path(), extra);
    let other_order = restart(&["--set", "space_order=4"]);
    assert_eq!(other_order.code, 2, "{}", other_order.stderr);
    assert!(
        other_order.stderr.contains("checkpoint_00000002.h5")
            && other_order
                .stderr
                .contains("field u was saved on a [16, 16, 1]-cell grid")
            && other_order.stderr.contains("minus: [3, 3, 0]"),
        "{}",
        other_order.stderr
    );
    let resumed = restart(&[]);
    assert!(matches!(resumed.code, 0 | 3), "{}", resumed.stderr);
    assert_eq!(
        dataset_bits(&dir.path().join("o/lid-driven-cavity_00000004.h5")),
        dataset_bits(&dir.path().join("straight/lid-driven-cavity_00000004.h5"))
    );
}

/// A checkpoint written per rank (--per-rank-files) restarts, in a run
/// that writes whole dumps, to the bits of a straight run; without one of
/// its rank files, or on another patch layout, it is refused naming the
/// file and both layouts.
#[test]
fn a_checkpoint_per_rank_restarts_bitwise_and_refuses_a_missing_file_or_another_layout() {
    let dir = temp();
    let heat = [
        "run",
        "heat",
        "--set",
        "cells=8",
        "--set",
        "patches=2,2,1",
        "--quiet",
    ];
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = heat.to_vec();
        args.extend_from_slice(extra);
        watershed_in(dir.path(), &args)
    };
    let straight = run(&["--steps", "4", "--dump-every", "4", "--output", "straight"]);
    assert!(matches!(straight.code, 0 | 3), "{}", straight.stderr);
    let first = run(&[
        "--steps",
        "2",
        "--checkpoint-every",
        "2",
        "--per-rank-files",
        "--output",
        "o",
    ]);
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    let rank_file = dir.path().join("o/checkpoint_00000002.rank00000.h5");
    assert!(rank_file.exists());
    let restart = |extra: &[&str]| run(&restart_at_step_2(extra));
    let other_layout = restart(&["--set", "patches=2,1,1"]);
    assert_eq!(other_layout.code, 2, "{}", other_layout.stderr);
    assert!(
        other_layout.stderr.contains("checkpoint_00000002.h5")
            && other_layout
                .stderr
                .contains("written per rank on 4 patches, this run has 2"),
        "{}",
        other_layout.stderr
    );
    std::fs::rename(&rank_file, dir.path().join("aside.h5")).unwrap();
    let missing = restart(&[]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("checkpoint_00000002.rank00000.h5")
            && missing
                .stderr
                .contains("rank 0's file of the checkpoint at step 2 holds patch 0"),
        "{}",
        missing.stderr
    );
    std::fs::rename(dir.path().join("aside.h5"), &rank_file).unwrap();
    let resumed = restart(&[]);
    assert!(matches!(resumed.code, 0 | 3), "{}", resumed.stderr);
    assert_eq!(
        dataset_bits(&dir.path().join("o/heat_00000004.h5")),
        dataset_bits(&dir.path().join("straight/heat_00000004.h5"))
    );
}

/// A flow's checkpoint written per rank restarts to the bits of a
/// straight run (every patch read back into the whole fields, ghosts
/// included); on another patch layout, or with another space order (other
/// ghost layers), it is refused naming the file, the field and both.
#[test]
fn a_flows_checkpoint_per_rank_restarts_bitwise_and_refuses_another_layout_or_order() {
    let dir = temp();
    let straight = cavity_on_patches(
        dir.path(),
        &["--steps", "4", "--dump-every", "4", "--output", "straight"],
    );
    assert!(matches!(straight.code, 0 | 3), "{}", straight.stderr);
    let first = cavity_on_patches(
        dir.path(),
        &[
            "--steps",
            "2",
            "--checkpoint-every",
            "2",
            "--per-rank-files",
            "--output",
            "o",
        ],
    );
    assert!(matches!(first.code, 0 | 3), "{}", first.stderr);
    let restart = |extra: &[&str]| cavity_restart_at_step_2(dir.path(), extra);
    let other_layout = restart(&["--set", "patches=2,1,1"]);
    assert_eq!(other_layout.code, 2, "{}", other_layout.stderr);
    assert!(
        other_layout.stderr.contains("checkpoint_00000002.h5")
            && other_layout
                .stderr
                .contains("written per rank on 4 patches, this run has 2"),
        "{}",
        other_layout.stderr
    );
    let other_order = restart(&["--set", "space_order=4"]);
    assert_eq!(other_order.code, 2, "{}", other_order.stderr);
    assert!(
        other_order
            .stderr
            .contains("checkpoint_00000002.rank00000.h5")
            && other_order
                .stderr
                .contains("field u of /patch_00000 was saved on a [16, 16, 1]-cell grid")
            && other_order.stderr.contains("minus: [3, 3, 0]"),
        "{}",
        other_order.stderr
    );
    let resumed = restart(&[]);
    assert!(matches!(resumed.code, 0 | 3), "{}", resumed.stderr);
    assert_eq!(
        dataset_bits(&dir.path().join("o/lid-driven-cavity_00000004.h5")),
        dataset_bits(&dir.path().join("straight/lid-driven-cavity_00000004.h5"))
    );
}
