//! The spatial order of the staggered discretisation ([`SpaceOrder`]) and
//! the half-point averages and differences the conservative momentum
//! forms and the vorticity are built from.
//!
//! Positions along one axis are either *whole* (a face normal to that axis,
//! or an edge: index `q` at `q h`) or *half* (a cell centre along that
//! axis: index `q` at `(q + 1/2) h`), in the one index space all locations
//! share (`watershed_language::stencil`). Morinishi et al. (1998) write
//! every second- and fourth-order staggered operator with two building
//! blocks along an axis: the average of the two values `n h / 2` either
//! side of a point, and their difference over `n h`, for `n` = 1 and 3.
//! Those blocks are here, as shifts of an expression that keeps its
//! location type; which location the result stands for is the caller's
//! bookkeeping (`crate::convection` documents it for every term).

use watershed_fields::CellCentre;
use watershed_fields::Location;
use watershed_operators::{
    Expr, FaceLocation, divergence, divergence4, gradient, gradient4, interpolate_to_cell,
    interpolate_to_cell4, interpolate_to_face, interpolate_to_face4, laplacian, laplacian4, shift,
};

/// The order of the spatial operators: the interpolations, differences and
/// Laplacians of the flow and of the transport equations' diffusion and
/// central convection.
///
/// ```
/// use watershed_solvers::SpaceOrder;
/// assert_eq!(SpaceOrder::from_number(4)?, SpaceOrder::Fourth);
/// assert_eq!(SpaceOrder::Fourth.ghost_layers_for_flow(), 3);
/// assert!(SpaceOrder::from_number(3).is_err());
/// # Ok::<(), watershed_solvers::SolverError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SpaceOrder {
    /// Two-point interpolations and differences (compact, 1 ghost layer).
    #[default]
    Second,
    /// Morinishi's fourth-order pairs: `9/8` of the two-point operator
    /// minus `1/8` of the one over three spacings.
    Fourth,
}

impl SpaceOrder {
    /// The order for `2` or `4`; any other number is a
    /// [`SolverError::Setup`](crate::SolverError::Setup) naming it.
    pub fn from_number(order: usize) -> crate::SolverResult<Self> {
        match order {
            2 => Ok(SpaceOrder::Second),
            4 => Ok(SpaceOrder::Fourth),
            other => Err(crate::SolverError::Setup {
                equation: "space_order".into(),
                reason: format!("space_order = {other}: use 2 or 4"),
            }),
        }
    }

    /// 2 or 4.
    pub fn number(self) -> usize {
        match self {
            SpaceOrder::Second => 2,
            SpaceOrder::Fourth => 4,
        }
    }

    /// The ghost layers a flow of this order reads: 1 at second order; 3 at
    /// fourth, where the conservative cross fluxes average over three
    /// spacings and are differenced over three more, and the projection's
    /// wide Laplacian `div4(grad4(psi))` reaches three cells.
    pub fn ghost_layers_for_flow(self) -> usize {
        match self {
            SpaceOrder::Second => 1,
            SpaceOrder::Fourth => 3,
        }
    }

    /// The ghost layers a transport equation of this order reads (its
    /// diffusion and central convection): 1, or 3 at fourth order, where
    /// the divergence reads the fluxes of two faces beyond the cell and
    /// each flux the cells two beyond the face.
    pub fn ghost_layers_for_transport(self) -> usize {
        match self {
            SpaceOrder::Second => 1,
            SpaceOrder::Fourth => 3,
        }
    }

