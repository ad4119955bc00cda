//! What the host knows of each stream's progress without asking the
//! driver, and the event records and stream waits that knowledge makes
//! unnecessary.
//!
//! # Design
//! Every field location keeps the event of the last work on it, and every
//! launch, copy and plan step waits on the events of what it reads. Most
//! of those waits order nothing in a repeating time step: the event was
//! recorded on the waiting stream itself, or before the host last
//! synchronised its stream (the previous execution's end), or the waiting
//! stream already waits for a later point of the same stream. A stream in
//! which nothing was enqueued since the host last synchronised it has no
//! work for an event to follow at all. Each such call still costs the
//! host a driver call of about a microsecond, and a step of the ExprLib
//! case made some 200 of them for 61 kernels.
//!
//! A [`StreamBook`], shared by the clones of one stream, counts the
//! operations enqueued on it (launches, copies, memsets, waits,
//! stream-ordered allocations and frees, graph launches) and the count
//! reached when the host last synchronised it. An event carries its
//! stream's book and the count at its record ([`StreamPoint`]). Then:
//!
//! 1. An event is *known finished* when the host synchronised its stream
//!    at or after that count, or synchronised the event itself, or saw it
//!    complete. These facts come from the host's own calls, never from
//!    timing, so what is elided is the same in every run of a program
//!    (which keeps a recorded step's shape stable for replay).
//! 2. A wait is elided when its event is known finished, was recorded on
//!    the waiting stream (stream order already holds), or is at or before
//!    a point of its stream the waiting stream already waits for.
//! 3. A record on a stream with nothing enqueued since its last host
//!    synchronisation returns a finished event without a driver call.
//!
//! It can be turned off for the process ([`set_call_elision`],
//! `WATERSHED_GPU_KEEP_ALL_CALLS=1`), which gives the same results with
//! every call made: the baseline for measuring the gain on a GPU.
//!
//! Counts grow only after the driver accepted an operation, and a host
//! synchronisation credits only the count read before it, so an operation
//! racing with a synchronisation is never taken for finished. Events
//! logged in a step recording are pending and have no point until the
//! step is enqueued: then each takes the point of the real event it
//! stands for (for a replayed step, the event after the graph on its
//! origin stream, which runs all the step's work whatever stream logged
//! it), and the rules apply to that.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

thread_local! {
    /// True while this thread enqueues a step into a stream capture.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// While alive, this thread's stream work goes into a CUDA stream
/// capture: the operations are captured, not run, so they change no
/// stream's count, and every record is a real one (a capture's streams
/// fork from and join its origin through events).
pub(crate) struct CaptureScope {
    was: bool,
}

impl CaptureScope {
    pub(crate) fn open() -> CaptureScope {
        CaptureScope {
            was: CAPTURING.with(|c| c.replace(true)),
        }
    }
}

impl Drop for CaptureScope {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.set(self.was));
    }
}

/// True while this thread enqueues into a stream capture.
pub(crate) fn capturing() -> bool {
    CAPTURING.with(Cell::get)
}

/// Whether calls that order nothing are left out: 0 not decided yet,
/// 1 yes, 2 no.
static ELISION: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// True when calls that order nothing are left out (the default;
/// `WATERSHED_GPU_KEEP_ALL_CALLS=1` or [`set_call_elision`] turn it off).
pub(crate) fn elision() -> bool {
    match ELISION.load(Ordering::Acquire) {
        1 => true,
        2 => false,
        _ => {
            let keep_all = std::env::var("WATERSHED_GPU_KEEP_ALL_CALLS")
                .is_ok_and(|v| !v.is_empty() && v != "0");
            let state = if keep_all { 2 } else { 1 };
            // A concurrent `set_call_elision` wins over the environment.
            let _ = ELISION.compare_exchange(0, state, Ordering::AcqRel, Ordering::Acquire);
            ELISION.load(Ordering::Acquire) == 1
        }
    }
}

