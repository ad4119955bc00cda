//! The `watershed` program's command line.

use std::process::Command;

fn watershed(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_watershed"))
        .args(args)
        .env("WATERSHED_DISABLE_CUDA", "1")
        .output()
        .expect("the watershed binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn version_names_the_package_version_and_the_devices() {
    let (ok, stdout, _) = watershed(&["--version"]);
    assert!(ok);
    assert!(
        stdout.starts_with(&format!("watershed {}", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    assert!(
        stdout.contains("no CUDA device (GPUs are disabled by WATERSHED_DISABLE_CUDA)"),
        "{stdout}"
    );
}

#[test]
fn list_reports_the_registered_cases() {
    let (ok, stdout, _) = watershed(&["list"]);
    assert!(ok);
    let cases = watershed_cases::registered_cases();
    if cases.is_empty() {
        assert!(stdout.contains("No cases are registered"), "{stdout}");
    }
    for case in cases {
        assert!(stdout.contains(case.name), "{stdout}");
    }
}

#[test]
fn an_unknown_command_fails_with_usage() {
    let (ok, _, stderr) = watershed(&["frobnicate"]);
    assert!(!ok);
    assert!(stderr.contains("Usage"), "{stderr}");
}

/// Output into a pipe whose reader is gone (`watershed list | head -0`) is
/// not a panic: the program ends quietly and successfully.
#[test]
fn a_closed_output_pipe_is_not_a_panic() {
    for args in [["list"], ["info"]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader); // every write now fails with EPIPE
        let output = Command::new(env!("CARGO_BIN_EXE_watershed"))
            .args(args)
            .env("WATERSHED_DISABLE_CUDA", "1")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("the watershed binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            output.status.success(),
            "{args:?}: {:?} {stderr}",
            output.status
        );
    }
}
