//! After its first steps a solver allocates no field memory per step: no
//! block from the global CPU field pool, and no heap allocation the size
//! of a field (a copy of a field into a `Vec`, a scratch field made per
//! call). A global allocator that wraps the system's records the largest
//! heap allocation; small bookkeeping (a few vectors of node ids per
//! graph execution) is allowed and reported.
//!
//! With two threads the scheduler puts nodes on whichever thread is free,
//! so on a loaded machine a large kernel may run on a thread that has
//! not run it before: the evaluator's register buffers must come from a
//! pool that does not grow then (with per-thread pools this test failed
//! now and then under load).
//!
//! One test in its own binary, so no other test allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use watershed_exprgraph::{ExecutionMode, Tag};
use watershed_fields::{Device, Grid, LocationKind, MemoryPool, PoolStatistics, XFace, YFace};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, ConvectiveScheme, Diffusivity,
    IncompressibleFlowBuilder, TimeIntegrator, TransportEquation, TransportSolverBuilder,
};

/// The system allocator, counting allocations and reallocations and
/// keeping the largest size asked for.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LARGEST: AtomicU64 = AtomicU64::new(0);

fn count(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    LARGEST.fetch_max(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are only atomic updates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Where counting starts (a place for a debugger's breakpoint: break here,
/// then on `malloc`, to see what allocates).
#[inline(never)]
fn counting_starts() {
    std::hint::black_box(());
}

/// What `steps` calls of `step` cost in memory, after `warm_up` calls.
struct Cost {
    /// Heap allocations and reallocations.
    heap_allocations: u64,
    /// The largest heap allocation, bytes.
    largest_heap_bytes: u64,
    /// The global CPU pool before and after.
    pool_before: PoolStatistics,
    pool_after: PoolStatistics,
}

fn cost_of(warm_up: usize, steps: usize, mut step: impl FnMut()) -> Cost {
    let pool = MemoryPool::global(Device::Cpu).unwrap();
    for _ in 0..warm_up {
        step();
    }
    let pool_before = pool.statistics();
    counting_starts();
    let heap = ALLOCATIONS.load(Ordering::Relaxed);
    LARGEST.store(0, Ordering::Relaxed);
    for _ in 0..steps {
        step();
    }
    Cost {
        heap_allocations: ALLOCATIONS.load(Ordering::Relaxed) - heap,
        largest_heap_bytes: LARGEST.load(Ordering::Relaxed),
        pool_before,
        pool_after: pool.statistics(),
    }
}

/// Asserts that `cost` took no pool block and no heap allocation of
/// `field_bytes` or more.
fn assert_no_field_allocation(cost: &Cost, field_bytes: u64, what: &str) {
    let (before, after) = (&cost.pool_before, &cost.pool_after);
    assert_eq!(
        (after.misses, after.blocks_active, after.bytes_total),
        (before.misses, before.blocks_active, before.bytes_total),
        "{what}: pool blocks taken from the system or still in use after the steps"
    );
    assert!(
        cost.largest_heap_bytes < field_bytes,
        "{what}: a heap allocation of {} bytes per step (a field is {field_bytes} bytes)",
        cost.largest_heap_bytes
    );
    eprintln!(
        "{what}: {} heap allocations over the steps, the largest {} bytes; pool hits {}",
        cost.heap_allocations,
        cost.largest_heap_bytes,
        after.hits - before.hits
    );
}

#[test]
fn solvers_allocate_no_field_memory_per_step_after_the_first() {
    let (nx, ny) = (64usize, 48usize);
    let grid = Grid::new([nx, ny, 1], [1.0, 0.75, 1.0], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    // Cell and face fields have at most (nx + 3) (ny + 3) points with one
    // ghost layer; a quarter of a field is already more than any
    // bookkeeping vector of these solvers.
    let field_bytes = ((nx + 2) * (ny + 2) * 8 / 4) as u64;
    for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
        // A transport equation with diffusion, upwind convection by a
        // velocity given as placeholders, and Dirichlet/Neumann walls.
        let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
        let walls = BoundaryConditions::all(BoundaryCondition::Neumann(0.0))
            .with(Side::MINUS_X, BoundaryCondition::Dirichlet(1.0));
        let mut builder = TransportSolverBuilder::new(&patch)
            .integrator(TimeIntegrator::SspRk3)
            .mode(mode)
            .equation(
                TransportEquation::new("Y")
                    .diffusion(Diffusivity::Constant(0.01))
                    .convection(velocity.clone(), ConvectiveScheme::Upwind)
                    .boundary_conditions(walls),
            );
        builder
            .factory_mut()
            .placeholder(velocity[0].clone(), LocationKind::XFace)
            .unwrap();
        builder
            .factory_mut()
            .placeholder(velocity[1].clone(), LocationKind::YFace)
            .unwrap();
        let mut solver = builder.build().unwrap();
        solver
            .graph()
            .with_field_mut::<XFace, _>(&velocity[0], |u| u.fill(0.3).unwrap())
            .unwrap();
        solver
            .graph()
            .with_field_mut::<YFace, _>(&velocity[1], |v| v.fill(-0.2).unwrap())
            .unwrap();
        solver
            .set_initial_condition("Y", |[x, y, _]| (x * 3.0).sin() * y)
            .unwrap();
        let cost = cost_of(3, 10, || {
            let dt = solver.stable_time_step(0.5, 0.25).unwrap();
            solver.step(dt).unwrap();
        });
        assert_no_field_allocation(&cost, field_bytes, &format!("transport, {mode:?}"));

        // The lid-driven cavity: momentum graph, projection, multigrid.
        let lid = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))
            .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0));
        let mut flow = IncompressibleFlowBuilder::new(&patch, 0.01)
            .mode(mode)
            .velocity_conditions(0, lid)
            .velocity_conditions(
                1,
                BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0)),
            )
            .build()
            .unwrap();
        let cost = cost_of(3, 10, || {
            let dt = flow.stable_time_step(0.5, 0.25).unwrap();
            flow.step(dt).unwrap();
        });
        assert!(flow.last_projection().iterations > 0);
        assert_no_field_allocation(
            &cost,
            field_bytes,
            &format!("incompressible flow, {mode:?}"),
        );
    }
}
