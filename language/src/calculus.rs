//! Stencil operators of the typed front end, in directional form
//! (`gradient::<XFace>(phi)`) and vector form (`div(interp(gamma) * grad(phi))`),
//! so user code reads like the mathematics. Weights come from the grid
//! spacing when the expression is evaluated, so the same expression works on
//! any grid.

use crate::expr::{Bindings, Expr, IntoExpr};
use crate::ir::Node;
use crate::pointwise::Limiter;
use crate::stencil::StencilOp;
use smallvec::SmallVec;
use std::ops::{Add, Mul, Neg, Sub};
use watershed_fields::{CellCentre, Location, XFace, YFace, ZFace};

/// The face locations, with the axis they are normal to.
pub trait FaceLocation: Location {
    /// 0, 1, 2 for x, y, z faces.
    const AXIS: usize;
}
impl FaceLocation for XFace {
    const AXIS: usize = 0;
}
impl FaceLocation for YFace {
    const AXIS: usize = 1;
}
impl FaceLocation for ZFace {
    const AXIS: usize = 2;
}

fn stencil<'a, M: Location>(
    op: StencilOp,
    args: SmallVec<[(std::sync::Arc<Node>, Bindings<'a>); 2]>,
) -> Expr<'a, M> {
    let mut fields: Bindings<'a> = Vec::new();
    let mut nodes = SmallVec::new();
    for (node, bound) in args {
        for f in bound {
            if !fields
                .iter()
                .any(|g: &&dyn crate::BoundField| g.id() == f.id())
            {
                fields.push(f);
            }
        }
        nodes.push(node);
    }
    Expr::new(Node::Stencil { op, args: nodes }, fields)
}

fn unary_stencil<'a, S: Location, D: Location>(
    op: StencilOp,
    value: impl IntoExpr<'a, S>,
) -> Expr<'a, D> {
    let e = value.into_expr();
    stencil(op, SmallVec::from_iter([(e.node, e.fields)]))
}

/// Gradient of a cell field on the faces normal to `F::AXIS`.
pub fn gradient<'a, F: FaceLocation>(cells: impl IntoExpr<'a, CellCentre>) -> Expr<'a, F> {
    unary_stencil(StencilOp::Gradient { axis: F::AXIS }, cells)
}

/// Divergence (the derivative along `F::AXIS`) of a face field, at cell centres.
pub fn divergence<'a, F: FaceLocation>(faces: impl IntoExpr<'a, F>) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::Divergence { axis: F::AXIS }, faces)
}

/// Linear interpolation of a cell field to the faces normal to `F::AXIS`.
pub fn interpolate_to_face<'a, F: FaceLocation>(
    cells: impl IntoExpr<'a, CellCentre>,
) -> Expr<'a, F> {
    unary_stencil(StencilOp::InterpolateToFace { axis: F::AXIS }, cells)
}

/// Linear interpolation of a face field to cell centres.
pub fn interpolate_to_cell<'a, F: FaceLocation>(
    faces: impl IntoExpr<'a, F>,
) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::InterpolateToCell { axis: F::AXIS }, faces)
}

/// Centred first derivative along `axis` (0, 1, 2), at the argument's own
/// location: `(a[i+1] - a[i-1]) / (2 h)`.
pub fn derivative<'a, L: Location>(axis: usize, value: impl IntoExpr<'a, L>) -> Expr<'a, L> {
    unary_stencil(StencilOp::CentredDerivative { axis }, value)
}

/// Second-order Laplacian over the active axes.
pub fn laplacian<'a, L: Location>(value: impl IntoExpr<'a, L>) -> Expr<'a, L> {
    unary_stencil(StencilOp::Laplacian, value)
}

/// Fourth-order gradient of a cell field on the faces normal to `F::AXIS`:
/// `(27 (c[i] - c[i-1]) - (c[i+1] - c[i-2])) / (24 h)` (two cells each side).
pub fn gradient4<'a, F: FaceLocation>(cells: impl IntoExpr<'a, CellCentre>) -> Expr<'a, F> {
    unary_stencil(StencilOp::Gradient4 { axis: F::AXIS }, cells)
}

/// Fourth-order divergence (derivative along `F::AXIS`) of a face field, at
/// cell centres: `(27 (a[i+1] - a[i]) - (a[i+2] - a[i-1])) / (24 h)`.
pub fn divergence4<'a, F: FaceLocation>(faces: impl IntoExpr<'a, F>) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::Divergence4 { axis: F::AXIS }, faces)
}

/// Fourth-order interpolation of a cell field to the faces normal to
/// `F::AXIS`: `(9 (c[i-1] + c[i]) - (c[i-2] + c[i+1])) / 16`.
pub fn interpolate_to_face4<'a, F: FaceLocation>(
    cells: impl IntoExpr<'a, CellCentre>,
) -> Expr<'a, F> {
    unary_stencil(StencilOp::InterpolateToFace4 { axis: F::AXIS }, cells)
}

