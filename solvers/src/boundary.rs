//! Boundary conditions, applied in the ghost points (and the boundary face
//! of face fields normal to the side) by modifiers that run right after the
//! field is produced.
//!
//! With `x_b` the boundary, `h` the spacing and the mirror partner of ghost
//! layer `l` the interior point at the same distance from `x_b`:
//! * **Dirichlet** `v`: the ghost value is `2 v - partner`, so the linear
//!   interpolant through the pair equals `v` at `x_b` (second order). On a
//!   face field normal to the side, the boundary face itself is set to `v`.
//! * **Neumann** `q` (outward normal derivative): ghost = partner +
//!   `d q`, with `d` the distance between them (second order, the one-sided
//!   difference is centred on `x_b`).
//! * **Flux** `F` with diffusivity `k` (outward diffusive flux `-k dphi/dn =
//!   F`): Neumann with `q = -F / k`.
//! * **Periodic**: ghosts copy the interior values on the opposite side. It
//!   needs a grid periodic along that axis and a patch spanning it; the
//!   grid's periodic axes are filled whether or not a condition says so.
//!
//! The conditions are written in the field language
//! ([`BoundaryConditions::assignments`]): as graph modifiers
//! ([`BoundaryConditions::modifier`]), prepared once for fields of one
//! layout ([`BoundaryFill`]), or applied to a field in one call
//! ([`BoundaryConditions::apply`]). The multigrid solver runs them as the
//! masked assignments after each assignment that writes a level; on small
//! fields the CPU back end runs such copies and mirrors as one ghost fill
//! (`watershed-operators`, `ghost_fill.rs`).

use crate::boundary_value::BoundaryExpression;
use crate::error::{SolverError, SolverResult};
use smallvec::SmallVec;
use watershed_exprgraph::{GraphError, LanguageModifier, MaskedAssignment, Tag};
use watershed_fields::{
    CellCentre, Device, FieldLayout, GpuStream, IndexBox, Location, SpatialField,
};
use watershed_operators::gpu::{GpuTarget, gpu_launches};
use watershed_operators::{
    AssignOptions, Expr, Parameter, PreparedAssignment, Region, Side, shift,
};

/// A condition on one side of the domain. The values are numbers, or
/// expressions of position and time ([`BoundaryExpression`], the
/// `...Expression` variants).
#[derive(Debug, Clone, PartialEq)]
pub enum BoundaryCondition {
    /// The value on the boundary.
    Dirichlet(f64),
    /// The outward normal derivative.
    Neumann(f64),
    /// The outward diffusive flux `-k dphi/dn`, with the diffusivity `k`.
    Flux {
        /// Outward flux.
        flux: f64,
        /// Diffusivity `k` (non-zero).
        diffusivity: f64,
    },
    /// Periodic (the grid must be periodic along the side's axis).
    Periodic,
    /// The value on the boundary, an expression of position and time.
    DirichletExpression(BoundaryExpression),
    /// The outward normal derivative, an expression of position and time.
    NeumannExpression(BoundaryExpression),
    /// The outward diffusive flux `-k dphi/dn`, an expression of position
    /// and time, with the diffusivity `k`.
    FluxExpression {
        /// Outward flux.
        flux: BoundaryExpression,
        /// Diffusivity `k` (non-zero).
        diffusivity: f64,
    },
}

/// Conditions on the six sides (`None`: the ghosts are left as they are),
/// and the time at which values given as expressions are evaluated
/// ([`Self::with_time`]; solvers set it to the time of the state they
/// bound).
#[derive(Debug, Clone, Default)]
pub struct BoundaryConditions {
    sides: [Option<BoundaryCondition>; 6],
    /// The sides given one by one ([`Self::with`]), not through
    /// [`Self::all`]: a non-periodic one on a periodic axis is a mistake.
    named: [bool; 6],
    time: Option<Parameter>,
}

/// Equal when every side has the same condition (the time parameter is
/// the solver's, not part of the conditions).
impl PartialEq for BoundaryConditions {
    fn eq(&self, other: &Self) -> bool {
        self.sides == other.sides
    }
}

