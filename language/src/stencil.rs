//! The staggered-grid stencils, declared once.
//!
//! Indices of every location share the cell numbering: x face `i` is the
//! lower x face of cell `i`. A stencil reads its argument at integer offsets
//! in that shared index space. Linear stencils are described by their points
//! and weights ([`StencilOp::linear_points`]); the evaluator, the extent
//! analysis and the CUDA generator all read this one description.

use watershed_fields::{IndexBox, LocationKind};

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
    /// Fourth-order gradient, cell centres to the faces normal to `axis`
    /// (Morinishi et al. 1998): `(27 (a[i] - a[i-1]) - (a[i+1] - a[i-2])) /
    /// (24 h)`.
    Gradient4 {
        /// Direction of the derivative.
        axis: usize,
    },
    /// Fourth-order divergence, faces normal to `axis` to cell centres:
    /// `(27 (a[i+1] - a[i]) - (a[i+2] - a[i-1])) / (24 h)`; minus the
    /// transpose of [`StencilOp::Gradient4`] on a periodic axis.
    Divergence4 {
        /// Direction of the derivative.
        axis: usize,
    },
    /// Fourth-order interpolation of cell centres to the faces normal to
    /// `axis`: `(9 (a[i-1] + a[i]) - (a[i-2] + a[i+1])) / 16`.
    InterpolateToFace4 {
        /// Normal of the destination faces.
        axis: usize,
    },
    /// Fourth-order interpolation of the faces normal to `axis` to cell
    /// centres: `(9 (a[i] + a[i+1]) - (a[i-1] + a[i+2])) / 16`; the
    /// transpose of [`StencilOp::InterpolateToFace4`] on a periodic axis.
    InterpolateToCell4 {
        /// Normal of the source faces.
        axis: usize,
    },
    /// Fourth-order Laplacian over the active axes, any location to itself:
    /// `sum_a (-a[i-2e] + 16 a[i-e] - 30 a[i] + 16 a[i+e] - a[i+2e]) / (12
    /// h_a^2)`.
    Laplacian4,
    /// The argument's value at the same index, read as a value of location
    /// `to`: no arithmetic, no offset. The staggered operators that combine
    /// two locations (the edge fluxes of the momentum equation's
    /// conservative forms, the vorticity) use it to bring a face field
    /// normal to one axis into the index space of another; the index
    /// convention above says where each point lies.
    Relabel {
        /// The location the values are read as.
        to: LocationKind,
    },
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
    /// Restriction of a cell field on a grid `ratio` times finer (per axis,
    /// 1 or 2) to this grid: the mean of the `ratio[0] * ratio[1] *
    /// ratio[2]` children of each coarse cell. Its argument is a field on
    /// the fine grid.
    Restrict {
        /// Refinement per axis (1 or 2).
        ratio: [usize; 3],
    },
    /// Prolongation of a cell field on a grid `ratio` times coarser to this
    /// grid, (bi/tri)linear: per refined axis, 3/4 of the parent cell and
    /// 1/4 of its neighbour on the fine cell's side. Its argument is a field
    /// on the coarse grid, read one ghost layer deep along refined axes.
    Prolongate {
        /// Refinement per axis (1 or 2).
        ratio: [usize; 3],
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
        | StencilOp::Gradient4 { axis }
        | StencilOp::Divergence4 { axis }
        | StencilOp::InterpolateToFace4 { axis }
        | StencilOp::InterpolateToCell4 { axis }
        | StencilOp::CentredDerivative { axis }
        | StencilOp::Upwind { axis }
        | StencilOp::Limited { axis, .. } => Some(axis),
        StencilOp::Laplacian
        | StencilOp::Laplacian4
        | StencilOp::Relabel { .. }
        | StencilOp::Shift { .. }
        | StencilOp::Restrict { .. }
        | StencilOp::Prolongate { .. } => None,
    }
}