/// Fourth-order interpolation of a face field to cell centres:
/// `(9 (a[i] + a[i+1]) - (a[i-1] + a[i+2])) / 16`.
pub fn interpolate_to_cell4<'a, F: FaceLocation>(
    faces: impl IntoExpr<'a, F>,
) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::InterpolateToCell4 { axis: F::AXIS }, faces)
}

/// Fourth-order Laplacian over the active axes (five points per axis).
pub fn laplacian4<'a, L: Location>(value: impl IntoExpr<'a, L>) -> Expr<'a, L> {
    unary_stencil(StencilOp::Laplacian4, value)
}

/// `value`'s points at the same indices, read as location `D`
/// ([`StencilOp::Relabel`]): no arithmetic. It lets staggered operators
/// combine two locations, e.g. a y-face velocity averaged along x onto
/// the edges that an x-face index also numbers:
///
/// ```
/// use watershed_fields::{Device, Grid, SpatialField, XFace, YFace};
/// use watershed_language::{field, relabel, shift};
/// let patch = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let v = SpatialField::<YFace>::new("v", &patch, Device::Cpu)?;
/// let v_x = relabel::<YFace, XFace>(&v);
/// // v averaged along x to the edge (x_i, y_j): (v[i-1, j] + v[i, j]) / 2.
/// let at_edges = 0.5 * (shift(v_x.clone(), [-1, 0, 0]) + v_x);
/// assert!(at_edges.node().to_string().contains("as_XFace"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn relabel<'a, S: Location, D: Location>(value: impl IntoExpr<'a, S>) -> Expr<'a, D> {
    unary_stencil(StencilOp::Relabel { to: D::KIND }, value)
}

/// `value` read at a fixed `offset` (x, y, z) from each point: `a[i + offset]`.
/// Boundary conditions use it for mirror partners and periodic images.
pub fn shift<'a, L: Location>(value: impl IntoExpr<'a, L>, offset: [isize; 3]) -> Expr<'a, L> {
    unary_stencil(StencilOp::Shift { offset }, value)
}

/// Restriction of the cell field `fine`, on a grid `ratio` (1 or 2 per
/// axis) times finer than the target's, to the target's grid: each coarse
/// cell gets the mean of its children. `fine` must be a field (not an
/// expression), and its patch must refine the target's by `ratio`
/// ([`OperatorError::InterGrid`](crate::OperatorError::InterGrid) otherwise).
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_language::restrict;
/// let fine_grid = Grid::new([8, 8, 1], [1.0, 1.0, 1.0], [0.0; 3])?;
/// let fine = SpatialField::<CellCentre>::new("r", &fine_grid.whole_domain(1), Device::Cpu)?;
/// // Assigned to a field on the 4 x 4 grid (`watershed_operators::Assign`),
/// // each coarse cell gets the mean of its 2 x 2 children.
/// let coarse = restrict(&fine, [2, 2, 1]);
/// assert!(coarse.node().to_string().contains("restrict"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn restrict<'a>(
    fine: impl IntoExpr<'a, CellCentre>,
    ratio: [usize; 3],
) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::Restrict { ratio }, fine)
}

/// (Bi/tri)linear prolongation of the cell field `coarse`, on a grid
/// `ratio` (1 or 2 per axis) times coarser than the target's, to the
/// target's grid: per refined axis, 3/4 of the parent cell and 1/4 of its
/// neighbour on the fine cell's side. `coarse` must be a field whose ghost
/// layer along refined axes holds its boundary values (the multigrid
/// correction's boundary conditions).
pub fn prolongate<'a>(
    coarse: impl IntoExpr<'a, CellCentre>,
    ratio: [usize; 3],
) -> Expr<'a, CellCentre> {
    unary_stencil(StencilOp::Prolongate { ratio }, coarse)
}

/// Upwind interpolation of `cells` to the faces normal to `F::AXIS` by the
/// sign of the face `velocity`.
pub fn upwind<'a, F: FaceLocation>(
    velocity: impl IntoExpr<'a, F>,
    cells: impl IntoExpr<'a, CellCentre>,
) -> Expr<'a, F> {
    let (v, c) = (velocity.into_expr(), cells.into_expr());
    stencil(
        StencilOp::Upwind { axis: F::AXIS },
        SmallVec::from_iter([(v.node, v.fields), (c.node, c.fields)]),
    )
}

/// Flux-limited interpolation of `cells` to the faces normal to `F::AXIS`,
/// upwinded by the face `velocity`.
pub fn limited<'a, F: FaceLocation>(
    limiter: Limiter,
    velocity: impl IntoExpr<'a, F>,
    cells: impl IntoExpr<'a, CellCentre>,
) -> Expr<'a, F> {
    let (v, c) = (velocity.into_expr(), cells.into_expr());
    stencil(
        StencilOp::Limited {
            axis: F::AXIS,
            limiter,
        },
        SmallVec::from_iter([(v.node, v.fields), (c.node, c.fields)]),
    )
}