impl BoundaryCondition {
    /// The condition's kind and constant value, for messages
    /// (`Dirichlet(1)`, `Neumann expression`).
    pub fn describe(&self) -> String {
        match self {
            BoundaryCondition::Dirichlet(v) => format!("Dirichlet({v})"),
            BoundaryCondition::Neumann(q) => format!("Neumann({q})"),
            BoundaryCondition::Flux { flux, .. } => format!("Flux({flux})"),
            BoundaryCondition::Periodic => "Periodic".into(),
            BoundaryCondition::DirichletExpression(_) => "Dirichlet expression".into(),
            BoundaryCondition::NeumannExpression(_) => "Neumann expression".into(),
            BoundaryCondition::FluxExpression { .. } => "Flux expression".into(),
        }
    }
}

fn side_index(side: Side) -> usize {
    2 * side.axis + usize::from(side.plus)
}

impl BoundaryConditions {
    /// No conditions.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same condition on every side.
    pub fn all(condition: BoundaryCondition) -> Self {
        BoundaryConditions {
            sides: std::array::from_fn(|_| Some(condition.clone())),
            named: [false; 6],
            time: None,
        }
    }

    /// Sets the condition of `side`. (The sides of a periodic grid axis
    /// take the periodic images whatever [`Self::all`] says; a solver
    /// refuses a non-periodic condition given for one with this method.)
    pub fn with(mut self, side: Side, condition: BoundaryCondition) -> Self {
        self.sides[side_index(side)] = Some(condition);
        self.named[side_index(side)] = true;
        self
    }

    /// Whether `side`'s condition was given with [`Self::with`] (not
    /// through [`Self::all`]).
    pub fn is_named(&self, side: Side) -> bool {
        self.named[side_index(side)]
    }

    /// The condition of `side`.
    pub fn get(&self, side: Side) -> Option<&BoundaryCondition> {
        self.sides[side_index(side)].as_ref()
    }

    /// The time at which values given as expressions are evaluated: the
    /// parameter's value when the conditions are applied. Solvers set it
    /// to each stage's state time; a caller applying conditions with an
    /// expression of time itself gives one. Without it, an expression
    /// that reads the time is refused when the conditions are applied.
    pub fn with_time(mut self, time: &Parameter) -> Self {
        self.time = Some(time.clone());
        self
    }

    /// The time parameter given with [`Self::with_time`].
    pub fn time(&self) -> Option<&Parameter> {
        self.time.as_ref()
    }

    /// Fills the ghost points of `field` (CPU, active) on every side with a
    /// condition, and the periodic axes of its grid, by running the
    /// conditions' masked language assignments ([`Self::assignments`]).
    /// A loop that applies the same conditions to the same fields many
    /// times should prepare them once with [`BoundaryFill::new`].
    pub fn apply<L: Location>(&self, field: &mut SpatialField<L>) -> SolverResult<()> {
        BoundaryFill::new(self, field.layout(), field.name())?.apply(field)
    }
}

impl BoundaryConditions {
    /// The first point the conditions write in `field` (ghost layers, and
    /// the boundary faces of a Dirichlet condition on a face field normal
    /// to the side; periodic images excluded) whose value is not finite:
    /// the side, the point, and what gives it (an expression's name, or
    /// the kind of condition). A value given as an expression evaluated
    /// outside its domain shows up here, before it spreads.
    pub fn first_non_finite<L: Location>(
        &self,
        field: &SpatialField<L>,
    ) -> SolverResult<Option<(Side, [isize; 3], String)>> {
        let layout = field.layout();
        let values = field.values()?;
        for checked in checked_sides::<L>(self, layout, field.name())? {
            let what = match &checked.condition {
                BoundaryCondition::Periodic => continue,
                BoundaryCondition::DirichletExpression(e)
                | BoundaryCondition::NeumannExpression(e)
                | BoundaryCondition::FluxExpression { flux: e, .. } => {
                    format!("the value `{}`", e.name())
                }
                other => format!("the {other:?} condition"),
            };
            let axis = checked.side.axis;
            let (first, outward) = if checked.side.plus {
                (checked.n - 1, 1)
            } else {
                (0, -1)
            };
            let mut slabs: Vec<isize> = (1..=checked.layers).map(|l| first + outward * l).collect();
            if checked.on_face {
                slabs.push(first);
            }
            for at in slabs {
                let mut slab = layout.allocated();
                slab.lo[axis] = at;
                slab.hi[axis] = at + 1;
                if let Some(point) = slab
                    .iter()
                    .find(|&p| !values[layout.linear_index(p)].is_finite())
                {
                    return Ok(Some((checked.side, point, what)));
                }
            }
        }
        Ok(None)
    }

