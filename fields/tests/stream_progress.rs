//! The stream waits, event records and host waits the device layer leaves
//! out because they order nothing (`fields/src/gpu/stream_book.rs`), counted
//! with the call census, and the data showing that each wait it keeps is
//! needed: on emulated GPUs a stream's work runs only when something waits
//! for it, so a wait left out wrongly makes a copy read stale bytes.
//!
//! One test in this binary: the census counts the whole process.

mod device_bytes;

use device_bytes::read_device;
use watershed_fields::gpu::gpu_for_tests;
use watershed_fields::*;

/// The GPU calls `work` makes.
fn calls_of(work: impl FnOnce()) -> GpuCalls {
    let before = gpu_calls();
    work();
    gpu_calls().since(&before)
}

/// Enqueues setting `bytes` bytes at `address` to `byte` on `stream`.
fn memset(stream: &GpuStream, address: usize, byte: u8, bytes: usize) {
    // SAFETY: `address` is `bytes` bytes of the stream's GPU memory, held
    // by the test until every stream is synchronised.
    unsafe { stream.memset(address, byte, bytes, "memset").unwrap() };
}

/// Enqueues a copy of `bytes` bytes from `from` to `to` on `stream`.
fn copy(stream: &GpuStream, from: usize, to: usize, bytes: usize) {
    let k = stream.device();
    // SAFETY: both are `bytes` bytes of the stream's GPU memory, held by
    // the test until every stream is synchronised.
    unsafe { stream.copy((k, from), (k, to), bytes, "copy").unwrap() };
}

#[test]
fn waits_and_records_that_order_nothing_cost_no_driver_call() {
    let Some(k) = gpu_for_tests("waits_and_records_that_order_nothing_cost_no_driver_call") else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 4096;
    let (x, y) = (
        pool.allocate(bytes, "x").unwrap(),
        pool.allocate(bytes, "y").unwrap(),
    );
    let (x, y) = (x.address(), y.address());
    let [a, b, c] = [0; 3].map(|_| GpuStream::new(k).unwrap());

    // A stream with no work: its event is finished at once, and waiting
    // for it, on a stream or on the host, costs nothing.
    let calls = calls_of(|| {
        let event = a.record().unwrap();
        assert!(event.is_complete());
        b.wait(&event).unwrap();
        event.synchronize().unwrap();
        a.synchronize().unwrap();
    });
    assert_eq!(calls.total(), 0, "{calls}");

    // After work, a record is a driver call. The stream itself needs no
    // wait for it; another stream waits once, and not again for it or for
    // an earlier event of the same stream.
    let mut first = None;
    let calls = calls_of(|| {
        memset(&a, x, 0x11, bytes);
        first = Some(a.record().unwrap());
    });
    assert_eq!(
        (calls.memsets, calls.records, calls.total()),
        (1, 1, 2),
        "{calls}"
    );
    let first = first.unwrap();
    assert_eq!(calls_of(|| a.wait(&first).unwrap()).total(), 0);
    let calls = calls_of(|| {
        b.wait(&first).unwrap();
        b.wait(&first).unwrap();
    });
    assert_eq!((calls.waits, calls.total()), (1, 1), "{calls}");
    memset(&a, x, 0x22, bytes);
    let second = a.record().unwrap();
    let calls = calls_of(|| {
        b.wait(&second).unwrap();
        b.wait(&first).unwrap();
    });
    assert_eq!((calls.waits, calls.total()), (1, 1), "{calls}");
    copy(&b, x, y, bytes);
    b.synchronize().unwrap();
    assert!(
        read_device(k, y, bytes).iter().all(|&v| v == 0x22),
        "b read x early"
    );

    // A stream whose only work since its last host wait is a wait for
    // another stream is not idle: its event orders that work for a third.
    memset(&a, x, 0x33, bytes);
    let written = a.record().unwrap();
    b.wait(&written).unwrap();
    let relayed_calls = calls_of(|| {
        let relayed = b.record().unwrap();
        c.wait(&relayed).unwrap();
    });
    assert_eq!(
        (relayed_calls.records, relayed_calls.waits),
        (1, 1),
        "{relayed_calls}"
    );
    copy(&c, x, y, bytes);
    c.synchronize().unwrap();
    assert!(
        read_device(k, y, bytes).iter().all(|&v| v == 0x33),
        "c read x before a wrote it"
    );

    // Once the host synchronised a stream, its events need no wait, on a
    // stream or on the host, and it needs no second synchronisation.
    let calls = calls_of(|| a.synchronize().unwrap());
    assert_eq!(calls.host_waits, 1, "{calls}");
    let calls = calls_of(|| {
        c.wait(&written).unwrap();
        written.synchronize().unwrap();
        assert!(written.is_complete());
        a.synchronize().unwrap();
        let _ = a.record().unwrap();
    });
    assert_eq!(calls.total(), 0, "{calls}");

    // The host waiting for an event credits its stream: everything before
    // it is finished too.
    memset(&a, x, 0x44, bytes);
    let early = a.record().unwrap();
    memset(&a, y, 0x45, bytes);
    let late = a.record().unwrap();
    let calls = calls_of(|| late.synchronize().unwrap());
    assert_eq!(calls.host_waits, 1, "{calls}");
    let calls = calls_of(|| {
        c.wait(&early).unwrap();
        early.synchronize().unwrap();
        let _ = a.record().unwrap();
    });
    assert_eq!(calls.total(), 0, "{calls}");

    // A replayed step runs all its work on its origin stream, whatever
    // stream logged it: a later wait for one of its events by the stream
    // that logged it is kept, or that stream reads before the step ran.
    b.synchronize().unwrap();
    let recording = a.begin_recording().unwrap();
    memset(&b, x, 0x55, bytes);
    let logged = b.record().unwrap();
    a.wait(&logged).unwrap();
    let step = recording.finish().unwrap();
    let graph = step.capture().unwrap();
    graph.launch(step).unwrap();
    let calls = calls_of(|| b.wait(&logged).unwrap());
    assert_eq!(calls.waits, 1, "{calls}");
    copy(&b, x, y, bytes);
    b.synchronize().unwrap();
    assert!(
        read_device(k, y, bytes).iter().all(|&v| v == 0x55),
        "b read x before the replayed step wrote it"
    );
    a.synchronize().unwrap();

    // Turned off, every call asked for is made: the baseline for
    // measuring what the elision saves.
    watershed_fields::gpu::set_call_elision(false);
    let calls = calls_of(|| {
        let idle = a.record().unwrap();
        a.wait(&idle).unwrap();
        b.wait(&idle).unwrap();
        b.wait(&idle).unwrap();
        idle.synchronize().unwrap();
        a.synchronize().unwrap();
    });
    watershed_fields::gpu::set_call_elision(true);
    assert_eq!(
        (calls.records, calls.waits, calls.host_waits),
        (1, 3, 2),
        "{calls}"
    );
}
