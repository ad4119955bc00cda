//! The convective term `(u . grad) u_i` of the momentum equations on the
//! staggered grid, in the forms of Morinishi, Lund, Vasilyev & Moin (1998,
//! J. Comput. Phys. 143, "Fully conservative higher order finite
//! difference schemes for incompressible flow"), at second and fourth
//! order, as language expressions (fused and compiled like every other
//! node, on every back end).
//!
//! ## The terms
//! With `I^n_j a` the mean of `a` at `+- n h_j / 2` along `x_j`, `D^n_j a`
//! their difference over `n h_j`, and the order's strides and weights
//! `(n, w_n)` (`(1, 1)` at second order; `(1, 9/8), (3, -1/8)` at fourth),
//! the transporting velocity of `u_i` along `x_j` is
//! `U_ij = sum_n w_n I^n_i u_j` and
//!
//! * **divergence** form: `sum_j sum_n w_n D^n_j( U_ij I^n_j u_i )`;
//! * **advective** form: `sum_j sum_n w_n I^n_j( U_ij D^n_j u_i )`;
//! * **skew-symmetric** form: the mean of the two.
//!
//! For a velocity whose discrete divergence (of the same order) vanishes,
//! the divergence and skew-symmetric forms conserve momentum and kinetic
//! energy in the inviscid limit, up to the time integration's error; the
//! divergence form conserves momentum for any velocity, the
//! skew-symmetric form kinetic energy for any velocity (Morinishi et al.,
//! Table I). The projection of [`crate::IncompressibleFlow`] enforces the
//! divergence of the same order, so both hold there.
//!
//! The older form, [`ConvectionForm::CellAveragedAdvective`], takes
//! `u_j du_i/dx_j` with centred derivatives and the cross velocities
//! averaged face -> cell -> face: it conserves neither, and under-resolved
//! turbulence pumps energy into the grid scale with it (the 3D
//! Taylor-Green vortex at Re = 1600 diverges near t = 5).
//!
//! ## Where each intermediate lives
//! For `u_i` on the faces normal to `x_i`: along `x_i` its points are
//! whole (index `q` at `q h`), along every other axis half (at `(q + 1/2)
//! h`). For `j = i` the products `U_ii I^n_i u_i` live at the cell centres
//! (half along `x_i`), numbered like the cells; for `j != i` they live on
//! the edges at whole positions along `x_i` and `x_j`, numbered like the
//! face of `u_i` below them along `x_j` (edge `q` at `q h_j`). `u_j`, on
//! the faces normal to `x_j`, is read in `u_i`'s index space through
//! [`watershed_operators::relabel`]: its index along `x_j` is already the
//! edge's, and along `x_i` it is half.

use crate::error::{SolverError, SolverResult};
use crate::staggered::{
    SpaceOrder, difference_to_half, difference_to_whole, interpolate_to_half, interpolate_to_whole,
    weighted,
};
use crate::staggered::{mean_to_half, mean_to_whole};
use watershed_exprgraph::{Symbols, Tag};
use watershed_fields::{CellCentre, on_face};
use watershed_operators::{
    Expr, FaceLocation, derivative, interpolate_to_cell, interpolate_to_face, relabel,
};

/// The form of the momentum equations' convective term (see the module
/// documentation).
///
/// ```
/// use watershed_solvers::ConvectionForm;
/// assert_eq!(ConvectionForm::default(), ConvectionForm::SkewSymmetric);
/// assert_eq!(ConvectionForm::from_name("divergence")?, ConvectionForm::Divergence);
/// assert!(ConvectionForm::from_name("upwind").is_err());
/// # Ok::<(), watershed_solvers::SolverError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvectionForm {
    /// `d(u_j u_i)/dx_j`: conserves momentum; kinetic energy too for a
    /// divergence-free velocity.
    Divergence,
    /// `u_j du_i/dx_j` with the interpolations of the divergence form:
    /// conserves both only for a divergence-free velocity.
    Advective,
    /// The mean of the divergence and advective forms (the default):
    /// conserves kinetic energy; momentum too for a divergence-free
    /// velocity.
    #[default]
    SkewSymmetric,
    /// The advective form with centred derivatives and the cross velocities
    /// averaged face -> cell -> face (second order only): conserves neither
    /// momentum nor kinetic energy. Kept to compare with.
    CellAveragedAdvective,
}

impl ConvectionForm {
    /// Every form, in the order of [`Self::NAMES`].
    pub const ALL: [ConvectionForm; 4] = [
        ConvectionForm::Divergence,
        ConvectionForm::Advective,
        ConvectionForm::SkewSymmetric,
        ConvectionForm::CellAveragedAdvective,
    ];

