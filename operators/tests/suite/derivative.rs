//! The centred first derivative on every location: exact for quadratics,
//! second-order for trigonometric functions, and against a hand-written
//! reference loop on a face field.

use watershed_fields::{Device, Grid, Location, SpatialField, XFace, YFace};
use watershed_operators::{Assign, derivative};

fn fill<L: Location>(f: &mut SpatialField<L>, g: impl Fn([f64; 3]) -> f64) {
    let layout = f.layout().clone();
    let v = f.values_mut().unwrap();
    for i in layout.allocated() {
        v[layout.linear_index(i)] = g(layout.coordinate(i));
    }
}

fn max_error<L: Location>(f: &SpatialField<L>, g: impl Fn([f64; 3]) -> f64) -> f64 {
    let layout = f.layout();
    let v = f.values().unwrap();
    layout
        .interior()
        .iter()
        .map(|i| (v[layout.linear_index(i)] - g(layout.coordinate(i))).abs())
        .fold(0.0, f64::max)
}

#[test]
fn the_derivative_of_a_quadratic_is_exact_on_faces() {
    let patch = Grid::new([7, 5, 3], [1.0, 2.0, 3.0], [0.1, -0.3, 0.0])
        .unwrap()
        .whole_domain(1);
    let mut u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    fill(&mut u, |[x, y, z]| x * x + 3.0 * x * y - y * y + z);
    let mut du = SpatialField::<XFace>::new("du", &patch, Device::Cpu).unwrap();
    for (axis, exact) in [
        (
            0,
            Box::new(|[x, y, _]: [f64; 3]| 2.0 * x + 3.0 * y) as Box<dyn Fn([f64; 3]) -> f64>,
        ),
        (1, Box::new(|[x, y, _]: [f64; 3]| 3.0 * x - 2.0 * y)),
        (2, Box::new(|_: [f64; 3]| 1.0)),
    ] {
        du.assign(derivative(axis, &u)).unwrap();
        let error = max_error(&du, exact);
        assert!(error < 1e-12, "axis {axis}: {error}");
    }
}

#[test]
fn the_derivative_converges_at_second_order() {
    let mut errors = Vec::new();
    for n in [16, 32, 64] {
        let patch = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])
            .unwrap()
            .whole_domain(1);
        let mut v = SpatialField::<YFace>::new("v", &patch, Device::Cpu).unwrap();
        fill(&mut v, |[x, y, _]| (2.0 * x).sin() * (3.0 * y).cos());
        let mut dv = SpatialField::<YFace>::new("dv", &patch, Device::Cpu).unwrap();
        dv.assign(derivative(1, &v)).unwrap();
        errors.push(max_error(&dv, |[x, y, _]| {
            -3.0 * (2.0 * x).sin() * (3.0 * y).sin()
        }));
    }
    for pair in errors.windows(2) {
        let p = (pair[0] / pair[1]).log2();
        assert!((p - 2.0).abs() < 0.1, "order {p} from {errors:?}");
    }
}

#[test]
fn the_derivative_matches_a_reference_loop() {
    let patch = Grid::new([9, 7, 5], [1.0, 0.7, 0.5], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    fill(&mut u, |[x, y, z]| (x * 7.1).sin() + (y * z * 3.3).cos());
    let mut du = SpatialField::<XFace>::new("du", &patch, Device::Cpu).unwrap();
    du.assign(derivative(2, &u)).unwrap();
    let layout = u.layout().clone();
    let h = patch.grid().spacing()[2];
    let (a, b) = (u.values().unwrap(), du.values().unwrap());
    for i in layout.interior() {
        let up = layout.linear_index([i[0], i[1], i[2] + 1]);
        let down = layout.linear_index([i[0], i[1], i[2] - 1]);
        let reference = (a[up] - a[down]) / (2.0 * h);
        let got = b[layout.linear_index(i)];
        assert!(
            (got - reference).abs() <= 1e-12 * reference.abs().max(1.0),
            "{i:?}: {got} vs {reference}"
        );
    }
}