    /// Whether the conditions themselves give a value that is not finite
    /// on fields with `layout`: they are applied (at the time they carry)
    /// to a field whose interior is zero, and [`Self::first_non_finite`]
    /// looks at what they wrote. So a value that is not finite is the
    /// conditions' own (an expression outside its domain), not a mirror
    /// of an interior value that already was not.
    pub fn non_finite_value<L: Location>(
        &self,
        layout: &FieldLayout,
        name: &str,
    ) -> SolverResult<Option<(Side, [isize; 3], String)>> {
        let mut probe =
            SpatialField::<L>::new(name, layout.patch(), watershed_fields::Device::Cpu)?;
        probe.fill(0.0)?;
        self.apply(&mut probe)?;
        self.first_non_finite(&probe)
    }
}

/// The leaf id that stands for the filled field in a [`BoundaryFill`]'s
/// assignments. Fields' own ids are small counters and tags' ids are
/// hashes; a fill binds no field but its target, so this id only has to
/// differ from the fields an in-place update fused with a fill reads.
const FILLED_FIELD_LEAF: u64 = u64::MAX - 0xB0;

/// Boundary conditions prepared for the fields of one layout: their masked
/// assignments are built once, so that applying them again finds the
/// lowered kernels by identity. Loops that fill the same fields many times
/// (multigrid smoothing, the pressure projection) keep one.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_solvers::boundary::BoundaryFill;
/// use watershed_solvers::{BoundaryCondition, BoundaryConditions};
/// let patch = Grid::new([4, 1, 1], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
/// phi.values_mut()?.copy_from_slice(&[9.0, 1.0, 2.0, 3.0, 4.0, 9.0]);
/// let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.5));
/// let mut fill = BoundaryFill::new(&walls, phi.layout(), "phi")?;
/// fill.apply(&mut phi)?;
/// // Ghosts mirror their partners about the wall value: 2 * 0.5 - partner.
/// assert_eq!(phi.values()?, &[0.0, 1.0, 2.0, 3.0, 4.0, -3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct BoundaryFill<L: Location> {
    layout: FieldLayout,
    assignments: std::sync::Arc<[MaskedAssignment]>,
    /// The assignments checked and lowered, once the first field is given:
    /// the first as the main assignment, the others after it.
    prepared: Option<PreparedAssignment>,
    location: std::marker::PhantomData<L>,
}

impl<L: Location> BoundaryFill<L> {
    /// The assignments of `conditions` for fields with `layout` (errors as
    /// [`BoundaryConditions::assignments`], naming `name`).
    pub fn new(
        conditions: &BoundaryConditions,
        layout: &FieldLayout,
        name: &str,
    ) -> SolverResult<Self> {
        let assignments = conditions.assignments::<L>(layout, FILLED_FIELD_LEAF, name)?;
        Ok(BoundaryFill {
            layout: layout.clone(),
            assignments: assignments.into(),
            prepared: None,
            location: std::marker::PhantomData,
        })
    }

    /// The id of the leaves that read the filled field. An in-place update
    /// fused with the fill ([`watershed_operators::assign_node_then`]) names
    /// its target with this id too.
    pub fn leaf(&self) -> u64 {
        FILLED_FIELD_LEAF
    }

