//! The GPU launches of assignments (`watershed_operators::gpu`), run without
//! a GPU: each launch's CUDA C is compiled for the host by the system C++
//! compiler under the emulated GPU's shim
//! (`watershed_fields::gpu::emulated_host_unit`), which plays
//! `cuLaunchKernel` (it reads each
//! parameter through the pointer array the driver would get, then runs
//! every thread of every block), over host memory standing in for device
//! memory. What this checks is everything of a GPU launch except the
//! driver: which fields the slots get, the device addresses of their
//! points (0, 0, 0), the argument struct's packing, the trailing
//! arguments, the grid covering the box, the boxes of the modifiers, and
//! the CUDA kernels' arithmetic, against the CPU path to the bit.

use crate::common;

use common::{Xorshift, random_field, sentinel_target};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use watershed_fields::{
    CellCentre, Device, FieldLayout, FieldResult, GpuBuffer, Grid, IndexBox, Location, Patch,
    SpatialField, XFace,
};
use watershed_operators::codegen::nvrtc::CudaKernel;
use watershed_operators::codegen::{self, Backend};
use watershed_operators::gpu::{GpuLaunch, GpuTarget, gpu_launches, gpu_launches_watching};
use watershed_operators::gpu_reduction::{GpuReduction, gpu_reduction};
use watershed_operators::ir::Node;
use watershed_operators::*;

/// A field whose "GPU location" is a host copy of its values.
struct HostAsGpu<'a> {
    field: &'a dyn BoundField,
    copy: Vec<f64>,
}

impl BoundField for HostAsGpu<'_> {
    fn id(&self) -> u64 {
        self.field.id()
    }
    fn name(&self) -> &str {
        self.field.name()
    }
    fn layout(&self) -> &FieldLayout {
        self.field.layout()
    }
    fn cpu_values(&self) -> FieldResult<&[f64]> {
        self.field.cpu_values()
    }
    fn gpu_buffer(&self, device: Device) -> FieldResult<GpuBuffer> {
        Ok(GpuBuffer {
            device,
            pointer: self.copy.as_ptr() as u64,
            len: self.copy.len(),
            ready: None,
        })
    }
}

/// Why this test cannot run here, if it cannot.
fn missing_tools() -> Option<String> {
    if let Some(problem) = codegen::nvrtc::nvrtc_problem() {
        assert!(
            std::env::var("WATERSHED_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
            "NVRTC is required here but absent: {problem}"
        );
        return Some(problem.to_string());
    }
    if codegen::c_compiler().is_err() {
        return Some("no C compiler for the reference".into());
    }
    match Command::new("g++").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no g++ to compile CUDA C for the host".into()),
    }
}

