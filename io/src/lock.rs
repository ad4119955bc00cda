//! The output folder belongs to one run at a time: a lock file
//! (`.watershed.lock`, holding the pid, the host and the case) created
//! exclusively when the run opens its folder and removed when it is done.
//! A second run into the folder while the lock is held is refused, naming
//! the holder, so two runs never mix their dumps. A lock left by a run
//! that no longer exists on this host (killed) is taken over, and the
//! takeover is logged.

use crate::error::{OutputError, OutputResult};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file's name inside an output folder.
pub const LOCK_FILE: &str = ".watershed.lock";

/// A held output-folder lock; dropping it removes the file.
#[derive(Debug)]
pub struct OutputLock {
    path: PathBuf,
}

/// This machine's name (Linux: `/proc/sys/kernel/hostname`).
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

/// Whether process `pid` runs on this machine (Linux: `/proc/PID`, not a
/// zombie: a run killed with SIGKILL stays one until its parent reaps it,
/// which in a container without an init may be never).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// The holder recorded in a lock file: (pid, host, case).
fn holder(text: &str) -> Option<(u32, String, String)> {
    let mut pid = None;
    let mut host = None;
    let mut case = None;
    for line in text.lines() {
        match line.split_once('=') {
            Some(("pid", v)) => pid = v.trim().parse().ok(),
            Some(("host", v)) => host = Some(v.trim().to_string()),
            Some(("case", v)) => case = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Some((pid?, host?, case.unwrap_or_default()))
}

impl OutputLock {
    /// Takes the lock of `directory` (which must exist) for a run of
    /// `case`, or says who holds it.
    pub fn acquire(directory: &Path, case: &str) -> OutputResult<Self> {
        let path = directory.join(LOCK_FILE);
        let error = |reason: String| OutputError::Output {
            path: directory.to_path_buf(),
            reason,
        };
        let text = format!("pid={}\nhost={}\ncase={case}\n", std::process::id(), host());
        for _ in 0..2 {
            match std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    file.write_all(text.as_bytes()).map_err(|e| {
                        error(format!("cannot write the lock {}: {e}", path.display()))
                    })?;
                    return Ok(OutputLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let held = std::fs::read_to_string(&path).unwrap_or_default();
                    match holder(&held) {
                        Some((pid, lock_host, _)) if lock_host == host() && !alive(pid) => {
                            tracing::warn!(
                                lock = %path.display(),
                                pid,
                                "the run that held this output folder is gone; taking the folder over"
                            );
                            let _ = std::fs::remove_file(&path);
                        }
                        Some((pid, lock_host, held_case)) => {
                            return Err(error(format!(
                                "is being written by another run (`{held_case}`, pid {pid} on host {lock_host}); wait for it to end or choose another --output (remove {} only if that run is gone)",
                                path.display()
                            )));
                        }
                        None => {
                            return Err(error(format!(
                                "holds a lock file {} that does not name its run; another run may be writing here: choose another --output, or remove the file if none is",
                                path.display()
                            )));
                        }
                    }
                }
                Err(e) => {
                    return Err(error(format!(
                        "cannot create the lock {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        Err(error(format!(
            "another run took the lock {} while a stale one was removed; try again",
            path.display()
        )))
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_naming_the_holder_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let lock = OutputLock::acquire(dir.path(), "heat").unwrap();
        let error = OutputLock::acquire(dir.path(), "heat").unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, OutputError::Output { .. }), "{error:?}");
        assert!(
            message.contains(&format!("pid {}", std::process::id())) && message.contains("`heat`"),
            "{message}"
        );
        drop(lock);
        assert!(!dir.path().join(LOCK_FILE).exists());
        OutputLock::acquire(dir.path(), "heat").unwrap();
    }

    #[test]
    fn a_zombie_is_not_alive() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("`true` runs");
        // Not waited for: once it exits it is a zombie until reaped.
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !alive(child.id())
        });
        assert!(Path::new(&format!("/proc/{}", child.id())).exists());
        assert!(gone, "an exited, unreaped child counts as alive");
        child.wait().unwrap();
        assert!(alive(std::process::id()));
    }

    #[test]
    fn a_lock_of_a_run_that_is_gone_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        // No process has this pid (above Linux's pid_max).
        std::fs::write(
            dir.path().join(LOCK_FILE),
            format!("pid=999999999\nhost={}\ncase=heat\n", host()),
        )
        .unwrap();
        let _lock = OutputLock::acquire(dir.path(), "advection").unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert!(
            text.contains(&format!("pid={}", std::process::id())),
            "{text}"
        );
        // A lock from another host is never taken over.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(
            other.path().join(LOCK_FILE),
            "pid=999999999\nhost=elsewhere\ncase=heat\n",
        )
        .unwrap();
        let message = OutputLock::acquire(other.path(), "heat")
            .unwrap_err()
            .to_string();
        assert!(message.contains("host elsewhere"), "{message}");
    }
}
