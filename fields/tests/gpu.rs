//! GPU location tests. Each runs on GPU 0 when a CUDA device is present and
//! prints "skipped ... no CUDA device" and passes when it is not.

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