/// Compiles `kernel`'s CUDA C for the host under the emulated GPU's shim
/// and runs it as `cuLaunchKernel` would, over host memory: `params` are
/// the launch's parameter blocks in the signature's order (the argument
/// struct, then one 8-byte value per parameter the signature names).
fn run_kernel_on_host(
    kernel: &CudaKernel,
    params: &[&[u8]],
    grid: [u32; 3],
    block: [u32; 3],
    directory: &std::path::Path,
) {
    let name = &kernel.name;
    let (shim, parameters) =
        watershed_fields::gpu::emulated_host_unit(&kernel.source, name).unwrap();
    assert_eq!(
        params.len(),
        parameters + 1,
        "{name}: the launch's blocks against the kernel's signature"
    );
    assert!(
        params[1..].iter().all(|b| b.len() == 8),
        "{name}: 8-byte parameters"
    );
    let source = directory.join(format!("{name}.cpp"));
    let library = directory.join(format!("{name}.so"));
    std::fs::write(&source, shim).unwrap();
    let out = Command::new("g++")
        .args(["-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "g++ refused the CUDA C of {name}:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        kernel.source
    );
    let mut pointers: Vec<*mut std::ffi::c_void> = params
        .iter()
        .map(|b| b.as_ptr() as *mut std::ffi::c_void)
        .collect();
    type HostLaunch = unsafe extern "C" fn(*mut *mut std::ffi::c_void, *const u32, *const u32);
    // SAFETY: the library was just built from the emulator's shim, whose
    // `ws_host_launch` has this signature and reads as many parameters as
    // were checked above; the parameters point to the
    // launch's blocks and the buffers the launch was built over, which
    // outlive the call.
    unsafe {
        let lib = libloading::Library::new(&library).unwrap();
        let f: libloading::Symbol<HostLaunch> = lib.get(b"ws_host_launch").unwrap();
        f(pointers.as_mut_ptr(), grid.as_ptr(), block.as_ptr());
    }
}

/// Runs an assignment's launch on the host.
fn run_on_host(launch: &GpuLaunch, directory: &std::path::Path) {
    let trailing = launch.trailing();
    let mut params: Vec<&[u8]> = vec![&launch.arguments];
    params.extend(trailing.iter().map(|b| b.as_slice()));
    // A fill sequence runs in one block whose barriers this host loop
    // cannot honour with several threads, and is written for any number
    // of threads, so it runs as one.
    let (grid, block) = if !launch.sequence.is_empty() {
        assert_eq!(launch.shape.grid, [1, 1, 1], "a sequence is one block");
        ([1, 1, 1], [1, 1, 1])
    } else {
        (launch.shape.grid, launch.shape.block)
    };
    run_kernel_on_host(&launch.kernel, &params, grid, block, directory);
}

fn scratch_directory(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "watershed-gpu-on-host-{test}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Assigns `root` (then `then`) into a copy of `start` on the CPU (compiled
/// C, the generic kernel the CUDA one is generated from) and through the
/// GPU launches run on the host; asserts every point equal to the bit and
/// returns the number of launches.
#[allow(clippy::too_many_arguments)]
fn same_as_cpu<L: Location>(
    test: &str,
    start: &SpatialField<L>,
    root: &Arc<Node>,
    fields: &[&dyn BoundField],
    region: Region,
    then: &[MaskedAssignment],
) -> usize {
    let leaf = start.id();
    let mut cpu = SpatialField::<L>::new("target", start.layout().patch(), Device::Cpu).unwrap();
    cpu.values_mut()
        .unwrap()
        .copy_from_slice(start.values().unwrap());
    let options = AssignOptions {
        region,
        backend: Backend::C,
        ..Default::default()
    };
    assign_node_then(&mut cpu, leaf, root, fields, options, then).unwrap();

    let hosted: Vec<HostAsGpu> = fields
        .iter()
        .map(|&field| HostAsGpu {
            field,
            copy: field.cpu_values().unwrap().to_vec(),
        })
        .collect();
    let bound: Vec<&dyn BoundField> = hosted.iter().map(|h| h as &dyn BoundField).collect();
    let mut device = start.values().unwrap().to_vec();
    let target = GpuTarget {
        name: "target",
        layout: start.layout(),
        kind: L::KIND,
        device: Device::Gpu(0),
        pointer: device.as_mut_ptr() as u64,
        len: device.len(),
    };
    let launches = gpu_launches(target, leaf, root, &bound, region, then).unwrap();
    let directory = scratch_directory(test);
    for launch in &launches {
        assert!(launch.waits.is_empty());
        run_on_host(launch, &directory);
    }
    let _ = std::fs::remove_dir_all(&directory);
    let layout = start.layout();
    let want = cpu.values().unwrap();
    for index in layout.allocated() {
        let at = layout.linear_index(index);
        assert!(
            want[at].to_bits() == device[at].to_bits(),
            "{test}: point {index:?}: CPU {:e}, GPU launch {:e}",
            want[at],
            device[at]
        );
    }
    launches.len()
}

fn patch_3d(cells: [usize; 3], ghosts: usize) -> Patch {
    Grid::new(cells, [1.0, 0.8, 1.3], [0.1, -0.2, 0.3])
        .unwrap()
        .whole_domain(ghosts)
}

#[test]
fn stencils_functions_and_parameters_launch_as_the_cpu_computes() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    // Odd sizes: the grid's last blocks are partly outside the box.
    let patch = patch_3d([37, 7, 5], 2);
    let mut rng = Xorshift::new(31);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-2.0, 2.0));
    let gamma = random_field::<CellCentre>("gamma", &patch, &mut rng, |r| r.uniform(0.1, 1.0));
    let start = sentinel_target::<CellCentre>("target", &patch);
    let dt = Parameter::new("dt", 0.375);

    let diffusion = -div(interp(&gamma) * grad(&phi)) + exp(&phi) * dt.expr();
    let fields = diffusion.fields();
    let n = same_as_cpu(
        "diffusion",
        &start,
        diffusion.node(),
        fields,
        Region::Interior,
        &[],
    );
    assert_eq!(n, 1);

    // Math functions, conditions and coordinates (the geometry array).
    let wild = cond(field(&phi).gt(0.5), coordinate::<CellCentre>(0) * 2.0)
        .cond(field(&phi).le(-0.5), coordinate::<CellCentre>(2) + &phi)
        .otherwise(log(&gamma) * sin(&phi) + pow(&gamma, &phi) - tanh(&phi));
    let fields = wild.fields();
    same_as_cpu(
        "functions",
        &start,
        wild.node(),
        fields,
        Region::InteriorAndGhosts(1),
        &[],
    );

    // A face target with its own strides.
    let face_start = sentinel_target::<XFace>("flux", &patch);
    let flux = interp(&gamma) * grad(&phi);
    let flux_x = flux.x.clone().expect("a 3-D patch has x faces");
    let fields = flux_x.fields();
    same_as_cpu(
        "face",
        &face_start,
        flux_x.node(),
        fields,
        Region::Interior,
        &[],
    );
}