    /// The masked assignments, in the order they run.
    pub fn assignments(&self) -> &[MaskedAssignment] {
        &self.assignments
    }

    /// Fills the ghost points (and Dirichlet boundary faces) of `field`,
    /// which must have the layout the fill was prepared for.
    pub fn apply(&mut self, field: &mut SpatialField<L>) -> SolverResult<()> {
        if field.layout() != &self.layout {
            return Err(SolverError::Setup {
                equation: field.name().to_string(),
                reason: format!(
                    "boundary conditions prepared for a layout of {:?} cells with ghosts {:?} were applied to a field of {:?} cells with ghosts {:?}; prepare them for this field's layout",
                    self.layout.interior_extent(),
                    self.layout.ghosts(),
                    field.layout().interior_extent(),
                    field.layout().ghosts()
                ),
            });
        }
        let prepared = match &mut self.prepared {
            Some(prepared) => prepared,
            None => {
                let Some(((first, root), rest)) = self.assignments.split_first() else {
                    return Ok(());
                };
                let options = AssignOptions {
                    region: Region::Box(*first),
                    ..AssignOptions::default()
                };
                self.prepared.insert(PreparedAssignment::new(
                    field,
                    FILLED_FIELD_LEAF,
                    root,
                    &[],
                    options,
                    rest,
                )?)
            }
        };
        prepared.run(field, &[])?;
        Ok(())
    }

    /// [`Self::apply`] on the GPU where `field` is active: the same masked
    /// assignments launched there (a fill sequence, as a graph's
    /// conditions run on a GPU), so the field stays there. Waits for the
    /// launches. On the host, [`Self::apply`].
    pub fn apply_where_active(&mut self, field: &mut SpatialField<L>) -> SolverResult<()> {
        let device = field.active_device();
        let Device::Gpu(ordinal) = device else {
            return self.apply(field);
        };
        if field.layout() != &self.layout {
            // The same refusal as on the host.
            return self.apply(field);
        }
        let Some(((first, root), rest)) = self.assignments.split_first() else {
            return Ok(());
        };
        let buffer = field.gpu_buffer_mut(device)?;
        let name = field.name().to_string();
        let target = GpuTarget {
            name: &name,
            layout: &self.layout,
            kind: L::KIND,
            device,
            pointer: buffer.pointer,
            len: buffer.len,
        };
        let launches = gpu_launches(
            target,
            FILLED_FIELD_LEAF,
            root,
            &[],
            Region::Box(*first),
            rest,
        )?;
        let stream = GpuStream::new(ordinal)?;
        if let Some(event) = &buffer.ready {
            stream.wait(event)?;
        }
        for launch in &launches {
            // SAFETY: the launches were built over this field's memory on
            // its GPU, which `field` (borrowed mutably) keeps alive and
            // unused by other work until the synchronisation below.
            unsafe { launch.enqueue(&stream)? };
        }
        stream.synchronize()?;
        Ok(())
    }
}

impl BoundaryConditions {
    /// The conditions as a language modifier of the graph field `tag` (of
    /// location `L`): the same values as [`Self::apply`], written as masked
    /// assignments to the ghost layers (and boundary faces) that read the
    /// field's interior, so they run wherever the language runs.
    pub fn modifier<L: Location>(&self, tag: &Tag) -> LanguageModifier {
        let conditions = self.clone();
        let target = tag.clone();
        LanguageModifier::new(
            &format!("boundary conditions of {}", tag.name),
            tag.clone(),
            L::KIND,
            move |layout| {
                conditions
                    .assignments::<L>(layout, target.id(), &target.to_string())
                    .map_err(|e| GraphError::Native(e.to_string()))
            },
        )
    }