/// The face location normal to `axis` (an axis of a stencil: 0, 1 or 2;
/// see [`LocationKind::face_normal_to`]).
pub fn face_of(axis: usize) -> LocationKind {
    LocationKind::face_normal_to(axis).unwrap_or(LocationKind::ZFace)
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
            StencilOp::Gradient4 { axis: a } => format!("grad4_{}", axis(a)),
            StencilOp::Divergence4 { axis: a } => format!("div4_{}", axis(a)),
            StencilOp::InterpolateToFace4 { axis: a } => format!("interp4_to_{}face", axis(a)),
            StencilOp::InterpolateToCell4 { axis: a } => {
                format!("interp4_{}face_to_cell", axis(a))
            }
            StencilOp::Laplacian4 => "laplacian4".into(),
            StencilOp::Relabel { to } => format!("as_{}", to.name()),
            StencilOp::Upwind { axis: a } => format!("upwind_{}", axis(a)),
            StencilOp::Limited { axis: a, limiter } => format!("{}_{}", limiter.name(), axis(a)),
            StencilOp::Shift { offset } => {
                format!("shift[{},{},{}]", offset[0], offset[1], offset[2])
            }
            StencilOp::Restrict { ratio } => {
                format!("restrict[{},{},{}]", ratio[0], ratio[1], ratio[2])
            }
            StencilOp::Prolongate { ratio } => {
                format!("prolongate[{},{},{}]", ratio[0], ratio[1], ratio[2])
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
            StencilOp::Gradient { .. }
            | StencilOp::InterpolateToFace { .. }
            | StencilOp::Gradient4 { .. }
            | StencilOp::InterpolateToFace4 { .. }
            | StencilOp::Restrict { .. }
            | StencilOp::Prolongate { .. } => Some(LocationKind::CellCentre),
            StencilOp::Divergence { axis }
            | StencilOp::InterpolateToCell { axis }
            | StencilOp::Divergence4 { axis }
            | StencilOp::InterpolateToCell4 { axis } => Some(face_of(axis)),
            StencilOp::Laplacian
            | StencilOp::Laplacian4
            | StencilOp::Relabel { .. }
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
            | StencilOp::Gradient4 { axis }
            | StencilOp::InterpolateToFace4 { axis }
            | StencilOp::Upwind { axis }
            | StencilOp::Limited { axis, .. } => Some(face_of(axis)),
            StencilOp::Divergence { .. }
            | StencilOp::InterpolateToCell { .. }
            | StencilOp::Divergence4 { .. }
            | StencilOp::InterpolateToCell4 { .. }
            | StencilOp::Restrict { .. }
            | StencilOp::Prolongate { .. } => Some(LocationKind::CellCentre),
            StencilOp::Relabel { to } => Some(to),
            StencilOp::Laplacian
            | StencilOp::Laplacian4
            | StencilOp::CentredDerivative { .. }
            | StencilOp::Shift { .. } => None,
        }
    }

    /// The refinement ratio of an inter-grid operator ([`StencilOp::Restrict`],
    /// [`StencilOp::Prolongate`]); `None` for the stencils within one grid.
    pub fn transfer_ratio(self) -> Option<[usize; 3]> {
        match self {
            StencilOp::Restrict { ratio } | StencilOp::Prolongate { ratio } => Some(ratio),
            _ => None,
        }
    }

    /// For an inter-grid operator: the box of its argument's indices (on
    /// the other grid) read when computing `region` of the result. Empty for
    /// an empty region; `None` for the stencils within one grid.
    pub fn transfer_reads(self, region: &IndexBox) -> Option<IndexBox> {
        if region.is_empty() {
            return Some(IndexBox::new([0; 3], [0; 3]));
        }
        match self {
            StencilOp::Restrict { ratio } => {
                let r = ratio.map(|r| r as isize);
                Some(IndexBox::new(
                    [0, 1, 2].map(|a| region.lo[a] * r[a]),
                    [0, 1, 2].map(|a| region.hi[a] * r[a]),
                ))
            }
            StencilOp::Prolongate { ratio } => {
                // A fine point reads its parent and, along a refined axis,
                // the parent's neighbour on its side: below for an even
                // index, above for an odd one.
                let r = ratio.map(|r| r as isize);
                let below = |i: isize, a: usize| isize::from(r[a] > 1 && i.rem_euclid(2) == 0);
                let above = |i: isize, a: usize| isize::from(r[a] > 1 && i.rem_euclid(2) == 1);
                Some(IndexBox::new(
                    [0, 1, 2].map(|a| region.lo[a].div_euclid(r[a]) - below(region.lo[a], a)),
                    [0, 1, 2].map(|a| {
                        let last = region.hi[a] - 1;
                        last.div_euclid(r[a]) + above(last, a) + 1
                    }),
                ))
            }
            _ => None,
        }
    }

    /// For an inter-grid operator: the largest box of result indices whose
    /// reads all lie in `available` (the argument's allocation); `None` for
    /// the stencils within one grid.
    pub fn transfer_computable(self, available: &IndexBox) -> Option<IndexBox> {
        match self {
            StencilOp::Restrict { ratio } => {
                let r = ratio.map(|r| r as isize);
                Some(IndexBox::new(
                    [0, 1, 2].map(|a| {
                        available.lo[a].div_euclid(r[a])
                            + isize::from(available.lo[a].rem_euclid(r[a]) != 0)
                    }),
                    [0, 1, 2].map(|a| available.hi[a].div_euclid(r[a])),
                ))
            }
            StencilOp::Prolongate { ratio } => {
                // The inverse of `transfer_reads`: along a refined axis the
                // first computable point is odd (it reads its parent and the
                // one above), the last even.
                Some(IndexBox::new(
                    [0, 1, 2].map(|a| {
                        if ratio[a] > 1 {
                            2 * available.lo[a] + 1
                        } else {
                            available.lo[a]
                        }
                    }),
                    [0, 1, 2].map(|a| {
                        if ratio[a] > 1 {
                            2 * available.hi[a] - 1
                        } else {
                            available.hi[a]
                        }
                    }),
                ))
            }
            _ => None,
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
            StencilOp::Gradient4 { axis } => {
                let w = 1.0 / (24.0 * spacing[axis]);
                vec![
                    (unit(axis, -2), w),
                    (unit(axis, -1), -27.0 * w),
                    ([0; 3], 27.0 * w),
                    (unit(axis, 1), -w),
                ]
            }
            StencilOp::Divergence4 { axis } => {
                let w = 1.0 / (24.0 * spacing[axis]);
                vec![
                    (unit(axis, -1), w),
                    ([0; 3], -27.0 * w),
                    (unit(axis, 1), 27.0 * w),
                    (unit(axis, 2), -w),
                ]
            }
            StencilOp::InterpolateToFace4 { axis } => vec![
                (unit(axis, -2), -1.0 / 16.0),
                (unit(axis, -1), 9.0 / 16.0),
                ([0; 3], 9.0 / 16.0),
                (unit(axis, 1), -1.0 / 16.0),
            ],
            StencilOp::InterpolateToCell4 { axis } => vec![
                (unit(axis, -1), -1.0 / 16.0),
                ([0; 3], 9.0 / 16.0),
                (unit(axis, 1), 9.0 / 16.0),
                (unit(axis, 2), -1.0 / 16.0),
            ],
            StencilOp::Laplacian4 => {
                let mut points = Vec::new();
                let mut centre = 0.0;
                for axis in (0..3).filter(|&a| active[a]) {
                    let w = 1.0 / (12.0 * spacing[axis] * spacing[axis]);
                    points.push((unit(axis, -2), -w));
                    points.push((unit(axis, -1), 16.0 * w));
                    points.push((unit(axis, 1), 16.0 * w));
                    points.push((unit(axis, 2), -w));
                    centre -= 30.0 * w;
                }
                points.push(([0; 3], centre));
                points
            }
            StencilOp::Relabel { .. } => vec![([0; 3], 1.0)],
            StencilOp::Shift { offset } => vec![(offset, 1.0)],
            StencilOp::Upwind { .. }
            | StencilOp::Limited { .. }
            | StencilOp::Restrict { .. }
            | StencilOp::Prolongate { .. } => return None,
        })
    }

    /// Offsets at which the `argument`-th argument is read: the points of
    /// linear stencils; cells `-2..=1` along the axis and the face itself for
    /// limited interpolation; `-1..=0` for upwind. Empty for the inter-grid
    /// operators, whose reads are on another grid
    /// ([`StencilOp::transfer_reads`]).
    pub fn offsets(self, argument: usize, active: [bool; 3]) -> Vec<[isize; 3]> {
        match self {
            StencilOp::Restrict { .. } | StencilOp::Prolongate { .. } => Vec::new(),
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
