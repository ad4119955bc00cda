//! The staggered-grid stencils, declared once.
//!
//! Indices of every location share the cell numbering: x face `i` is the
//! lower x face of cell `i`. A stencil reads its argument at integer offsets
//! in that shared index space. Linear stencils are described by their points
//! and weights ([`StencilOp::linear_points`]); the evaluator, the extent
//! analysis and the CUDA generator all read this one description.

use watershed_fields::LocationKind;

use crate::pointwise::Limiter;

/// A stencil operator. `axis` is 0, 1, 2 for x, y, z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StencilOp {
    /// Cell centres to the faces normal to `axis`: `(a[i] - a[i-1]) / h`.
    Gradient {
        /// Direction of the derivative.
        axis: usize,
    },
    /// Faces normal to `axis` to cell centres: `(a[i+1] - a[i]) / h`.
    Divergence {
        /// Direction of the derivative.
        axis: usize,
    },
    /// Cell centres to the faces normal to `axis`: `(a[i-1] + a[i]) / 2`.
    InterpolateToFace {
        /// Normal of the destination faces.
        axis: usize,
    },
    /// Faces normal to `axis` to cell centres: `(a[i] + a[i+1]) / 2`.
    InterpolateToCell {
        /// Normal of the source faces.
        axis: usize,
    },
    /// Centred first derivative along `axis`, any location to itself:
    /// `(a[i+1] - a[i-1]) / (2 h)` (e.g. `du/dy` of an x-face velocity,
    /// which the staggered family has no edge location for).
    CentredDerivative {
        /// Direction of the derivative.
        axis: usize,
    },
    /// Second-order Laplacian over the active axes, any location to itself:
    /// `sum_a (a[i+e] - 2 a[i] + a[i-e]) / h_a^2`.
    Laplacian,
    /// Upwind interpolation of a cell field (second argument) to the faces
    /// normal to `axis` by the sign of a face velocity (first argument): the
    /// lower cell where the velocity is `>= 0`, the upper cell otherwise.
    Upwind {
        /// Normal of the faces.
        axis: usize,
    },
    /// Flux-limited interpolation of a cell field (second argument) to the
    /// faces normal to `axis`, upwinded by a face velocity (first argument).
    Limited {
        /// Normal of the faces.
        axis: usize,
        /// The limiter.
        limiter: Limiter,
    },
    /// The argument read at a fixed offset, any location to itself:
    /// `a[i + offset]` (mirror partners of boundary conditions, periodic
    /// images).
    Shift {
        /// Offset (x, y, z).
        offset: [isize; 3],
    },
}

/// "x", "y", "z" for axes 0, 1, 2; "axis N" for anything else (an invalid
/// axis is reported by lowering, never indexed).
pub fn axis_name(axis: usize) -> String {
    match axis {
        0 => "x".into(),
        1 => "y".into(),
        2 => "z".into(),
        other => format!("axis {other}"),
    }
}

/// The axis a stencil works along (`None` for the Laplacian, which works
/// along every active axis).
pub fn stencil_axis(op: StencilOp) -> Option<usize> {
    match op {
        StencilOp::Gradient { axis }
        | StencilOp::Divergence { axis }
        | StencilOp::InterpolateToFace { axis }
        | StencilOp::InterpolateToCell { axis }
        | StencilOp::CentredDerivative { axis }
        | StencilOp::Upwind { axis }
        | StencilOp::Limited { axis, .. } => Some(axis),
        StencilOp::Laplacian | StencilOp::Shift { .. } => None,
    }
}

/// The face location normal to `axis`.
pub fn face_of(axis: usize) -> LocationKind {
    [
        LocationKind::XFace,
        LocationKind::YFace,
        LocationKind::ZFace,
    ][axis]
}

/// Unit offset along `axis`, scaled by `by`.
pub fn unit(axis: usize, by: isize) -> [isize; 3] {
    let mut offset = [0; 3];
    offset[axis] = by;
    offset
}

impl StencilOp {
    /// Name in printed IR.
    pub fn name(self) -> String {
        let axis = axis_name;
        match self {
            StencilOp::Gradient { axis: a } => format!("grad_{}", axis(a)),
            StencilOp::Divergence { axis: a } => format!("div_{}", axis(a)),
            StencilOp::InterpolateToFace { axis: a } => format!("interp_to_{}face", axis(a)),
            StencilOp::InterpolateToCell { axis: a } => format!("interp_{}face_to_cell", axis(a)),
            StencilOp::CentredDerivative { axis: a } => format!("d{}", axis(a)),
            StencilOp::Laplacian => "laplacian".into(),
            StencilOp::Upwind { axis: a } => format!("upwind_{}", axis(a)),
            StencilOp::Limited { axis: a, limiter } => format!("{}_{}", limiter.name(), axis(a)),
            StencilOp::Shift { offset } => {
                format!("shift[{},{},{}]", offset[0], offset[1], offset[2])
            }
        }
    }