/// Turns the leaving out of stream waits, event records and host waits
/// that order nothing on or off for the whole process (on by default;
/// `WATERSHED_GPU_KEEP_ALL_CALLS=1` starts with it off). Results are the
/// same either way: off, every wait the engine asks for reaches the
/// driver, which is what to compare against when measuring the gain or
/// suspecting the elision. Takes effect for the calls made after it.
pub fn set_call_elision(enabled: bool) {
    ELISION.store(if enabled { 1 } else { 2 }, Ordering::Release);
}

/// Numbers streams for the life of the process (a driver handle may be
/// reused once a stream is destroyed; a serial never is).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The host's account of one stream.
#[derive(Debug)]
pub(crate) struct StreamBook {
    serial: u64,
    /// Operations enqueued so far.
    enqueued: AtomicU64,
    /// Operations known finished: all those counted before the host's
    /// last successful wait for the stream (or for one of its events).
    finished: AtomicU64,
    /// For each other stream (by serial), the latest point of it this
    /// stream waits for.
    waits_for: Mutex<HashMap<u64, u64>>,
}

impl StreamBook {
    pub(crate) fn new() -> Arc<StreamBook> {
        Arc::new(StreamBook {
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            enqueued: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            waits_for: Mutex::new(HashMap::new()),
        })
    }

    /// Counts an operation the driver accepted (not one captured).
    pub(crate) fn enqueued_one(&self) {
        if !capturing() {
            self.enqueued.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The count to credit if a host synchronisation starting now
    /// succeeds (read before the synchronisation).
    pub(crate) fn before_synchronising(&self) -> u64 {
        self.enqueued.load(Ordering::Acquire)
    }

    /// Credits a successful host synchronisation: everything counted up to
    /// `point` has finished.
    pub(crate) fn finished_up_to(&self, point: u64) {
        self.finished.fetch_max(point, Ordering::AcqRel);
    }

    /// True when nothing was enqueued since the stream was last known
    /// idle: a record now would mark no work.
    pub(crate) fn idle(&self) -> bool {
        !capturing()
            && elision()
            && self.finished.load(Ordering::Acquire) >= self.enqueued.load(Ordering::Acquire)
    }

    /// The point an event recorded now marks.
    pub(crate) fn point(self: &Arc<Self>) -> StreamPoint {
        StreamPoint {
            book: self.clone(),
            operations: self.enqueued.load(Ordering::Acquire),
            finished: Arc::new(AtomicBool::new(false)),
        }
    }

    /// True when a wait on `point` by this stream orders nothing (see the
    /// module docs, rule 2).
    pub(crate) fn needs_no_wait_for(&self, point: &StreamPoint) -> bool {
        if !elision() {
            return false;
        }
        if point.known_finished() || point.book.serial == self.serial {
            return true;
        }
        self.waits_for
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&point.book.serial)
            .is_some_and(|&waited| waited >= point.operations)
    }

    /// Notes that this stream now waits for `point` (after the driver
    /// accepted the wait).
    pub(crate) fn waits_now_for(&self, point: &StreamPoint) {
        if capturing() {
            return;
        }
        let mut waits = self.waits_for.lock().unwrap_or_else(|p| p.into_inner());
        let waited = waits.entry(point.book.serial).or_insert(0);
        *waited = (*waited).max(point.operations);
    }
}

/// Where on its stream an event was recorded, and whether the host knows
/// it finished. Shared by the clones of one event.
#[derive(Debug, Clone)]
pub(crate) struct StreamPoint {
    book: Arc<StreamBook>,
    /// The stream's count at the record.
    operations: u64,
    /// Set once the host waited for the event itself or saw it complete.
    finished: Arc<AtomicBool>,
}

impl StreamPoint {
    /// True when the host knows the work before this point has finished.
    pub(crate) fn known_finished(&self) -> bool {
        elision()
            && (self.finished.load(Ordering::Acquire)
                || self.book.finished.load(Ordering::Acquire) >= self.operations)
    }

    /// Notes that the host saw the event complete: so is everything before
    /// it on its stream.
    pub(crate) fn saw_finished(&self) {
        self.finished.store(true, Ordering::Release);
        self.book.finished_up_to(self.operations);
    }
}
