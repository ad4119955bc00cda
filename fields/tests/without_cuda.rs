//! A build without the `cuda` cargo feature (`cargo test -p
//! watershed-fields --no-default-features --test without_cuda`, which the
//! test command runs): no GPU exists, and every request for one is a
//! `NoCudaDevice` error that says the build lacks CUDA. With the feature on
//! (the default) this file holds no test.
#![cfg(not(feature = "cuda"))]

use watershed_fields::gpu::{self, BUILT_WITH_CUDA};
use watershed_fields::{CellCentre, Device, FieldError, GpuStream, Grid, MemoryPool, SpatialField};

fn says_built_without_cuda(error: &FieldError, ordinal: usize) {
    let FieldError::NoCudaDevice { device, reason } = error else {
        panic!("expected NoCudaDevice, got {error:?}");
    };
    assert_eq!(*device, Device::Gpu(ordinal));
    assert!(
        reason.contains("without the `cuda` cargo feature"),
        "{reason}"
    );
}

#[test]
fn a_build_without_cuda_has_no_gpu_and_says_why() {
    const { assert!(!BUILT_WITH_CUDA) };
    assert!(!gpu::cuda_driver_present());
    assert_eq!(gpu::gpu_count(), 0);
    let reason = gpu::gpu_unavailable_reason(0).unwrap();
    assert!(reason.contains("no CUDA support"), "{reason}");
    says_built_without_cuda(&gpu::require_gpu(1).unwrap_err(), 1);
    says_built_without_cuda(&GpuStream::new(0).unwrap_err(), 0);
    says_built_without_cuda(&MemoryPool::gpu(2).unwrap_err(), 2);
    assert!(gpu::gpu_for_tests("a_build_without_cuda").is_none());
}

#[test]
fn fields_stay_on_the_cpu_and_keep_their_values() {
    let patch = Grid::new([4, 3, 2], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
    phi.fill(3.5).unwrap();
    says_built_without_cuda(&phi.validate_on(Device::Gpu(0)).unwrap_err(), 0);
    says_built_without_cuda(&phi.add_location(Device::Gpu(0)).unwrap_err(), 0);
    assert_eq!(phi.devices().collect::<Vec<_>>(), [Device::Cpu]);
    assert!(phi.values().unwrap().iter().all(|&v| v == 3.5));
    assert_eq!(phi.values_on(Device::Cpu).unwrap(), phi.values().unwrap());
    // The host pool is pageable: no pinned memory without CUDA.
    let block = MemoryPool::global(Device::Cpu)
        .unwrap()
        .allocate(64, "x")
        .unwrap();
    assert!(!block.is_pinned());
}