#[test]
fn in_place_updates_and_boundary_modifiers_launch_as_the_cpu_computes() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let patch = patch_3d([33, 6, 4], 1);
    let mut rng = Xorshift::new(32);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-2.0, 2.0));
    let u = random_field::<CellCentre>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let id = u.id();
    let me = || Expr::<CellCentre>::symbol(id, "u");
    // u = u + 0.1 lap(phi), then a zero-gradient wall on -x (ghosts read
    // the first interior column) and a Dirichlet value on +y.
    let update = me() + laplacian(&phi) * 0.1;
    let fields = update.fields();
    let layout = u.layout().clone();
    let mut minus_x = layout.allocated();
    minus_x.lo[0] = -1;
    minus_x.hi[0] = 0;
    let mut plus_y = layout.allocated();
    plus_y.lo[1] = layout.interior().hi[1];
    plus_y.hi[1] = plus_y.lo[1] + 1;
    let then: Vec<MaskedAssignment> = vec![
        (minus_x, shift(me(), [1, 0, 0]).node().clone()),
        (plus_y, (coordinate::<CellCentre>(0) * 0.5).node().clone()),
    ];
    let n = same_as_cpu(
        "in-place",
        &u,
        update.node(),
        fields,
        Region::Interior,
        &then,
    );
    assert_eq!(n, 2, "one launch for the update, one for both modifiers");
}

/// The inter-grid operations of a multigrid V-cycle, as its GPU path
/// launches them: restriction of a fine residual into a coarse right-hand
/// side, and the coarse correction prolongated and added to the fine
/// solution in place, followed by mirror fills of its ghosts.
#[test]
fn restriction_and_prolongation_launch_as_the_cpu_computes() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let fine_grid = Grid::from_spacing([8, 6, 4], [0.1, 0.07, 0.13], [0.0; 3]).unwrap();
    let coarse_grid = Grid::from_spacing([4, 3, 2], [0.2, 0.14, 0.26], [0.0; 3]).unwrap();
    let (fine, coarse) = (fine_grid.whole_domain(1), coarse_grid.whole_domain(1));
    let mut rng = Xorshift::new(61);
    let r = random_field::<CellCentre>("r", &fine, &mut rng, |g| g.uniform(-1.0, 1.0));
    let c = random_field::<CellCentre>("c", &coarse, &mut rng, |g| g.uniform(-1.0, 1.0));
    let b = random_field::<CellCentre>("b", &coarse, &mut rng, |g| g.uniform(-1.0, 1.0));
    let x = random_field::<CellCentre>("x", &fine, &mut rng, |g| g.uniform(-1.0, 1.0));
    let restriction = restrict(&r, [2, 2, 2]);
    let n = same_as_cpu(
        "restrict",
        &b,
        restriction.node(),
        restriction.fields(),
        Region::Interior,
        &[],
    );
    assert_eq!(n, 1);
    let id = x.id();
    let me = || Expr::<CellCentre>::symbol(id, "x");
    let correct = me() + prolongate(&c, [2, 2, 2]);
    // Homogeneous Neumann on -x and Dirichlet 0 on +z: the ghost layer
    // copies, or mirrors the negated, first interior layer.
    let layout = x.layout().clone();
    let mut minus_x = layout.allocated();
    minus_x.hi[0] = 0;
    let mut plus_z = layout.allocated();
    plus_z.lo[2] = layout.interior().hi[2];
    let then: Vec<MaskedAssignment> = vec![
        (minus_x, shift(me(), [1, 0, 0]).node().clone()),
        (plus_z, (-1.0 * shift(me(), [0, 0, -1])).node().clone()),
    ];
    let n = same_as_cpu(
        "prolongate",
        &x,
        correct.node(),
        correct.fields(),
        Region::Interior,
        &then,
    );
    // The +z layer spans the -x ghost column the first fill wrote, so the
    // sequence's order is checked too.
    assert_eq!(n, 2, "the correction, then both fills in one launch");
}

