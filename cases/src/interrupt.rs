//! SIGINT and SIGTERM end a run cleanly: the handler only records the
//! signal; the run loop ([`crate::driver::run`]) sees it after the step in
//! progress, writes a checkpoint, the last dump and the XDMF, and the
//! program says where the run stopped and how to continue, then exits
//! with 128 + the signal (130, 143). A second signal ends the process at
//! once (`_exit`), for a run that does not come back from its step.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// SIGINT's number on Linux.
pub const SIGINT: i32 = 2;
/// SIGTERM's number on Linux.
pub const SIGTERM: i32 = 15;

// SAFETY: both are declared with their C signatures (glibc: `sighandler_t
// signal(int, sighandler_t)`, a pointer-sized return; `void _exit(int)`).
unsafe extern "C" {
    /// `signal(2)` of the C library std links (BSD semantics on glibc: the
    /// handler stays installed, system calls restart).
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    /// `_exit(2)`: ends the process without running anything else
    /// (async-signal-safe).
    fn _exit(status: i32) -> !;
}

/// The handler: records the first signal; a second one ends the process.
extern "C" fn on_signal(signum: i32) {
    if RECEIVED.swap(signum, Ordering::SeqCst) != 0 {
        // SAFETY: `_exit` is async-signal-safe and takes any status.
        unsafe { _exit(128 + signum) }
    }
}

/// Installs the handler for SIGINT and SIGTERM (the program calls this
/// once; a library user who wants the same behaviour may too).
pub fn install() {
    for signum in [SIGINT, SIGTERM] {
        // SAFETY: `on_signal` only touches an atomic and calls `_exit`,
        // both async-signal-safe; `signal` is given a valid signal number.
        unsafe {
            signal(signum, on_signal);
        }
    }
}

/// The signal received since the start (or [`clear`]), if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signum => Some(signum),
    }
}

/// Forgets a received signal.
pub fn clear() {
    RECEIVED.store(0, Ordering::SeqCst);
}

/// `SIGINT`, `SIGTERM` or `signal N`.
pub fn name(signum: i32) -> String {
    match signum {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}
