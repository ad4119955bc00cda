//! The multigrid's faces closed by immersed bodies (`crate::immersed`):
//! per level, the fraction of each face that is open, the operator
//! `sum_a D_a(open_a G_a(x))` and its diagonal, and the mean over the
//! fluid cells that fixes a singular problem's solution.
//!
//! The finest level closes the solid faces that bound a cell with fluid
//! (`Immersed::closed_face`); solid faces between two enclosed cells stay
//! open, so the inside of a body keeps a Laplacian and no cell is left
//! without an equation. The next level's face is open by the mean of the
//! fine faces it covers (2 in 2D, 4 in 3D: they lie side by side in the
//! coarse face's plane, so the arithmetic mean is the flux-weighted one),
//! and each of these levels' weighted Jacobi divides by its own diagonal.
//! The levels below keep the open Laplacian ([`CLOSED_LEVELS`]).

use crate::assignment_memo::{Assignments, Recipe};
use crate::error::SolverResult;
use crate::immersed::Immersed;
use watershed_fields::{
    CellCentre, Device, FieldResult, Location, Patch, SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::{
    BoundField, Expr, Parallelism, Parameter, PreparedReduction, ReduceRegion, Reduction,
    divergence, field, gradient,
};

/// How many of the finest levels get the closed faces; the coarser ones
/// keep the open Laplacian. CG iterations per projection of the DFG
/// cylinder (2D-1, from rest, the 60th step; 32 / 64 / 128 cells across):
/// all levels open 30 / 45 / 80; the finest closed 18 / 23 / 47; the two
/// finest 16 / 25 / 47; three 31 / 50 / -; all 30 / 68 / -. On coarse
/// levels a body is a few cells, and averaged open fractions there (or
/// fractions of solid faces, tried too: 30 at 64 with two levels, no
/// convergence with all) describe it worse than no body at all.
pub(crate) const CLOSED_LEVELS: usize = 2;

/// A field of any location, moved between devices.
pub(crate) trait MovableField {
    fn validate(&mut self, device: Device) -> FieldResult<()>;
    fn activate(&mut self, device: Device) -> FieldResult<()>;
    fn remove(&mut self, device: Device) -> FieldResult<()>;
}

impl<L: Location> MovableField for SpatialField<L> {
    fn validate(&mut self, device: Device) -> FieldResult<()> {
        self.validate_on(device)
    }
    fn activate(&mut self, device: Device) -> FieldResult<()> {
        self.set_active(device)
    }
    fn remove(&mut self, device: Device) -> FieldResult<()> {
        self.remove_location(device)
    }
}

/// One level's open fractions of the faces, its diagonal and its fluid.
pub(crate) struct FaceCoefficients {
    open_x: Option<SpatialField<XFace>>,
    open_y: Option<SpatialField<YFace>>,
    open_z: Option<SpatialField<ZFace>>,
    /// `1 / D`, `D` the operator's diagonal (the open Laplacian's where
    /// every face of a cell is closed).
    pub inverse_diagonal: SpatialField<CellCentre>,
    /// 1 on cells that are not enclosed (on a coarse level: that hold a
    /// fine cell that is not): where a singular problem's null space lives.
    pub fluid: SpatialField<CellCentre>,
    /// The number of fluid cells in the interior.
    pub fluid_cells: f64,
}

/// A field of location `F` on `patch` with `value(index)` at every allocated point.
fn filled_field<F: Location>(
    patch: &Patch,
    name: &str,
    value: impl Fn([isize; 3]) -> f64,
) -> SolverResult<SpatialField<F>> {
    let mut out = SpatialField::<F>::new(name, patch, Device::Cpu)?;
    let layout = out.layout().clone();
    let values = out.values_mut()?;
    for index in layout.allocated().iter() {
        values[layout.linear_index(index)] = value(index);
    }
    Ok(out)
}

/// The value of `field` at `index`, or `outside` where it holds none.
fn value_at<L: Location>(field: &SpatialField<L>, index: [isize; 3], outside: f64) -> f64 {
    let layout = field.layout();
    if !layout.allocated().contains(index) {
        return outside;
    }
    field
        .values()
        .map_or(outside, |v| v[layout.linear_index(index)])
}

impl FaceCoefficients {
    /// The finest level's, on `patch` (the whole domain, or one patch of
    /// it: the bodies are placed by grid index, the patch's offset added),
    /// from the bodies.
    pub(crate) fn finest(patch: &Patch, immersed: &Immersed, diagonal: f64) -> SolverResult<Self> {
        let active = patch.grid().active_dimensions();
        let offset = patch.offset().map(|o| o as isize);
        let global = move |index: [isize; 3]| [0, 1, 2].map(|a| index[a] + offset[a]);
        let open = |axis: usize| {
            move |index: [isize; 3]| {
                if immersed.closed_face(axis, global(index)) {
                    0.0
                } else {
                    1.0
                }
            }
        };
        let fluid = filled_field::<CellCentre>(patch, "fluid cells", |index| {
            if immersed.enclosed_cell(global(index)) {
                0.0
            } else {
                1.0
            }
        })?;
        Self::assemble(
            patch,
            diagonal,
            if active[0] {
                Some(filled_field(patch, "open x faces", open(0))?)
            } else {
                None
            },
            if active[1] {
                Some(filled_field(patch, "open y faces", open(1))?)
            } else {
                None
            },
            if active[2] {
                Some(filled_field(patch, "open z faces", open(2))?)
            } else {
                None
            },
            fluid,
        )
    }

    /// The fluid cells of the next coarser level: those with a fluid child.
    fn coarse_fluid(
        &self,
        coarse: &Patch,
        r: [isize; 3],
    ) -> SolverResult<SpatialField<CellCentre>> {
        filled_field::<CellCentre>(coarse, "fluid cells", |index| {
            let mut any = 0.0f64;
            for k in 0..r[2] {
                for j in 0..r[1] {
                    for i in 0..r[0] {
                        let child = [
                            index[0] * r[0] + i,
                            index[1] * r[1] + j,
                            index[2] * r[2] + k,
                        ];
                        any = any.max(value_at(&self.fluid, child, 1.0));
                    }
                }
            }
            any
        })
    }

    /// The next coarser level's, on `coarse`, `ratio` times coarser per
    /// axis (1 or 2): a coarse face is open by the mean of its fine faces.
    pub(crate) fn coarsened(
        &self,
        coarse: &Patch,
        ratio: [usize; 3],
        diagonal: f64,
    ) -> SolverResult<Self> {
        let r = ratio.map(|n| n as isize);
        // The fine faces in the plane of the coarse face `index` normal
        // to `axis`: its own axis scaled, the others spanning the children.
        fn mean_open<F: Location>(
            fine: &SpatialField<F>,
            axis: usize,
            r: [isize; 3],
            index: [isize; 3],
        ) -> f64 {
            let (mut sum, mut count) = (0.0, 0.0);
            let span = |a: usize| if a == axis { 1 } else { r[a] };
            for k in 0..span(2) {
                for j in 0..span(1) {
                    for i in 0..span(0) {
                        let child = [
                            index[0] * r[0] + i,
                            index[1] * r[1] + j,
                            index[2] * r[2] + k,
                        ];
                        sum += value_at(fine, child, 1.0);
                        count += 1.0;
                    }
                }
            }
            sum / count
        }
        let fluid = self.coarse_fluid(coarse, r)?;
        Self::assemble(
            coarse,
            diagonal,
            match &self.open_x {
                Some(f) => Some(filled_field(coarse, "open x faces", |i| {
                    mean_open(f, 0, r, i)
                })?),
                None => None,
            },
            match &self.open_y {
                Some(f) => Some(filled_field(coarse, "open y faces", |i| {
                    mean_open(f, 1, r, i)
                })?),
                None => None,
            },
            match &self.open_z {
                Some(f) => Some(filled_field(coarse, "open z faces", |i| {
                    mean_open(f, 2, r, i)
                })?),
                None => None,
            },
            fluid,
        )
    }

    /// The diagonal from the open fractions: `-sum_a (open_a(lower) +
    /// open_a(upper)) / h_a^2`, or `diagonal` (the open Laplacian's) where
    /// that is zero.
    fn assemble(
        patch: &Patch,
        diagonal: f64,
        open_x: Option<SpatialField<XFace>>,
        open_y: Option<SpatialField<YFace>>,
        open_z: Option<SpatialField<ZFace>>,
        fluid: SpatialField<CellCentre>,
    ) -> SolverResult<Self> {
        let h = patch.grid().spacing();
        let pair = |a: usize, index: [isize; 3]| -> f64 {
            let mut upper = index;
            upper[a] += 1;
            let (lower, upper) = match a {
                0 => open_x
                    .as_ref()
                    .map(|f| (value_at(f, index, 1.0), value_at(f, upper, 1.0))),
                1 => open_y
                    .as_ref()
                    .map(|f| (value_at(f, index, 1.0), value_at(f, upper, 1.0))),
                _ => open_z
                    .as_ref()
                    .map(|f| (value_at(f, index, 1.0), value_at(f, upper, 1.0))),
            }
            .unwrap_or((0.0, 0.0));
            (lower + upper) / (h[a] * h[a])
        };
        let inverse_diagonal = filled_field::<CellCentre>(patch, "1 / diagonal", |index| {
            let d = -(pair(0, index) + pair(1, index) + pair(2, index));
            1.0 / if d < 0.0 { d } else { diagonal }
        })?;
        let layout = fluid.layout().clone();
        let values = fluid.values()?;
        let fluid_cells = layout
            .interior()
            .iter()
            .map(|i| values[layout.linear_index(i)])
            .sum();
        Ok(FaceCoefficients {
            open_x,
            open_y,
            open_z,
            inverse_diagonal,
            fluid,
            fluid_cells,
        })
    }

    /// The fields the operator reads besides `x`.
    pub(crate) fn fields(&self) -> Vec<&dyn BoundField> {
        let mut fields: Vec<&dyn BoundField> = Vec::new();
        if let Some(f) = &self.open_x {
            fields.push(f);
        }
        if let Some(f) = &self.open_y {
            fields.push(f);
        }
        if let Some(f) = &self.open_z {
            fields.push(f);
        }
        fields
    }

    /// The operator with the closed faces, applied to `x`.
    pub(crate) fn operator<'a>(&'a self, x: &'a SpatialField<CellCentre>) -> Expr<'a, CellCentre> {
        let mut sum: Expr<'a, CellCentre> = Expr::constant(0.0);
        if let Some(open) = &self.open_x {
            sum = sum + divergence::<XFace>(field(open) * gradient::<XFace>(x));
        }
        if let Some(open) = &self.open_y {
            sum = sum + divergence::<YFace>(field(open) * gradient::<YFace>(x));
        }
        if let Some(open) = &self.open_z {
            sum = sum + divergence::<ZFace>(field(open) * gradient::<ZFace>(x));
        }
        sum
    }

    /// Every field, to move them between devices.
    pub(crate) fn fields_mut(&mut self) -> Vec<&mut dyn MovableField> {
        let mut fields: Vec<&mut dyn MovableField> =
            vec![&mut self.inverse_diagonal, &mut self.fluid];
        if let Some(x) = &mut self.open_x {
            fields.push(x);
        }
        if let Some(y) = &mut self.open_y {
            fields.push(y);
        }
        if let Some(z) = &mut self.open_z {
            fields.push(z);
        }
        fields
    }
}

/// Subtracts the mean of `x` over `coefficients`' fluid cells from those
/// cells (through the parameter `mean`), then fills `x`'s ghosts with
/// `fill` if given: the null space of a singular problem with closed
/// faces is a constant on the fluid.
pub(crate) fn remove_fluid_mean(
    x: &mut SpatialField<CellCentre>,
    coefficients: &FaceCoefficients,
    mean: &Parameter,
    assignments: &mut Assignments,
    purpose: &'static str,
    fill: Option<crate::boundary::BoundaryConditions>,
) -> SolverResult<()> {
    let sum = fluid_sum(x, coefficients, assignments)?;
    mean.set(sum / coefficients.fluid_cells.max(1.0));
    subtract_on_fluid(x, coefficients, mean, assignments, purpose, fill)
}

/// The sum of `x` over the interior's fluid cells.
pub(crate) fn fluid_sum(
    x: &SpatialField<CellCentre>,
    coefficients: &FaceCoefficients,
    assignments: &mut Assignments,
) -> SolverResult<f64> {
    let fluid = &coefficients.fluid;
    assignments.reduce(
        "fluid sum",
        [x.id(), fluid.id()],
        x.active_device(),
        &[x, fluid],
        || {
            PreparedReduction::new(
                field(x) * field(fluid),
                Reduction::Sum,
                ReduceRegion::Interior,
                Parallelism::Rayon,
            )
        },
    )
}

/// Subtracts the parameter `mean` from `x` on the fluid cells, then fills
/// `x`'s ghosts with `fill` if given.
pub(crate) fn subtract_on_fluid(
    x: &mut SpatialField<CellCentre>,
    coefficients: &FaceCoefficients,
    mean: &Parameter,
    assignments: &mut Assignments,
    purpose: &'static str,
    fill: Option<crate::boundary::BoundaryConditions>,
) -> SolverResult<()> {
    let fluid = &coefficients.fluid;
    let own = x.id();
    let fields: [&dyn BoundField; 1] = [fluid];
    assignments.run(purpose, [own, fluid.id(), 0], x, &fields, |x| {
        let value = Expr::<CellCentre>::symbol(own, x.name()) - mean.expr() * field(fluid);
        Recipe {
            fill,
            ..Recipe::new(value.node().clone(), own)
        }
    })
}