    /// The names configurations use.
    pub const NAMES: [&'static str; 4] = [
        "divergence",
        "advective",
        "skew-symmetric",
        "cell-averaged-advective",
    ];

    /// The name configurations use.
    pub fn name(self) -> &'static str {
        let index = Self::ALL.iter().position(|f| *f == self).unwrap_or(0);
        Self::NAMES[index]
    }

    /// The form called `name` ([`Self::NAMES`]); anything else is a
    /// [`SolverError::Setup`] listing the names.
    pub fn from_name(name: &str) -> SolverResult<Self> {
        Self::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|index| Self::ALL[index])
            .ok_or_else(|| SolverError::Setup {
                equation: "convection".into(),
                reason: format!(
                    "unknown convection form '{name}'; use one of {}",
                    Self::NAMES.join(", ")
                ),
            })
    }

    /// Whether the form exists at `order` (the cell-averaged advective form
    /// is second order only).
    pub fn supports(self, order: SpaceOrder) -> bool {
        self != ConvectionForm::CellAveragedAdvective || order == SpaceOrder::Second
    }
}

/// The convective term of velocity component `F` (`+ (u . grad) u_F`, to
/// be subtracted in the right-hand side), reading the components
/// `velocity[a]` for the `active` axes on a grid of `spacing`.
pub(crate) fn momentum_convection<F: FaceLocation>(
    form: ConvectionForm,
    order: SpaceOrder,
    s: &mut Symbols,
    velocity: &[Tag; 3],
    active: &[usize],
    spacing: [f64; 3],
) -> Expr<'static, F> {
    let i = F::AXIS;
    let u: Expr<'static, F> = s.field(&velocity[i]);
    if form == ConvectionForm::CellAveragedAdvective {
        let mut convection: Expr<'static, F> = Expr::constant(0.0);
        for &j in active {
            convection = convection + cell_averaged::<F>(s, velocity, j) * derivative(j, u.clone());
        }
        return convection;
    }
    let mut divergence: Option<Expr<'static, F>> = None;
    let mut advective: Option<Expr<'static, F>> = None;
    let want_divergence = form != ConvectionForm::Advective;
    let want_advective = form != ConvectionForm::Divergence;
    for &j in active {
        let h = spacing[j];
        let (div_j, adv_j) = if j == i {
            // Products at the cell centres (half along x_i).
            let carrier = interpolate_to_half(order, &u, i);
            let div = want_divergence.then(|| {
                weighted(order, |n| {
                    difference_to_whole(&(carrier.clone() * mean_to_half(&u, i, n)), i, n, h)
                })
            });
            let adv = want_advective.then(|| {
                weighted(order, |n| {
                    mean_to_whole(&(carrier.clone() * difference_to_half(&u, i, n, h)), i, n)
                })
            });
            (div, adv)
        } else {
            // Products on the edges (whole along x_i and x_j).
            let other: Expr<'static, F> =
                on_face!(j, G => relabel::<G, F>(s.field::<G>(&velocity[j])));
            let carrier = interpolate_to_whole(order, &other, i);
            let div = want_divergence.then(|| {
                weighted(order, |n| {
                    difference_to_half(&(carrier.clone() * mean_to_whole(&u, j, n)), j, n, h)
                })
            });
            let adv = want_advective.then(|| {
                weighted(order, |n| {
                    mean_to_half(&(carrier.clone() * difference_to_whole(&u, j, n, h)), j, n)
                })
            });
            (div, adv)
        };
        divergence = sum(divergence, div_j);
        advective = sum(advective, adv_j);
    }
    let zero = || Expr::constant(0.0);
    match form {
        ConvectionForm::Divergence => divergence.unwrap_or_else(zero),
        ConvectionForm::Advective => advective.unwrap_or_else(zero),
        _ => 0.5 * (divergence.unwrap_or_else(zero) + advective.unwrap_or_else(zero)),
    }
}

fn sum<L: watershed_fields::Location>(
    a: Option<Expr<'static, L>>,
    b: Option<Expr<'static, L>>,
) -> Option<Expr<'static, L>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Velocity component `b` at the faces `F`, averaged face -> cell -> face
/// for `b != F::AXIS` (the cell-averaged advective form).
fn cell_averaged<F: FaceLocation>(
    s: &mut Symbols,
    velocity: &[Tag; 3],
    b: usize,
) -> Expr<'static, F> {
    if b == F::AXIS {
        return s.field(&velocity[b]);
    }
    let at_cells: Expr<'static, CellCentre> =
        on_face!(b, V => interpolate_to_cell::<V>(s.field(&velocity[b])));
    interpolate_to_face::<F>(at_cells)
}
