//! Reading GPU memory back in the fields crate's GPU tests.

use watershed_fields::{Device, GpuStream};

/// The bytes of `bytes` bytes of GPU memory at `address`, read directly
/// on a fresh stream of GPU `k`.
pub fn read_device(k: usize, address: usize, bytes: usize) -> Vec<u8> {
    let stream = GpuStream::new(k).unwrap();
    let mut host = vec![0u8; bytes];
    // SAFETY: `address` is `bytes` bytes of GPU k's memory held by the
    // caller; `host` lives until the stream is synchronised.
    unsafe {
        stream
            .copy(
                (Device::Gpu(k), address),
                (Device::Cpu, host.as_mut_ptr() as usize),
                bytes,
                "reading back",
            )
            .unwrap();
    }
    stream.synchronize().unwrap();
    host
}
