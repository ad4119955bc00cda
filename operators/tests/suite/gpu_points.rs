//! The halo's point gathers and scatters on a GPU
//! (`watershed_operators::gpu_points`): what is refused before any GPU
//! is touched (so these run without one), and that NVRTC compiles both
//! kernels where it is installed. Their values on a GPU, emulated or
//! real, are checked by `cases/tests/gpu.rs` (an exchange of fields on a
//! GPU against the CPU's, and the bytes it moves).

use watershed_fields::{Device, GpuBuffer};
use watershed_operators::OperatorError;
use watershed_operators::codegen::nvrtc::{compile_unit, nvrtc_problem};
use watershed_operators::gpu_points::{
    PointBatch, copy_points_on_gpu, gather_points_on_gpu, point_kernel_source,
    scatter_points_on_gpu,
};

fn buffer(device: Device, len: usize) -> GpuBuffer {
    GpuBuffer {
        device,
        pointer: 0,
        len,
        ready: None,
    }
}

fn reason(error: OperatorError) -> String {
    match error {
        OperatorError::Backend { what, reason } => format!("{what}: {reason}"),
        other => panic!("expected OperatorError::Backend, got {other:?}"),
    }
}

#[test]
fn points_outside_a_field_fields_on_two_gpus_and_miscounted_values_are_refused() {
    let gpu = buffer(Device::Gpu(0), 10);
    let outside = reason(
        gather_points_on_gpu(
            &mut PointBatch::new(),
            std::slice::from_ref(&gpu),
            &[3, 10],
            &mut [0.0; 2],
            "phi",
        )
        .unwrap_err(),
    );
    assert!(
        outside.contains("halo points of phi")
            && outside.contains("linear index 10 lies outside the field's 10 points"),
        "{outside}"
    );
    let two = reason(
        scatter_points_on_gpu(
            &mut PointBatch::new(),
            &[gpu.clone(), buffer(Device::Gpu(1), 10)],
            &[1],
            &[0.0; 2],
            "phi, psi",
        )
        .unwrap_err(),
    );
    assert!(two.contains("the fields lie on GPU 0 and GPU 1"), "{two}");
    let counted = reason(
        gather_points_on_gpu(
            &mut PointBatch::new(),
            &[gpu.clone(), gpu],
            &[1, 2],
            &mut [0.0; 3],
            "u, v",
        )
        .unwrap_err(),
    );
    assert!(
        counted.contains("2 point(s) of 2 field(s) but 3 value(s)"),
        "{counted}"
    );
    let host = reason(
        scatter_points_on_gpu(
            &mut PointBatch::new(),
            &[buffer(Device::Cpu, 4)],
            &[1],
            &[0.0],
            "phi",
        )
        .unwrap_err(),
    );
    assert!(host.contains("the field is not on a GPU"), "{host}");
    let lists = reason(
        copy_points_on_gpu(
            &mut PointBatch::new(),
            std::slice::from_ref(&buffer(Device::Gpu(0), 10)),
            &[1, 2],
            std::slice::from_ref(&buffer(Device::Gpu(0), 10)),
            &[3],
            "u",
        )
        .unwrap_err(),
    );
    assert!(
        lists.contains("2 point(s) of 1 field(s) read, 1 point(s) of 1 field(s) written"),
        "{lists}"
    );
    // Nothing to move is nothing to do, on any device.
    gather_points_on_gpu(
        &mut PointBatch::new(),
        &[buffer(Device::Cpu, 4)],
        &[],
        &mut [],
        "phi",
    )
    .unwrap();
}

#[test]
fn the_three_point_kernels_compile_with_nvrtc() {
    if let Some(problem) = nvrtc_problem() {
        println!("skipped: {problem}");
        return;
    }
    for (gather, name) in [(true, "ws_gather_points"), (false, "ws_scatter_points")] {
        let ptx = compile_unit(
            name,
            &point_kernel_source(if gather { "gather" } else { "scatter" }),
        )
        .unwrap();
        assert!(ptx.contains(&format!(".entry {name}")), "{ptx}");
    }
}