/// One face expression per active axis: what `grad` and `interp` return and
/// `div` consumes. Inactive axes (one cell, e.g. z in 2D) have no component.
#[derive(Clone, Debug)]
pub struct FaceVector<'a> {
    /// Component on x faces.
    pub x: Option<Expr<'a, XFace>>,
    /// Component on y faces.
    pub y: Option<Expr<'a, YFace>>,
    /// Component on z faces.
    pub z: Option<Expr<'a, ZFace>>,
}

/// The active axes of the grid an expression's fields live on (all three
/// when it reads no field).
fn active_axes(fields: &Bindings<'_>) -> [bool; 3] {
    fields
        .first()
        .map_or([true; 3], |f| f.layout().patch().grid().active_dimensions())
}

/// Gradient of a cell field on the faces of every active axis.
pub fn grad<'a>(cells: impl IntoExpr<'a, CellCentre>) -> FaceVector<'a> {
    let e = cells.into_expr();
    let active = active_axes(&e.fields);
    FaceVector {
        x: active[0].then(|| gradient::<XFace>(e.clone())),
        y: active[1].then(|| gradient::<YFace>(e.clone())),
        z: active[2].then(|| gradient::<ZFace>(e)),
    }
}

/// Interpolation of a cell field to the faces of every active axis.
pub fn interp<'a>(cells: impl IntoExpr<'a, CellCentre>) -> FaceVector<'a> {
    let e = cells.into_expr();
    let active = active_axes(&e.fields);
    FaceVector {
        x: active[0].then(|| interpolate_to_face::<XFace>(e.clone())),
        y: active[1].then(|| interpolate_to_face::<YFace>(e.clone())),
        z: active[2].then(|| interpolate_to_face::<ZFace>(e)),
    }
}

/// Divergence of a face vector: the sum of the directional divergences.
pub fn div(vector: FaceVector<'_>) -> Expr<'_, CellCentre> {
    let parts = [
        vector.x.map(divergence::<XFace>),
        vector.y.map(divergence::<YFace>),
        vector.z.map(divergence::<ZFace>),
    ];
    parts
        .into_iter()
        .flatten()
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| Expr::constant(0.0))
}

fn zip_with<'a>(
    a: FaceVector<'a>,
    b: FaceVector<'a>,
    fx: impl Fn(Expr<'a, XFace>, Expr<'a, XFace>) -> Expr<'a, XFace>,
    fy: impl Fn(Expr<'a, YFace>, Expr<'a, YFace>) -> Expr<'a, YFace>,
    fz: impl Fn(Expr<'a, ZFace>, Expr<'a, ZFace>) -> Expr<'a, ZFace>,
) -> FaceVector<'a> {
    FaceVector {
        x: a.x.zip(b.x).map(|(p, q)| fx(p, q)),
        y: a.y.zip(b.y).map(|(p, q)| fy(p, q)),
        z: a.z.zip(b.z).map(|(p, q)| fz(p, q)),
    }
}

impl<'a> Mul for FaceVector<'a> {
    type Output = FaceVector<'a>;
    /// Component-wise product (e.g. a face diffusivity times a gradient).
    fn mul(self, rhs: Self) -> Self {
        zip_with(self, rhs, |p, q| p * q, |p, q| p * q, |p, q| p * q)
    }
}

impl<'a> Add for FaceVector<'a> {
    type Output = FaceVector<'a>;
    fn add(self, rhs: Self) -> Self {
        zip_with(self, rhs, |p, q| p + q, |p, q| p + q, |p, q| p + q)
    }
}

impl<'a> Sub for FaceVector<'a> {
    type Output = FaceVector<'a>;
    fn sub(self, rhs: Self) -> Self {
        zip_with(self, rhs, |p, q| p - q, |p, q| p - q, |p, q| p - q)
    }
}

impl<'a> Mul<f64> for FaceVector<'a> {
    type Output = FaceVector<'a>;
    fn mul(self, rhs: f64) -> Self {
        FaceVector {
            x: self.x.map(|e| e * rhs),
            y: self.y.map(|e| e * rhs),
            z: self.z.map(|e| e * rhs),
        }
    }
}

impl<'a> Mul<FaceVector<'a>> for f64 {
    type Output = FaceVector<'a>;
    fn mul(self, rhs: FaceVector<'a>) -> FaceVector<'a> {
        rhs * self
    }
}

impl<'a> Neg for FaceVector<'a> {
    type Output = FaceVector<'a>;
    fn neg(self) -> Self {
        FaceVector {
            x: self.x.map(|e| -e),
            y: self.y.map(|e| -e),
            z: self.z.map(|e| -e),
        }
    }
}
