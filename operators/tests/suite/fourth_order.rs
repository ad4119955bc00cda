//! The fourth-order staggered operators and `relabel`: each against a
//! hand-written loop on random data (index arithmetic here, never the
//! library's evaluator), and against manufactured solutions on three
//! periodic grids, where the observed order must be at least 3.8.

use crate::common;

use common::shift;
use common::*;
use std::f64::consts::PI;
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Location, Patch, SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::*;

fn signed(rng: &mut Xorshift) -> f64 {
    rng.uniform(-1.0, 1.0)
}

/// `c[i + d e_axis]`.
fn at_offset<L: Location>(f: &SpatialField<L>, i: [isize; 3], axis: usize, d: isize) -> f64 {
    at(f, shift(i, axis, d))
}

fn check_against_loops<F: FaceLocation>(patch: &Patch, rng: &mut Xorshift) {
    let axis = F::AXIS;
    let h = patch.grid().spacing()[axis];
    let cells = random_field::<CellCentre>("cells", patch, rng, signed);
    let faces = random_field::<F>("faces", patch, rng, signed);
    let mut on_faces = sentinel_target::<F>("out faces", patch);
    let mut on_cells = sentinel_target::<CellCentre>("out cells", patch);
    let face_interior = on_faces.layout().interior();
    let cell_interior = on_cells.layout().interior();

    on_faces.assign(gradient4::<F>(&cells)).unwrap();
    check_region("gradient4", &on_faces, &face_interior, |i| {
        let c = |d| at_offset(&cells, i, axis, d);
        let value = (27.0 * (c(0) - c(-1)) - (c(1) - c(-2))) / (24.0 * h);
        (
            value,
            (27.0 * (c(0).abs() + c(-1).abs()) + c(1).abs() + c(-2).abs()) / h,
        )
    });
    on_faces.fill(SENTINEL).unwrap();
    on_faces.assign(interpolate_to_face4::<F>(&cells)).unwrap();
    check_region("interpolate_to_face4", &on_faces, &face_interior, |i| {
        let c = |d| at_offset(&cells, i, axis, d);
        let value = (9.0 * (c(-1) + c(0)) - (c(-2) + c(1))) / 16.0;
        (value, c(-1).abs() + c(0).abs() + c(-2).abs() + c(1).abs())
    });
    on_cells.assign(divergence4::<F>(&faces)).unwrap();
    check_region("divergence4", &on_cells, &cell_interior, |i| {
        let a = |d| at_offset(&faces, i, axis, d);
        let value = (27.0 * (a(1) - a(0)) - (a(2) - a(-1))) / (24.0 * h);
        (
            value,
            (27.0 * (a(1).abs() + a(0).abs()) + a(2).abs() + a(-1).abs()) / h,
        )
    });
    on_cells.fill(SENTINEL).unwrap();
    on_cells.assign(interpolate_to_cell4::<F>(&faces)).unwrap();
    check_region("interpolate_to_cell4", &on_cells, &cell_interior, |i| {
        let a = |d| at_offset(&faces, i, axis, d);
        let value = (9.0 * (a(0) + a(1)) - (a(-1) + a(2))) / 16.0;
        (value, a(-1).abs() + a(0).abs() + a(1).abs() + a(2).abs())
    });
}

#[test]
fn fourth_order_stencils_equal_hand_written_loops() {
    let mut rng = Xorshift::new(46);
    for _ in 0..6 {
        for touches in [true, false] {
            let patch = random_patch_with_plus_x(&mut rng, GhostWidth::uniform(2), touches);
            check_against_loops::<XFace>(&patch, &mut rng);
            check_against_loops::<YFace>(&patch, &mut rng);
            check_against_loops::<ZFace>(&patch, &mut rng);
            // The five-point Laplacian on cells and on x faces.
            let cells = random_field::<CellCentre>("c", &patch, &mut rng, signed);
            let mut out = sentinel_target::<CellCentre>("lap4", &patch);
            out.assign(laplacian4(&cells)).unwrap();
            let spacing = patch.grid().spacing();
            let interior = out.layout().interior();
            check_region("laplacian4", &out, &interior, |i| {
                let mut value = 0.0;
                let mut scale = 0.0;
                for (axis, h) in spacing.iter().enumerate() {
                    let c = |d| at_offset(&cells, i, axis, d);
                    let w = 1.0 / (12.0 * h * h);
                    value += w * (-c(-2) + 16.0 * c(-1) - 30.0 * c(0) + 16.0 * c(1) - c(2));
                    scale += w * 64.0 * c(0).abs().max(c(1).abs()).max(c(-1).abs()).max(1.0);
                }
                (value, scale)
            });
        }
    }
}