#[test]
fn launches_are_refused_with_the_cpu_paths_errors() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let patch = patch_3d([9, 6, 4], 1);
    let thin = patch_3d([9, 6, 4], 0);
    let mut rng = Xorshift::new(33);
    let phi = random_field::<CellCentre>("phi", &thin, &mut rng, |r| r.uniform(-2.0, 2.0));
    let start = sentinel_target::<CellCentre>("target", &patch);
    let hosted = HostAsGpu {
        field: &phi,
        copy: phi.values().unwrap().to_vec(),
    };
    let mut device = start.values().unwrap().to_vec();
    let target = GpuTarget {
        name: "target",
        layout: start.layout(),
        kind: CellCentre::KIND,
        device: Device::Gpu(0),
        pointer: device.as_mut_ptr() as u64,
        len: device.len(),
    };
    // phi has no ghost layer; a Laplacian over the interior needs one.
    let lap = laplacian(&phi);
    let error = gpu_launches(
        target,
        start.id(),
        lap.node(),
        &[&hosted],
        Region::Interior,
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(error, OperatorError::MissingGhosts { ref field, .. } if field == "phi"),
        "{error:?}"
    );
    // A stencil of the target over the points it writes.
    let me = Expr::<CellCentre>::symbol(start.id(), "target");
    let smear = shift(me, [1, 0, 0]);
    let error =
        gpu_launches(target, start.id(), smear.node(), &[], Region::Interior, &[]).unwrap_err();
    assert!(
        matches!(error, OperatorError::SelfOverlap { ref target, .. } if target == "target"),
        "{error:?}"
    );
    // A box outside the target.
    let outside = IndexBox::new([0, 0, 0], [20, 1, 1]);
    let error = gpu_launches(
        target,
        start.id(),
        field(&phi).node(),
        &[&hosted],
        Region::Box(outside),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(error, OperatorError::RegionOutsideTarget { .. }),
        "{error:?}"
    );
}

/// Reduces `expr` on the CPU and through the GPU reduction run on the
/// host (its fields copied to stand-in device buffers); asserts the same
/// bits and returns the value.
fn reduction_same_as_cpu(
    test: &str,
    expr: &Expr<'_, CellCentre>,
    reduction: Reduction,
    region: ReduceRegion,
) -> f64 {
    let cpu = reduce(expr, reduction, region, Parallelism::Rayon).unwrap();
    let hosted: Vec<HostAsGpu> = expr
        .fields()
        .iter()
        .map(|&field| HostAsGpu {
            field,
            copy: field.cpu_values().unwrap().to_vec(),
        })
        .collect();
    let bound: Vec<&dyn BoundField> = hosted.iter().map(|h| h as &dyn BoundField).collect();
    let launch: GpuReduction = gpu_reduction(
        expr.node(),
        CellCentre::KIND,
        &bound,
        reduction,
        region,
        Device::Gpu(0),
    )
    .unwrap();
    assert!(launch.waits.is_empty());
    let [_, ny, nz] = launch.region.extent();
    assert_eq!(launch.rows(), ny * nz, "{test}: one partial per row");
    // A sentinel in every partial: a row the kernel skipped shows.
    let mut partials = vec![f64::from_bits(0x7ff4_dead_beef_0001); launch.rows()];
    let shape = launch.shape.expect("a non-empty region launches");
    let trailing = launch.trailing(partials.as_mut_ptr() as u64);
    let mut params: Vec<&[u8]> = vec![&launch.arguments];
    params.extend(trailing.iter().map(|b| b.as_slice()));
    let directory = scratch_directory(test);
    run_kernel_on_host(&launch.kernel, &params, shape.grid, shape.block, &directory);
    let _ = std::fs::remove_dir_all(&directory);
    assert!(
        partials
            .iter()
            .all(|p| p.to_bits() != 0x7ff4_dead_beef_0001),
        "{test}: a row was not reduced"
    );
    let gpu = launch.finish(&partials).unwrap();
    assert!(
        gpu.to_bits() == cpu.to_bits(),
        "{test}: {reduction:?} on the CPU {cpu:e}, through the GPU reduction {gpu:e}"
    );
    gpu
}