    /// The strides `n` and weights of the operator's two-point pieces:
    /// `[(1, 1)]` at second order, `[(1, 9/8), (3, -1/8)]` at fourth.
    pub fn strides(self) -> &'static [(isize, f64)] {
        match self {
            SpaceOrder::Second => &[(1, 1.0)],
            SpaceOrder::Fourth => &[(1, 9.0 / 8.0), (3, -1.0 / 8.0)],
        }
    }

    /// The gradient of a cell expression on the faces `F`.
    pub fn gradient<F: FaceLocation>(self, cells: Expr<'static, CellCentre>) -> Expr<'static, F> {
        match self {
            SpaceOrder::Second => gradient::<F>(cells),
            SpaceOrder::Fourth => gradient4::<F>(cells),
        }
    }

    /// The derivative along `F::AXIS` of a face expression, at cell centres.
    pub fn divergence<F: FaceLocation>(self, faces: Expr<'static, F>) -> Expr<'static, CellCentre> {
        match self {
            SpaceOrder::Second => divergence::<F>(faces),
            SpaceOrder::Fourth => divergence4::<F>(faces),
        }
    }

    /// A cell expression interpolated to the faces `F`.
    pub fn to_face<F: FaceLocation>(self, cells: Expr<'static, CellCentre>) -> Expr<'static, F> {
        match self {
            SpaceOrder::Second => interpolate_to_face::<F>(cells),
            SpaceOrder::Fourth => interpolate_to_face4::<F>(cells),
        }
    }

    /// A face expression interpolated to the cell centres.
    pub fn to_cell<F: FaceLocation>(self, faces: Expr<'static, F>) -> Expr<'static, CellCentre> {
        match self {
            SpaceOrder::Second => interpolate_to_cell::<F>(faces),
            SpaceOrder::Fourth => interpolate_to_cell4::<F>(faces),
        }
    }

    /// The Laplacian at the expression's own location (3 or 5 points per
    /// axis).
    pub fn laplacian<L: Location>(self, value: Expr<'static, L>) -> Expr<'static, L> {
        match self {
            SpaceOrder::Second => laplacian(value),
            SpaceOrder::Fourth => laplacian4(value),
        }
    }
}

/// `value` shifted by `by` points along `axis` (itself for 0).
pub(crate) fn along<L: Location>(
    value: &Expr<'static, L>,
    axis: usize,
    by: isize,
) -> Expr<'static, L> {
    if by == 0 {
        return value.clone();
    }
    let mut offset = [0; 3];
    offset[axis] = by;
    shift(value.clone(), offset)
}

/// From half positions to whole ones: at whole index `q`, the mean of the
/// two values `n/2` spacings either side, `(a[q - (n+1)/2] + a[q + (n-1)/2]) / 2`.
pub(crate) fn mean_to_whole<L: Location>(
    value: &Expr<'static, L>,
    axis: usize,
    n: isize,
) -> Expr<'static, L> {
    0.5 * (along(value, axis, -(n + 1) / 2) + along(value, axis, (n - 1) / 2))
}

/// From whole positions to half ones: at half index `q` (position `q +
/// 1/2`), `(a[q - (n-1)/2] + a[q + (n+1)/2]) / 2`.
pub(crate) fn mean_to_half<L: Location>(
    value: &Expr<'static, L>,
    axis: usize,
    n: isize,
) -> Expr<'static, L> {
    0.5 * (along(value, axis, -(n - 1) / 2) + along(value, axis, (n + 1) / 2))
}

/// From half positions to whole ones: `(a[q + (n-1)/2] - a[q - (n+1)/2]) /
/// (n h)`.
pub(crate) fn difference_to_whole<L: Location>(
    value: &Expr<'static, L>,
    axis: usize,
    n: isize,
    h: f64,
) -> Expr<'static, L> {
    (along(value, axis, (n - 1) / 2) - along(value, axis, -(n + 1) / 2)) * (1.0 / (n as f64 * h))
}

/// From whole positions to half ones: `(a[q + (n+1)/2] - a[q - (n-1)/2]) /
/// (n h)`.
pub(crate) fn difference_to_half<L: Location>(
    value: &Expr<'static, L>,
    axis: usize,
    n: isize,
    h: f64,
) -> Expr<'static, L> {
    (along(value, axis, (n + 1) / 2) - along(value, axis, -(n - 1) / 2)) * (1.0 / (n as f64 * h))
}

/// The interpolation of `order` from half positions to whole ones:
/// `sum_n w_n mean_to_whole(value, n)`.
pub(crate) fn interpolate_to_whole<L: Location>(
    order: SpaceOrder,
    value: &Expr<'static, L>,
    axis: usize,
) -> Expr<'static, L> {
    weighted(order, |n| mean_to_whole(value, axis, n))
}

/// The interpolation of `order` from whole positions to half ones.
pub(crate) fn interpolate_to_half<L: Location>(
    order: SpaceOrder,
    value: &Expr<'static, L>,
    axis: usize,
) -> Expr<'static, L> {
    weighted(order, |n| mean_to_half(value, axis, n))
}

/// `sum_n w_n piece(n)` over the order's strides.
pub(crate) fn weighted<L: Location>(
    order: SpaceOrder,
    mut piece: impl FnMut(isize) -> Expr<'static, L>,
) -> Expr<'static, L> {
    let mut sum: Option<Expr<'static, L>> = None;
    for &(n, w) in order.strides() {
        let term = if w == 1.0 { piece(n) } else { w * piece(n) };
        sum = Some(match sum {
            None => term,
            Some(s) => s + term,
        });
    }
    sum.unwrap_or_else(|| Expr::constant(0.0))
}