#[test]
fn relabel_reads_the_same_index_as_another_location() {
    let mut rng = Xorshift::new(7);
    let patch = random_patch_with_plus_x(&mut rng, GhostWidth::uniform(1), true);
    let v = random_field::<YFace>("v", &patch, &mut rng, signed);
    let mut out = sentinel_target::<XFace>("v on x faces", &patch);
    // v averaged along x onto the xy edges numbered like the x faces.
    out.assign(0.5 * (shift_expr(relabel::<YFace, XFace>(&v)) + relabel::<YFace, XFace>(&v)))
        .unwrap();
    let interior = out.layout().interior();
    check_region("relabel", &out, &interior, |i| {
        let (a, b) = (at(&v, shift(i, 0, -1)), at(&v, i));
        (0.5 * (a + b), a.abs() + b.abs())
    });
}

fn shift_expr(e: Expr<'_, XFace>) -> Expr<'_, XFace> {
    watershed_operators::shift(e, [-1, 0, 0])
}

/// The max-norm error of `op` applied to `sin(k x + phase)` sampled at its
/// source points against the exact value at the target points, on an
/// `n`-cell periodic grid along `axis` (four cells on the others).
fn manufactured_error<S: Location, D: Location>(
    n: usize,
    axis: usize,
    op: impl Fn(&SpatialField<S>) -> Expr<'_, D>,
    exact: impl Fn(f64) -> f64,
) -> f64 {
    let mut cells = [4; 3];
    cells[axis] = n;
    let grid = Grid::new(cells, [2.0 * PI; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true; 3]);
    let patch = grid.whole_domain(3);
    let f = |x: f64| (2.0 * x + 0.3).sin();
    let mut source = SpatialField::<S>::new("s", &patch, Device::Cpu).unwrap();
    let layout = source.layout().clone();
    {
        let values = source.values_mut().unwrap();
        for index in layout.allocated() {
            values[layout.linear_index(index)] = f(layout.coordinate(index)[axis]);
        }
    }
    let mut target = SpatialField::<D>::new("t", &patch, Device::Cpu).unwrap();
    target.assign(op(&source)).unwrap();
    let layout = target.layout().clone();
    let values = target.values().unwrap();
    layout
        .interior()
        .iter()
        .map(|i| (values[layout.linear_index(i)] - exact(layout.coordinate(i)[axis])).abs())
        .fold(0.0, f64::max)
}

fn observed_orders(errors: &[f64]) -> Vec<f64> {
    errors.windows(2).map(|p| (p[0] / p[1]).log2()).collect()
}

fn assert_fourth_order(name: &str, errors: [f64; 3]) {
    let orders = observed_orders(&errors);
    eprintln!("{name}: errors {errors:?}, orders {orders:?}");
    for p in orders {
        assert!(p >= 3.8, "{name}: observed order {p} from {errors:?}");
    }
}

fn fourth_order_along<F: FaceLocation>() {
    let axis = F::AXIS;
    let f = |x: f64| (2.0 * x + 0.3).sin();
    let df = |x: f64| 2.0 * (2.0 * x + 0.3).cos();
    let d2f = |x: f64| -4.0 * (2.0 * x + 0.3).sin();
    let grids = [16, 32, 64];
    let run = |op: &dyn Fn(usize) -> f64| grids.map(op);
    assert_fourth_order(
        &format!("gradient4 {}", F::KIND),
        run(&|n| manufactured_error::<CellCentre, F>(n, axis, |c| gradient4::<F>(c), df)),
    );
    assert_fourth_order(
        &format!("divergence4 {}", F::KIND),
        run(&|n| manufactured_error::<F, CellCentre>(n, axis, |a| divergence4::<F>(a), df)),
    );
    assert_fourth_order(
        &format!("interpolate_to_face4 {}", F::KIND),
        run(&|n| manufactured_error::<CellCentre, F>(n, axis, |c| interpolate_to_face4::<F>(c), f)),
    );
    assert_fourth_order(
        &format!("interpolate_to_cell4 {}", F::KIND),
        run(&|n| manufactured_error::<F, CellCentre>(n, axis, |a| interpolate_to_cell4::<F>(a), f)),
    );
    assert_fourth_order(
        &format!("laplacian4 along {axis}"),
        run(&|n| manufactured_error::<F, F>(n, axis, |a| laplacian4(a), d2f)),
    );
    // The second-order operators on the same grids fall at order 2: the
    // check above can tell the orders apart.
    let second = run(&|n| manufactured_error::<CellCentre, F>(n, axis, |c| gradient::<F>(c), df));
    for p in observed_orders(&second) {
        assert!((p - 2.0).abs() < 0.1, "gradient: order {p}");
    }
}

#[test]
fn fourth_order_operators_converge_at_fourth_order() {
    fourth_order_along::<XFace>();
    fourth_order_along::<YFace>();
    fourth_order_along::<ZFace>();
}