#[test]
fn reductions_on_the_gpu_give_the_cpus_bits() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    // 600 points along x: two blocks of the CPU's TILE per row, the second
    // partial; 5 x 3 rows, more than one warp of the host shim's block.
    let patch = patch_3d([600, 5, 3], 1);
    let mut rng = Xorshift::new(41);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(-2.0, 2.0));
    let gamma = random_field::<CellCentre>("gamma", &patch, &mut rng, |r| r.uniform(0.1, 1.0));
    let dt = Parameter::new("dt", 0.375);
    let with_stencil = exp(&phi) * dt.expr() + laplacian(&gamma);
    let pointwise = sin(&phi) * &gamma - dt.expr();
    for reduction in [
        Reduction::Sum,
        Reduction::SumOfSquares,
        Reduction::Min,
        Reduction::Max,
    ] {
        reduction_same_as_cpu("stencil", &with_stencil, reduction, ReduceRegion::Interior);
        // Computable: the ghosts too (602 points per row, 7 x 5 rows).
        reduction_same_as_cpu("pointwise", &pointwise, reduction, ReduceRegion::Computable);
    }
    // The sum against a hand-written loop over the interior: the order
    // differs, so to rounding only.
    let sum = reduction_same_as_cpu("sum", &pointwise, Reduction::Sum, ReduceRegion::Interior);
    let (p, g) = (phi.values().unwrap(), gamma.values().unwrap());
    let layout = phi.layout();
    let by_hand: f64 = layout
        .interior()
        .iter()
        .map(|i| {
            let at = layout.linear_index(i);
            p[at].sin() * g[at] - 0.375
        })
        .sum();
    assert!(
        (sum - by_hand).abs() <= 1e-12 * by_hand.abs().max(1.0),
        "{sum} vs {by_hand}"
    );

    // A NaN at one point: the minimum and the maximum are NaN on both.
    let mut holed = random_field::<CellCentre>("holed", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let at = holed.layout().linear_index([517, 2, 1]);
    holed.values_mut().unwrap()[at] = f64::NAN;
    let nan = field(&holed) * 2.0;
    for reduction in [Reduction::Min, Reduction::Max, Reduction::Sum] {
        let value = reduction_same_as_cpu("nan", &nan, reduction, ReduceRegion::Interior);
        assert!(
            value.is_nan(),
            "{reduction:?} of a field holding a NaN is {value}"
        );
    }

    // The host's last step refuses partials of another count, naming the
    // kernel.
    let hosted = HostAsGpu {
        field: &phi,
        copy: phi.values().unwrap().to_vec(),
    };
    let launch = gpu_reduction(
        field(&phi).node(),
        CellCentre::KIND,
        &[&hosted],
        Reduction::Max,
        ReduceRegion::Interior,
        Device::Gpu(0),
    )
    .unwrap();
    let error = launch.finish(&[1.0, 2.0]).unwrap_err();
    assert!(
        matches!(&error, OperatorError::Backend { what, reason }
            if what.contains(&launch.kernel.name) && reason.contains("15 (one per row)")),
        "{error}"
    );

    // Missing ghost layers: the CPU path's error, naming the field.
    let thin = patch_3d([600, 5, 3], 0);
    let bare = random_field::<CellCentre>("bare", &thin, &mut rng, |r| r.uniform(-1.0, 1.0));
    let hosted = HostAsGpu {
        field: &bare,
        copy: bare.values().unwrap().to_vec(),
    };
    let error = gpu_reduction(
        laplacian(&bare).node(),
        CellCentre::KIND,
        &[&hosted],
        Reduction::Sum,
        ReduceRegion::Interior,
        Device::Gpu(0),
    )
    .unwrap_err();
    assert!(
        matches!(&error, OperatorError::MissingGhosts { field, .. } if field == "bare"),
        "{error}"
    );
}

