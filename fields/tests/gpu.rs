//! GPU location tests. Each runs on GPU 0 when a CUDA device is present and
//! prints "skipped ... no CUDA device" and passes when it is not.

mod device_bytes;

use device_bytes::read_device;
use watershed_fields::gpu::gpu_for_tests;
use watershed_fields::*;

fn patch() -> Patch {
    Grid::new([17, 9, 5], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(2)
}

fn numbered(name: &str) -> SpatialField<CellCentre> {
    let mut field = SpatialField::<CellCentre>::new(name, &patch(), Device::Cpu).unwrap();
    for (i, v) in field.values_mut().unwrap().iter_mut().enumerate() {
        *v = (i as f64).sin();
    }
    field
}

#[test]
fn cpu_gpu_round_trip_keeps_every_value() {
    let Some(k) = gpu_for_tests("cpu_gpu_round_trip_keeps_every_value") else {
        return;
    };
    let gpu = Device::Gpu(k);
    let mut field = numbered("phi");
    let expected = field.values().unwrap().to_vec();
    field.validate_on(gpu).unwrap();
    assert!(field.is_valid_on(gpu) && field.is_valid_on(Device::Cpu));
    // Make the GPU the only valid copy, then bring it back.
    field.set_active(gpu).unwrap();
    let _ = field.gpu_buffer_mut(gpu).unwrap();
    assert!(!field.is_valid_on(Device::Cpu));
    assert!(field.values().is_err());
    field.validate_on(Device::Cpu).unwrap();
    assert_eq!(field.values().unwrap(), &expected[..]);
}

#[test]
fn writes_on_the_gpu_reach_the_cpu() {
    let Some(k) = gpu_for_tests("writes_on_the_gpu_reach_the_cpu") else {
        return;
    };
    let gpu = Device::Gpu(k);
    let mut field = numbered("phi");
    field.validate_on(gpu).unwrap();
    field.set_active(gpu).unwrap();
    field.fill(0.0).unwrap(); // memset path
    field.validate_on(Device::Cpu).unwrap();
    assert!(field.values().unwrap().iter().all(|&v| v == 0.0));
    field.fill(2.5).unwrap(); // upload path
    assert!(!field.is_valid_on(Device::Cpu));
    field.validate_on(Device::Cpu).unwrap();
    assert!(field.values().unwrap().iter().all(|&v| v == 2.5));
}

#[test]
fn asynchronous_validation_returns_an_event_and_host_access_waits() {
    let Some(k) = gpu_for_tests("asynchronous_validation_returns_an_event_and_host_access_waits")
    else {
        return;
    };
    let gpu = Device::Gpu(k);
    let stream = GpuStream::new(k).unwrap();
    let mut field = numbered("phi");
    let expected = field.values().unwrap().to_vec();
    let event = field
        .validate_on_async(gpu, &stream)
        .unwrap()
        .expect("a copy was needed");
    assert!(
        field.validate_on_async(gpu, &stream).unwrap().is_none(),
        "already valid"
    );
    let consumer = GpuStream::new(k).unwrap();
    consumer.wait(&event).unwrap();
    event.synchronize().unwrap();
    assert!(event.is_complete());
    field.set_active(gpu).unwrap();
    let buffer = field.gpu_buffer_mut(gpu).unwrap();
    assert_eq!(buffer.len, field.layout().allocated_len());
    let back = field.validate_on_async(Device::Cpu, &stream).unwrap();
    assert!(back.is_some());
    // values() waits for the copy by itself.
    assert_eq!(field.values().unwrap(), &expected[..]);
}

#[test]
fn gpu_pool_reuses_blocks_and_reports_no_leaks() {
    let Some(k) = gpu_for_tests("gpu_pool_reuses_blocks_and_reports_no_leaks") else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let a = pool.allocate(1 << 20, "a").unwrap();
    let address = a.address();
    drop(a);
    let b = pool.allocate(1 << 20, "b").unwrap();
    assert_eq!(b.address(), address);
    assert_eq!(pool.statistics().hits, 1);
    drop(b);
    pool.check_no_leaks().unwrap();
    assert_eq!(pool.release_cached(), 1 << 20);
}

#[test]
fn host_pool_pins_memory_when_a_gpu_is_present() {
    let Some(_) = gpu_for_tests("host_pool_pins_memory_when_a_gpu_is_present") else {
        return;
    };
    let pool = MemoryPool::host(HostMemory::Pinned);
    let block = pool.allocate(1 << 20, "staging").unwrap();
    assert!(block.is_pinned(), "pinning failed: {:?}", pool.statistics());
    assert_eq!(pool.statistics().pinned_fallbacks, 0);
}

#[test]
fn gpu_to_gpu_validation_when_two_gpus_exist() {
    if watershed_fields::gpu::gpu_count() < 2 {
        eprintln!("skipped gpu_to_gpu_validation_when_two_gpus_exist: fewer than two CUDA devices");
        return;
    }
    let mut field = numbered("phi");
    let expected = field.values().unwrap().to_vec();
    field.validate_on(Device::Gpu(0)).unwrap();
    field.set_active(Device::Gpu(0)).unwrap();
    let _ = field.gpu_buffer_mut(Device::Gpu(0)).unwrap();
    field.validate_on(Device::Gpu(1)).unwrap();
    field.set_active(Device::Gpu(1)).unwrap();
    let _ = field.gpu_buffer_mut(Device::Gpu(1)).unwrap();
    field.validate_on(Device::Cpu).unwrap();
    assert_eq!(field.values().unwrap(), &expected[..]);
}

/// Records on `origin` a memset of `a` to `byte` and, on a second stream
/// ordered by an event, a copy of `a` into `b`.
fn record_memset_then_copy(
    origin: &GpuStream,
    other: &GpuStream,
    (a, b): (usize, usize),
    byte: u8,
    bytes: usize,
) -> watershed_fields::gpu::RecordedStep {
    let k = origin.device();
    let recording = origin.begin_recording().unwrap();
    // SAFETY: `a` and `b` are `bytes` bytes of the GPU's memory that the
    // caller keeps until the step has run and nothing else touches.
    unsafe { origin.memset(a, byte, bytes, "memset").unwrap() };
    let written = origin.record().unwrap();
    other.wait(&written).unwrap();
    // SAFETY: as above.
    unsafe { other.copy((k, a), (k, b), bytes, "copy").unwrap() };
    let copied = other.record().unwrap();
    origin.wait(&copied).unwrap();
    recording.finish().unwrap()
}

#[test]
fn a_recorded_step_runs_only_when_enqueued_and_in_its_order() {
    let Some(k) = gpu_for_tests("a_recorded_step_runs_only_when_enqueued_and_in_its_order") else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 4096;
    let (a, b) = (
        pool.allocate(bytes, "a").unwrap(),
        pool.allocate(bytes, "b").unwrap(),
    );
    let (origin, other) = (GpuStream::new(k).unwrap(), GpuStream::new(k).unwrap());
    let step = record_memset_then_copy(&origin, &other, (a.address(), b.address()), 0x5a, bytes);
    assert_eq!(step.operations(), 6);
    assert_eq!(step.launches(), 0);
    // Nothing was enqueued: b still holds the pool's zeros.
    origin.synchronize().unwrap();
    other.synchronize().unwrap();
    assert!(read_device(k, b.address(), bytes).iter().all(|&x| x == 0));
    step.run_directly().unwrap();
    origin.synchronize().unwrap();
    assert!(
        read_device(k, b.address(), bytes)
            .iter()
            .all(|&x| x == 0x5a)
    );
}

#[test]
fn a_captured_graph_replays_only_its_own_step() {
    let Some(k) = gpu_for_tests("a_captured_graph_replays_only_its_own_step") else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 4096;
    let (a, b, c) = (
        pool.allocate(bytes, "a").unwrap(),
        pool.allocate(bytes, "b").unwrap(),
        pool.allocate(bytes, "c").unwrap(),
    );
    let (origin, other) = (GpuStream::new(k).unwrap(), GpuStream::new(k).unwrap());
    let first = record_memset_then_copy(&origin, &other, (a.address(), b.address()), 0x11, bytes);
    let graph = first.capture().unwrap();
    assert_eq!(graph.key(), first.key());
    graph.launch(first).unwrap();
    origin.synchronize().unwrap();
    assert!(
        read_device(k, b.address(), bytes)
            .iter()
            .all(|&x| x == 0x11)
    );
    // The same step again: replayed.
    let again = record_memset_then_copy(&origin, &other, (a.address(), b.address()), 0x11, bytes);
    memset_now(&origin, b.address(), 0, bytes);
    graph.launch(again).unwrap();
    origin.synchronize().unwrap();
    assert!(
        read_device(k, b.address(), bytes)
            .iter()
            .all(|&x| x == 0x11)
    );
    // Another value, then another destination: not replayed, run
    // directly (their work is done), and the call says where they differ.
    for (byte, destination) in [(0x22, b.address()), (0x11, c.address())] {
        let other_step =
            record_memset_then_copy(&origin, &other, (a.address(), destination), byte, bytes);
        assert_ne!(other_step.key(), graph.key());
        let error = graph.launch(other_step).unwrap_err();
        assert!(
            matches!(&error, FieldError::Cuda { message, .. } if message.contains("operation") && message.contains("differs") && message.contains("ran directly")),
            "{error}"
        );
        origin.synchronize().unwrap();
        assert!(
            read_device(k, destination, bytes)
                .iter()
                .all(|&x| x == byte)
        );
    }
}

#[test]
fn a_graph_takes_the_arguments_only_of_a_step_of_its_shape() {
    let Some(k) = gpu_for_tests("a_graph_takes_the_arguments_only_of_a_step_of_its_shape") else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 1024;
    let (a, b, c) = (
        pool.allocate(bytes, "a").unwrap(),
        pool.allocate(bytes, "b").unwrap(),
        pool.allocate(bytes, "c").unwrap(),
    );
    let (origin, other) = (GpuStream::new(k).unwrap(), GpuStream::new(k).unwrap());
    let first = record_memset_then_copy(&origin, &other, (a.address(), b.address()), 0x33, bytes);
    let mut graph = first.capture().unwrap();
    graph.launch(first).unwrap();
    // A copy to another address is another shape (only kernel argument
    // bytes may differ): refused, naming the operation, graph untouched.
    let elsewhere =
        record_memset_then_copy(&origin, &other, (a.address(), c.address()), 0x33, bytes);
    assert_ne!(elsewhere.shape(), graph.key().shape());
    let before = graph.key().clone();
    let error = graph.update_arguments(&elsewhere).unwrap_err();
    assert!(
        matches!(&error, FieldError::Cuda { message, .. } if message.contains("shape differs") && message.contains("operation 3 differs")),
        "{error}"
    );
    assert_eq!(graph.key(), &before);
    elsewhere.run_directly().unwrap();
    origin.synchronize().unwrap();
    assert!(
        read_device(k, c.address(), bytes)
            .iter()
            .all(|&x| x == 0x33)
    );
    // The same step: nothing to update, and it replays.
    let same = record_memset_then_copy(&origin, &other, (a.address(), b.address()), 0x33, bytes);
    assert_eq!(graph.update_arguments(&same).unwrap(), 0);
    memset_now(&origin, b.address(), 0, bytes);
    graph.launch(same).unwrap();
    origin.synchronize().unwrap();
    assert!(
        read_device(k, b.address(), bytes)
            .iter()
            .all(|&x| x == 0x33)
    );
}

/// A memset enqueued outside any recording.
fn memset_now(stream: &GpuStream, address: usize, byte: u8, bytes: usize) {
    // SAFETY: the caller's GPU memory, `bytes` long.
    unsafe { stream.memset(address, byte, bytes, "reset").unwrap() };
    stream.synchronize().unwrap();
}

#[test]
fn a_recording_refuses_host_waits_and_a_dropped_one_runs_its_work() {
    let Some(k) = gpu_for_tests("a_recording_refuses_host_waits_and_a_dropped_one_runs_its_work")
    else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 256;
    let a = pool.allocate(bytes, "a").unwrap();
    let stream = GpuStream::new(k).unwrap();
    let event = {
        let recording = stream.begin_recording().unwrap();
        // A second recording on this thread is refused.
        let nested = stream.begin_recording().unwrap_err();
        assert!(nested.to_string().contains("already open"), "{nested}");
        // SAFETY: `a` is `bytes` bytes of GPU k, kept past the recording.
        unsafe { stream.memset(a.address(), 0x7f, bytes, "memset").unwrap() };
        let event = stream.record().unwrap();
        // The host cannot wait for work that is not enqueued.
        let sync = stream.synchronize().unwrap_err();
        assert!(
            sync.to_string()
                .contains("cannot wait inside a step recorded for replay"),
            "{sync}"
        );
        let pending = event.synchronize().unwrap_err();
        assert!(
            pending.to_string().contains("not been enqueued"),
            "{pending}"
        );
        assert!(!event.is_complete());
        drop(recording);
        event
    };
    // Dropped without finishing: its work was enqueued, its event is real.
    event.synchronize().unwrap();
    assert!(event.is_complete());
    assert!(
        read_device(k, a.address(), bytes)
            .iter()
            .all(|&x| x == 0x7f)
    );
}

/// The process-wide stream-ordered pool is counted by the test using it:
/// one such test at a time.
fn stream_ordered_pool_alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_stream_ordered_pool_allocates_on_its_stream_and_frees_in_order() {
    let Some(k) = gpu_for_tests("a_stream_ordered_pool_allocates_on_its_stream_and_frees_in_order")
    else {
        return;
    };
    let _alone = stream_ordered_pool_alone();
    let gpu = Device::Gpu(k);
    let pool = MemoryPool::stream_ordered(k).unwrap();
    assert!(pool.is_stream_ordered() && pool.device() == gpu);
    let before = pool.statistics();
    // Without a stream it cannot allocate, and says so, naming the block.
    let error = pool.allocate(4096, "flux").unwrap_err();
    assert!(
        matches!(&error, FieldError::Allocation { device, bytes: 4096, reason }
            if *device == gpu && reason.contains("'flux'") && reason.contains("allocate_on")),
        "{error}"
    );
    let stream = GpuStream::new(k).unwrap();
    let bytes = 4096;
    let block = pool.allocate_on(&stream, bytes, "flux").unwrap();
    assert_eq!((block.device(), block.bytes()), (gpu, bytes));
    let during = pool.statistics();
    assert_eq!(during.blocks_active, before.blocks_active + 1);
    assert_eq!(during.bytes_total, before.bytes_total + bytes);
    assert_eq!(
        during.misses,
        before.misses + 1,
        "every request goes to the driver"
    );
    assert!(pool.outstanding().iter().any(|b| &*b.label == "flux"));
    // Work enqueued on the stream after the allocation uses the block;
    // dropping it enqueues the free after that work.
    let mut host = vec![0u8; bytes];
    // SAFETY: the block is `bytes` bytes of GPU k; it is freed only after
    // the copy (same stream), and `host` lives until the synchronisation.
    unsafe {
        stream.memset(block.address(), 0x5a, bytes, "fill").unwrap();
        stream
            .copy(
                (gpu, block.address()),
                (Device::Cpu, host.as_mut_ptr() as usize),
                bytes,
                "read back",
            )
            .unwrap();
    }
    drop(block);
    stream.synchronize().unwrap();
    assert!(host.iter().all(|&b| b == 0x5a));
    let after = pool.statistics();
    assert_eq!(after.blocks_active, before.blocks_active);
    assert_eq!(
        after.bytes_total, before.bytes_total,
        "freed, not cached here"
    );
    assert!(!pool.outstanding().iter().any(|b| &*b.label == "flux"));
    // A size-class pool ignores the stream.
    let sized = MemoryPool::gpu(k).unwrap();
    let block = sized.allocate_on(&stream, 1000, "sized").unwrap();
    assert_eq!(block.bytes(), watershed_fields::pool::size_class(1000));
    drop(block);
    // A stream of another GPU is refused, naming both.
    if watershed_fields::gpu::gpu_count() > 1 {
        let other = GpuStream::new((k + 1) % watershed_fields::gpu::gpu_count()).unwrap();
        let error = pool.allocate_on(&other, 256, "misplaced").unwrap_err();
        assert!(
            matches!(&error, FieldError::Allocation { reason, .. }
                if reason.contains("'misplaced'") && reason.contains(&other.device().to_string())),
            "{error}"
        );
    }
    // Inside a step recording, whose work is not enqueued yet, nothing is
    // allocated in stream order, and a block dropped there is never freed
    // (work logged in the recording may still use it): the leak check
    // names it.
    let held = pool.allocate_on(&stream, 256, "held").unwrap();
    let recording = stream.begin_recording().unwrap();
    let refused = pool.allocate_on(&stream, 256, "late").unwrap_err();
    assert!(
        matches!(&refused, FieldError::Allocation { reason, .. } if reason.contains("step recorded for replay")),
        "{refused}"
    );
    drop(held);
    drop(recording.finish().unwrap());
    let kept = pool.outstanding();
    assert!(
        kept.iter()
            .any(|b| b.label.starts_with("held") && b.label.contains("never freed")),
        "{kept:?}"
    );
    let leak = pool.check_no_leaks().unwrap_err();
    assert!(
        matches!(&leak, FieldError::Leak { report, .. } if report.contains("held")),
        "{leak}"
    );
}

#[test]
fn a_field_allocated_in_stream_order_lives_on_its_gpu_and_refuses_what_cannot_be() {
    let Some(k) = gpu_for_tests(
        "a_field_allocated_in_stream_order_lives_on_its_gpu_and_refuses_what_cannot_be",
    ) else {
        return;
    };
    let _alone = stream_ordered_pool_alone();
    let gpu = Device::Gpu(k);
    let stream = GpuStream::new(k).unwrap();
    let refused = |error: FieldError, why: &str| {
        assert!(
            matches!(&error, FieldError::Allocation { reason, .. }
                if reason.contains("field 'rho'") && reason.contains(why)),
            "{error}"
        );
    };
    // On the CPU: no streams there.
    let on_cpu = SpatialField::<CellCentre>::builder("rho", &patch())
        .init(FieldInit::Unspecified)
        .in_stream_order(&stream)
        .build();
    refused(on_cpu.unwrap_err(), "CPU");
    // Zero-filled: that would wait for the stream.
    let zeroed = SpatialField::<CellCentre>::builder("rho", &patch())
        .device(gpu)
        .in_stream_order(&stream)
        .build();
    refused(zeroed.unwrap_err(), "memset on the stream");
    // On the GPU, unspecified: values written on the stream come back.
    let mut field = SpatialField::<CellCentre>::builder("rho", &patch())
        .device(gpu)
        .init(FieldInit::Unspecified)
        .in_stream_order(&stream)
        .build()
        .unwrap();
    let buffer = field.gpu_buffer_mut(gpu).unwrap();
    let pool = MemoryPool::stream_ordered(k).unwrap();
    assert!(pool.outstanding().iter().any(|b| &*b.label == "rho"));
    // SAFETY: the field's GPU memory, `len` doubles, kept by `field`.
    unsafe {
        stream
            .memset(buffer.pointer as usize, 0, buffer.len * 8, "zero")
            .unwrap();
    }
    stream.synchronize().unwrap();
    field.validate_on(Device::Cpu).unwrap();
    assert!(field.values().unwrap().iter().all(|&v| v == 0.0));
    drop(field);
    stream.synchronize().unwrap();
    assert!(!pool.outstanding().iter().any(|b| &*b.label == "rho"));
}

/// Timing marks: the GPU time between two marks bracketing a memset is
/// measured once the GPU reached both (the later mark first gives zero,
/// not a negative time); marks of two GPUs are refused by name; a mark
/// inside a step recording is refused, naming replay.
#[test]
fn marks_time_the_work_between_them_and_refuse_what_cannot_be_timed() {
    let Some(k) = gpu_for_tests("marks_time_the_work_between_them_and_refuse_what_cannot_be_timed")
    else {
        return;
    };
    let pool = MemoryPool::gpu(k).unwrap();
    let bytes = 64 << 20;
    let block = pool.allocate(bytes, "timed memset").unwrap();
    let stream = GpuStream::new(k).unwrap();
    let origin = stream.mark().unwrap();
    let before = stream.mark().unwrap();
    // SAFETY: `block` is `bytes` bytes of GPU k, alive past the wait below.
    unsafe {
        stream
            .memset(block.address(), 0x5a, bytes, "timed memset")
            .unwrap()
    };
    let after = stream.mark().unwrap();
    assert_eq!(after.device(), Device::Gpu(k));
    let memset = after.since(&before).unwrap();
    assert!(memset > std::time::Duration::ZERO, "{memset:?}");
    assert!(after.since(&origin).unwrap() >= memset);
    assert_eq!(before.since(&after).unwrap(), std::time::Duration::ZERO);
    assert!(
        read_device(k, block.address(), 4096)
            .iter()
            .all(|&b| b == 0x5a)
    );
    if watershed_fields::gpu::gpu_count() >= 2 {
        let other = GpuStream::new(1 - k.min(1)).unwrap().mark().unwrap();
        let error = other.since(&after).unwrap_err();
        assert!(matches!(error, FieldError::Cuda { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .contains(&format!("the earlier mark is on GPU {k}")),
            "{error}"
        );
    }
    let recording = stream.begin_recording().unwrap();
    let refused = stream.mark().unwrap_err();
    assert!(matches!(refused, FieldError::Cuda { .. }), "{refused:?}");
    assert!(
        refused.to_string().contains("turn step replay off"),
        "{refused}"
    );
    drop(recording);
    stream.synchronize().unwrap();
}