    /// Number of arguments (2 for upwind and limited: velocity, then the
    /// transported cell field).
    pub fn arity(self) -> usize {
        match self {
            StencilOp::Upwind { .. } | StencilOp::Limited { .. } => 2,
            _ => 1,
        }
    }

    /// Location the `argument`-th argument must have (`None`: any, for the
    /// Laplacian and the centred derivative).
    pub fn source(self, argument: usize) -> Option<LocationKind> {
        match self {
            StencilOp::Gradient { .. } | StencilOp::InterpolateToFace { .. } => {
                Some(LocationKind::CellCentre)
            }
            StencilOp::Divergence { axis } | StencilOp::InterpolateToCell { axis } => {
                Some(face_of(axis))
            }
            StencilOp::Laplacian
            | StencilOp::CentredDerivative { .. }
            | StencilOp::Shift { .. } => None,
            StencilOp::Upwind { axis } | StencilOp::Limited { axis, .. } => {
                Some(if argument == 0 {
                    face_of(axis)
                } else {
                    LocationKind::CellCentre
                })
            }
        }
    }

    /// Location of the result (`None`: that of the argument, for the Laplacian).
    pub fn destination(self) -> Option<LocationKind> {
        match self {
            StencilOp::Gradient { axis }
            | StencilOp::InterpolateToFace { axis }
            | StencilOp::Upwind { axis }
            | StencilOp::Limited { axis, .. } => Some(face_of(axis)),
            StencilOp::Divergence { .. } | StencilOp::InterpolateToCell { .. } => {
                Some(LocationKind::CellCentre)
            }
            StencilOp::Laplacian
            | StencilOp::CentredDerivative { .. }
            | StencilOp::Shift { .. } => None,
        }
    }

    /// The points and weights of a linear stencil for grid `spacing` and
    /// `active` axes; `None` for the nonlinear ones (upwind, limited).
    pub fn linear_points(
        self,
        spacing: [f64; 3],
        active: [bool; 3],
    ) -> Option<Vec<([isize; 3], f64)>> {
        Some(match self {
            StencilOp::Gradient { axis } => {
                let w = 1.0 / spacing[axis];
                vec![(unit(axis, -1), -w), ([0; 3], w)]
            }
            StencilOp::Divergence { axis } => {
                let w = 1.0 / spacing[axis];
                vec![([0; 3], -w), (unit(axis, 1), w)]
            }
            StencilOp::InterpolateToFace { axis } => vec![(unit(axis, -1), 0.5), ([0; 3], 0.5)],
            StencilOp::InterpolateToCell { axis } => vec![([0; 3], 0.5), (unit(axis, 1), 0.5)],
            StencilOp::CentredDerivative { axis } => {
                let w = 0.5 / spacing[axis];
                vec![(unit(axis, -1), -w), (unit(axis, 1), w)]
            }
            StencilOp::Laplacian => {
                let mut points = Vec::new();
                let mut centre = 0.0;
                for axis in (0..3).filter(|&a| active[a]) {
                    let w = 1.0 / (spacing[axis] * spacing[axis]);
                    points.push((unit(axis, -1), w));
                    points.push((unit(axis, 1), w));
                    centre -= 2.0 * w;
                }
                points.push(([0; 3], centre));
                points
            }
            StencilOp::Shift { offset } => vec![(offset, 1.0)],
            StencilOp::Upwind { .. } | StencilOp::Limited { .. } => return None,
        })
    }

    /// Offsets at which the `argument`-th argument is read: the points of
    /// linear stencils; cells `-2..=1` along the axis and the face itself for
    /// limited interpolation; `-1..=0` for upwind.
    pub fn offsets(self, argument: usize, active: [bool; 3]) -> Vec<[isize; 3]> {
        match self {
            StencilOp::Upwind { axis } => {
                if argument == 0 {
                    vec![[0; 3]]
                } else {
                    vec![unit(axis, -1), [0; 3]]
                }
            }
            StencilOp::Limited { axis, .. } => {
                if argument == 0 {
                    vec![[0; 3]]
                } else {
                    (-2..=1).map(|d| unit(axis, d)).collect()
                }
            }
            _ => self
                .linear_points([1.0; 3], active)
                .expect("the other stencils are linear")
                .into_iter()
                .map(|(offset, _)| offset)
                .collect(),
        }
    }
}