#[test]
fn a_watching_launch_reports_the_cpus_first_point_that_is_not_finite() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let patch = patch_3d([29, 6, 4], 1);
    let mut rng = Xorshift::new(51);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| r.uniform(0.5, 2.0));
    let start = sentinel_target::<CellCentre>("target", &patch);
    let directory = scratch_directory("watching");
    // Runs `expr` watched on the host and checked on the CPU; returns the
    // GPU's point, the CPU's point, and whether the written values agree.
    let run = |expr: &Expr<'_, CellCentre>| -> (Option<[isize; 3]>, Option<[isize; 3]>) {
        let mut cpu = sentinel_target::<CellCentre>("target", &patch);
        let options = AssignOptions {
            backend: Backend::C,
            check_finite: true,
            ..Default::default()
        };
        let cpu_point = match assign_node_then(
            &mut cpu,
            start.id(),
            expr.node(),
            expr.fields(),
            options,
            &[],
        ) {
            Ok(()) => None,
            Err(OperatorError::NotFinite {
                target,
                point,
                value,
            }) => {
                assert_eq!(target, "target");
                assert!(!value.is_finite());
                Some(point)
            }
            Err(other) => panic!("{other}"),
        };
        let hosted: Vec<HostAsGpu> = expr
            .fields()
            .iter()
            .map(|&field| HostAsGpu {
                field,
                copy: field.cpu_values().unwrap().to_vec(),
            })
            .collect();
        let bound: Vec<&dyn BoundField> = hosted.iter().map(|h| h as &dyn BoundField).collect();
        let mut device = start.values().unwrap().to_vec();
        let mut bad = u64::MAX;
        let target = GpuTarget {
            name: "target",
            layout: start.layout(),
            kind: CellCentre::KIND,
            device: Device::Gpu(0),
            pointer: device.as_mut_ptr() as u64,
            len: device.len(),
        };
        let launches = gpu_launches_watching(
            target,
            start.id(),
            expr.node(),
            &bound,
            Region::Interior,
            &[],
            &mut bad as *mut u64 as u64,
        )
        .unwrap();
        assert_eq!(launches.len(), 1);
        run_on_host(&launches[0], &directory);
        if cpu_point.is_none() {
            // Every value finite: the same bits as the CPU, the word untouched.
            assert_eq!(bad, u64::MAX);
            let want = cpu.values().unwrap();
            assert!(
                want.iter()
                    .zip(&device)
                    .all(|(w, g)| w.to_bits() == g.to_bits())
            );
        }
        (launches[0].not_finite_at(bad), cpu_point)
    };
    let (gpu, cpu) = run(&(log(&phi) * 2.0));
    assert_eq!((gpu, cpu), (None, None));
    // log of a negative value is NaN; 1/0 is infinite. Holes at three
    // points; the first in storage order (z, then y, then x) is reported.
    let mut holed = random_field::<CellCentre>("holed", &patch, &mut rng, |r| r.uniform(0.5, 2.0));
    let layout = holed.layout().clone();
    for (point, value) in [([20, 4, 3], -1.0), ([3, 5, 1], 0.0), ([7, 1, 2], -2.0)] {
        holed.values_mut().unwrap()[layout.linear_index(point)] = value;
    }
    let (gpu, cpu) = run(&(log(&holed) + 1.0 / field(&holed)));
    assert_eq!(cpu, Some([3, 5, 1]));
    assert_eq!(gpu, cpu);
    let _ = std::fs::remove_dir_all(&directory);
}

/// Fills of more than 65536 points in all are launches of their own (one
/// block of threads would be slower than a launch over each box), with
/// the CPU's bits either way.
#[test]
fn large_fills_are_launches_of_their_own() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let patch = patch_3d([6, 130, 130], 1);
    let mut rng = Xorshift::new(71);
    let u = random_field::<CellCentre>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let id = u.id();
    let me = || Expr::<CellCentre>::symbol(id, "u");
    let layout = u.layout().clone();
    // Both x sides (132 x 132 points each) and then one y side (8 x 132)
    // reading what the x fills wrote: 35904 points, one sequence.
    let side = |axis: usize, plus: bool| {
        let mut b = layout.allocated();
        if plus {
            b.lo[axis] = layout.interior().hi[axis];
        } else {
            b.hi[axis] = 0;
        }
        b
    };
    let mirror = |axis: usize, d: isize| {
        let mut o = [0; 3];
        o[axis] = d;
        (-1.0 * shift(me(), o)).node().clone()
    };
    let small: Vec<MaskedAssignment> = vec![
        (side(0, false), mirror(0, 1)),
        (side(0, true), mirror(0, -1)),
        (side(1, false), mirror(1, 1)),
    ];
    let update = me() * 0.5;
    let n = same_as_cpu("small", &u, update.node(), &[], Region::Interior, &small);
    assert_eq!(n, 2, "the update, then one sequence");
    // With a z side (8 x 132) and the x sides once more: 71808 points,
    // past 65536, so one launch per fill after the update.
    let mut large = small.clone();
    large.push((side(2, false), mirror(2, 1)));
    large.extend(small[..2].iter().cloned());
    let n = same_as_cpu("large", &u, update.node(), &[], Region::Interior, &large);
    assert_eq!(n, 1 + large.len(), "the update, then one launch per fill");
}
