//! The language never turns an invalid input into a plausible number:
//! axis numbers are checked, algebraic folding keeps IEEE results for
//! non-finite values, explicit regions are checked against the target, and
//! stencils along an axis with one cell (2D, 1D) are defined, not read out
//! of bounds.

use watershed_fields::{CellCentre, Device, Grid, IndexBox, SpatialField, XFace, ZFace};
use watershed_operators::{
    Assign, AssignOptions, OperatorError, Region, coordinate, derivative, div, field, grad,
    gradient, interp, interpolate_to_face, laplacian, log,
};

fn cells(n: [usize; 3], ghosts: usize, value: f64) -> SpatialField<CellCentre> {
    let patch = Grid::new(n, [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(ghosts);
    let mut f = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
    f.fill(value).unwrap();
    f
}

fn interior(f: &SpatialField<CellCentre>) -> Vec<f64> {
    let layout = f.layout().clone();
    let values = f.values().unwrap();
    layout
        .interior()
        .iter()
        .map(|i| values[layout.linear_index(i)])
        .collect()
}

#[test]
fn axis_numbers_out_of_range_are_errors() {
    let phi = cells([4, 4, 4], 1, 1.0);
    let mut out = cells([4, 4, 4], 1, 0.0);
    for (what, result) in [
        ("d", out.assign(derivative(3, &phi))),
        ("coordinate", out.assign(coordinate::<CellCentre>(7) + 1.0)),
    ] {
        let error = result.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(&error, OperatorError::InvalidAxis { axis, .. } if *axis == 3 || *axis == 7),
            "{what}: {error:?}"
        );
        assert!(message.contains(what), "{message}");
    }
    // Printing such an expression never panics.
    assert!(derivative(9, &phi).to_string().contains("axis 9"));
}

#[test]
fn folding_never_hides_a_non_finite_value() {
    let psi = cells([4, 3, 2], 1, 1.0);
    let negative = cells([4, 3, 2], 1, -1.0);
    let infinite = cells([4, 3, 2], 1, f64::INFINITY);
    let nan = cells([4, 3, 2], 1, f64::NAN);
    let mut out = cells([4, 3, 2], 1, 0.0);
    // psi + 0 * log(phi) with phi < 0: log gives NaN, 0 * NaN is NaN.
    out.assign(field(&psi) + 0.0 * log(&negative)).unwrap();
    assert!(interior(&out).iter().all(|v| v.is_nan()));
    // phi - phi with phi = inf is NaN, not 0.
    out.assign(field(&infinite) - field(&infinite)).unwrap();
    assert!(interior(&out).iter().all(|v| v.is_nan()));
    // (psi + nan) - nan keeps the NaN.
    out.assign((field(&psi) + field(&nan)) - field(&nan))
        .unwrap();
    assert!(interior(&out).iter().all(|v| v.is_nan()));
    // A product whose factor has weight 0 is not rescaled by 1/0.
    out.assign((0.0 * field(&psi)) * field(&psi)).unwrap();
    assert!(interior(&out).iter().all(|&v| v == 0.0));
    out.assign((0.0 * field(&infinite)) * field(&psi)).unwrap();
    assert!(interior(&out).iter().all(|v| v.is_nan()));
    // Finite values still fold: phi - phi is exactly 0.
    out.assign(field(&psi) - field(&psi)).unwrap();
    assert!(interior(&out).iter().all(|&v| v == 0.0));
}

#[test]
fn an_explicit_region_outside_the_target_is_an_error() {
    let phi = cells([4, 4, 1], 1, 1.0);
    let mut out = cells([4, 4, 1], 1, 0.0);
    let options = AssignOptions {
        region: Region::Box(IndexBox::new([-2, 0, 0], [4, 4, 1])),
        ..Default::default()
    };
    let error = out.assign_with(field(&phi) * 2.0, options).unwrap_err();
    assert!(
        matches!(&error, OperatorError::RegionOutsideTarget { target, .. } if target == "phi"),
        "{error:?}"
    );
    // Inside the allocation, the inputs' ghosts are still checked.
    let options = AssignOptions {
        region: Region::Box(IndexBox::new([-1, 0, 0], [4, 4, 1])),
        ..Default::default()
    };
    let error = out.assign_with(laplacian(&phi), options).unwrap_err();
    assert!(
        matches!(error, OperatorError::MissingGhosts { .. }),
        "{error:?}"
    );
}

/// On a 2D grid (one cell along z, no z ghosts) the z stencils are defined:
/// differences vanish and interpolation is the identity, so explicit z
/// operators give the 2D answer instead of reading out of bounds.
#[test]
fn stencils_along_an_axis_with_one_cell_are_defined() {
    let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut p = SpatialField::<CellCentre>::new("p", &patch, Device::Cpu).unwrap();
    let layout = p.layout().clone();
    let values = p.values_mut().unwrap();
    for i in layout.allocated().iter() {
        let [x, y, _] = layout.coordinate(i);
        values[layout.linear_index(i)] = x * x + 3.0 * y * y;
    }
    let mut z = SpatialField::<ZFace>::new("gz", &patch, Device::Cpu).unwrap();
    z.assign(gradient::<ZFace>(&p)).unwrap();
    assert!(z.values().unwrap().iter().all(|&v| v == 0.0));
    z.assign(interpolate_to_face::<ZFace>(&p)).unwrap();
    let zl = z.layout().clone();
    for i in zl.interior().iter() {
        assert_eq!(
            z.values().unwrap()[zl.linear_index(i)],
            p.values().unwrap()[layout.linear_index(i)]
        );
    }
    let mut out = SpatialField::<CellCentre>::new("out", &patch, Device::Cpu).unwrap();
    out.assign(
        div(interp(&p) * grad(&p))
            + watershed_operators::divergence::<ZFace>(
                gradient::<ZFace>(&p) * interpolate_to_face::<ZFace>(&p),
            ),
    )
    .unwrap();
    let mut reference = SpatialField::<CellCentre>::new("reference", &patch, Device::Cpu).unwrap();
    reference.assign(div(interp(&p) * grad(&p))).unwrap();
    assert_eq!(interior(&out), interior(&reference));
    let mut x = SpatialField::<XFace>::new("x", &patch, Device::Cpu).unwrap();
    x.assign(gradient::<XFace>(&p)).unwrap();
}