    /// The masked assignments that apply the conditions to a field of
    /// location `L` with `layout`, whose IR leaves have id `target` (named
    /// `name`): per side with a condition, in the order -x, +x, -y, +y, -z,
    /// +z, the boundary face (Dirichlet on a face field normal to the side)
    /// and then each ghost layer, outwards. Each layer spans the whole
    /// allocated extent across the side, so corners are filled as by
    /// [`Self::apply`].
    pub fn assignments<L: Location>(
        &self,
        layout: &FieldLayout,
        target: u64,
        name: &str,
    ) -> SolverResult<Vec<MaskedAssignment>> {
        let field: Expr<'static, L> = Expr::symbol(target, name);
        // Expressions of time read this parameter; without one given, a
        // stand-in whose use is refused below.
        let unset_time = Parameter::new("t (not given: BoundaryConditions::with_time)", f64::NAN);
        let time = self.time.as_ref().unwrap_or(&unset_time);
        let grid = layout.patch().grid();
        let mut out = Vec::new();
        for checked in checked_sides::<L>(self, layout, name)? {
            let CheckedSide {
                side,
                condition,
                h,
                n,
                layers,
                on_face,
                gradient,
            } = checked;
            let axis = side.axis;
            // The boundary's position along the axis.
            let boundary = grid.origin()[axis] + if side.plus { grid.lengths()[axis] } else { 0.0 };
            let expression = |e: &BoundaryExpression| -> SolverResult<Expr<'static, L>> {
                let value = e.at::<L>(
                    side,
                    boundary,
                    grid.spacing(),
                    time.expr::<CellCentre>(),
                    name,
                )?;
                if self.time.is_none()
                    && value
                        .node()
                        .parameters()
                        .iter()
                        .any(|p| p.id() == unset_time.id())
                {
                    return Err(SolverError::Setup {
                        equation: name.to_string(),
                        reason: format!(
                            "the boundary value `{}` on side {} reads the time, but no time was given; solvers give theirs, and a direct caller gives one with BoundaryConditions::with_time",
                            e.name(),
                            side.name()
                        ),
                    });
                }
                Ok(value)
            };
            // The value written on a boundary face (Dirichlet on a face
            // field normal to the side); the value a ghost layer at
            // `distance` from its partner gets, from the partner.
            let face_value: Option<Expr<'static, L>> = match &condition {
                BoundaryCondition::Dirichlet(v) if on_face => Some(Expr::constant(*v)),
                BoundaryCondition::DirichletExpression(e) if on_face => Some(expression(e)?),
                _ => None,
            };
            let ghost_value = match &condition {
                BoundaryCondition::DirichletExpression(e) => Some(2.0 * expression(e)?),
                BoundaryCondition::NeumannExpression(e) => Some(expression(e)?),
                BoundaryCondition::FluxExpression { flux, diffusivity } => {
                    Some(expression(flux)? * (-1.0 / diffusivity))
                }
                _ => None,
            };
            // The layer at index `at` along the axis, across the whole
            // allocated extent of the other axes.
            let slab = |at: isize| {
                let mut b: IndexBox = layout.allocated();
                b.lo[axis] = at;
                b.hi[axis] = at + 1;
                b
            };
            let along = |d: isize| {
                let mut offset = [0; 3];
                offset[axis] = d;
                offset
            };
            // The boundary point (faces) or the last interior cell, and the
            // direction out of the domain.
            let (first, outward) = if side.plus { (n - 1, 1) } else { (0, -1) };
            if let Some(v) = face_value {
                out.push((slab(first), v.node().clone()));
            }
            for l in 1..=layers {
                let ghost = first + outward * l;
                // The mirror partner: same distance from the boundary, inside.
                let (partner, distance) = if on_face {
                    (first - outward * l, (2 * l) as f64 * h)
                } else {
                    (first - outward * (l - 1), (2 * l - 1) as f64 * h)
                };
                let mirror = shift(field.clone(), along(partner - ghost));
                let value: Expr<'static, L> = match (&condition, &ghost_value) {
                    (BoundaryCondition::Dirichlet(v), _) => Expr::constant(2.0 * v) - mirror,
                    (BoundaryCondition::Periodic, _) => {
                        // Beyond the plus end: interior point l - 1; beyond
                        // the minus end: n - l.
                        let image = if side.plus { l - 1 } else { n - l };
                        shift(field.clone(), along(image - ghost))
                    }
                    // Twice the value minus the partner.
                    (BoundaryCondition::DirichletExpression(_), Some(twice)) => {
                        twice.clone() - mirror
                    }
                    // The partner plus the distance times the gradient:
                    // an expression's, or the constant one.
                    (_, Some(gradient)) => mirror + distance * gradient.clone(),
                    (_, None) => mirror + Expr::constant(distance * gradient),
                };
                out.push((slab(ghost), value.node().clone()));
            }
        }
        Ok(out)
    }
}

/// A side to fill, checked once: its
/// condition, the spacing `h` and interior points `n` along its axis, the
/// ghost layers to write, whether the field has a point on the boundary
/// itself (a face field normal to the side), and the normal derivative a
/// Neumann or flux condition imposes.
#[derive(Debug, Clone)]
struct CheckedSide {
    side: Side,
    condition: BoundaryCondition,
    h: f64,
    n: isize,
    layers: isize,
    on_face: bool,
    gradient: f64,
}

/// The sides `conditions` fill on `L` fields with `layout`, in the order
/// -x, +x, -y, +y, -z, +z: each side with a condition on the domain's
/// boundary, and each periodic axis of the grid when the patch spans it.
/// Errors (naming the field `name`) for a periodic condition on a
/// non-periodic axis, a boundary value that is not finite, a flux
/// condition without a finite non-zero diffusivity, and ghost layers that
/// are missing or outnumber the interior points they mirror.
fn checked_sides<L: Location>(
    conditions: &BoundaryConditions,
    layout: &FieldLayout,
    name: &str,
) -> SolverResult<SmallVec<[CheckedSide; 6]>> {
    let patch = layout.patch();
    let grid = patch.grid();
    let setup = |reason: String| SolverError::Setup {
        equation: name.to_string(),
        reason,
    };
    let mut sides = SmallVec::new();
    for side in Side::ALL {
        let axis = side.axis;
        let periodic_axis = grid.periodic()[axis] && grid.active_dimensions()[axis];
        let condition = if periodic_axis {
            Some(BoundaryCondition::Periodic)
        } else {
            conditions.get(side).cloned()
        };
        let Some(condition) = condition else { continue };
        if condition == BoundaryCondition::Periodic {
            if !periodic_axis {
                return Err(setup(format!(
                    "a periodic condition on side {} needs a grid periodic along that axis (Grid::with_periodic)",
                    side.name()
                )));
            }
            if patch.offset()[axis] != 0 || patch.cells()[axis] != grid.cells()[axis] {
                continue; // the images across the seam live on other patches
            }
        } else {
            let on_boundary = if side.plus {
                patch.plus_boundary()[axis]
            } else {
                patch.minus_boundary()[axis]
            };
            if !on_boundary {
                continue;
            }
        }
        let value = match condition {
            BoundaryCondition::Dirichlet(v) => Some(("Dirichlet value", v)),
            BoundaryCondition::Neumann(q) => Some(("Neumann gradient", q)),
            BoundaryCondition::Flux { flux, .. } => Some(("flux", flux)),
            _ => None,
        };
        if let Some((what, v)) = value
            && !v.is_finite()
        {
            return Err(setup(format!(
                "the {what} on side {} is {v}: boundary values must be finite",
                side.name()
            )));
        }
        let h = grid.spacing()[axis];
        let n = layout.interior_extent()[axis] as isize;
        let layers = if side.plus {
            layout.ghosts().plus[axis]
        } else {
            layout.ghosts().minus[axis]
        } as isize;
        let on_face = L::KIND.face_axis() == Some(axis) && condition != BoundaryCondition::Periodic;
        let diffusivity = match condition {
            BoundaryCondition::Flux { diffusivity, .. }
            | BoundaryCondition::FluxExpression { diffusivity, .. } => Some(diffusivity),
            _ => None,
        };
        if let Some(k) = diffusivity
            && (k == 0.0 || !k.is_finite())
        {
            return Err(setup(format!(
                "a flux condition on side {} needs a finite, non-zero diffusivity",
                side.name()
            )));
        }
        let gradient = match condition {
            BoundaryCondition::Neumann(q) => q,
            BoundaryCondition::Flux { flux, diffusivity } => -flux / diffusivity,
            _ => 0.0,
        };
        let writes_face = on_face
            && matches!(
                condition,
                BoundaryCondition::Dirichlet(_) | BoundaryCondition::DirichletExpression(_)
            );
        if layers == 0 && !writes_face {
            // Nothing would be written: the condition would be silently dropped.
            return Err(setup(format!(
                "the {condition:?} condition on side {} cannot be applied: the field has 0 ghost layers there; build its patch with at least 1 ghost layer",
                side.name()
            )));
        }
        if layers > n {
            return Err(setup(format!(
                "the {condition:?} condition on side {} mirrors {layers} ghost layers, but the patch has only {n} interior points along that axis; use fewer ghost layers or more cells",
                side.name()
            )));
        }
        sides.push(CheckedSide {
            side,
            condition,
            h,
            n,
            layers,
            on_face,
            gradient,
        });
    }
    Ok(sides)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::{CellCentre, Device, GhostWidth, Grid, Patch, XFace, YFace};

    fn filled<L: Location>(patch: &Patch) -> SpatialField<L> {
        let mut field = SpatialField::<L>::new("phi", patch, Device::Cpu).unwrap();
        for (i, v) in field.values_mut().unwrap().iter_mut().enumerate() {
            *v = ((i * 7919) % 1000) as f64 / 250.0 - 2.0;
        }
        field
    }

    /// The conditions applied at once (a small field: the CPU back end's
    /// ghost fill) and one masked assignment at a time through the general
    /// kernel path: the same bits.
    fn same<L: Location>(patch: &Patch, conditions: &BoundaryConditions) {
        let (mut separate, mut at_once) = (filled::<L>(patch), filled::<L>(patch));
        let leaf = separate.id();
        let assignments = conditions
            .assignments::<L>(separate.layout(), leaf, "phi")
            .unwrap();
        for (region, node) in &assignments {
            let options = AssignOptions {
                region: Region::Box(*region),
                ..AssignOptions::default()
            };
            watershed_operators::assign_node_then(&mut separate, leaf, node, &[], options, &[])
                .unwrap();
        }
        conditions.apply(&mut at_once).unwrap();
        let (a, b) = (separate.values().unwrap(), at_once.values().unwrap());
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{conditions:?} on {}",
            L::KIND
        );
    }

    #[test]
    fn conditions_at_once_equal_one_masked_assignment_at_a_time_bit_for_bit() {
        let walls = BoundaryConditions::new()
            .with(Side::MINUS_X, BoundaryCondition::Dirichlet(0.3))
            .with(Side::PLUS_X, BoundaryCondition::Neumann(-1.5))
            .with(
                Side::MINUS_Y,
                BoundaryCondition::Flux {
                    flux: 0.2,
                    diffusivity: 0.4,
                },
            )
            .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(-2.0));
        for ghosts in [1, 2] {
            let grid = Grid::new([5, 4, 1], [0.5, 0.25, 1.0], [0.0; 3]).unwrap();
            let patch = Patch::new(&grid, [0; 3], [5, 4, 1], GhostWidth::uniform(ghosts)).unwrap();
            same::<CellCentre>(&patch, &walls);
            same::<XFace>(&patch, &walls);
            same::<YFace>(&patch, &walls);
            let periodic = Grid::new([4, 6, 1], [1.0; 3], [0.0; 3])
                .unwrap()
                .with_periodic([true, false, false]);
            let patch =
                Patch::new(&periodic, [0; 3], [4, 6, 1], GhostWidth::uniform(ghosts)).unwrap();
            same::<CellCentre>(
                &patch,
                &walls
                    .clone()
                    .with(Side::MINUS_X, BoundaryCondition::Periodic),
            );
        }
    }
}
