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

use crate::error::{SolverError, SolverResult};
use smallvec::SmallVec;
use watershed_exprgraph::{GraphError, LanguageModifier, MaskedAssignment, Tag};
use watershed_fields::{FieldLayout, IndexBox, Location, SpatialField};
use watershed_operators::{AssignOptions, Expr, PreparedAssignment, Region, Side, shift};

/// A condition on one side of the domain.
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

/// Conditions on the six sides (`None`: the ghosts are left as they are).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BoundaryConditions {
    sides: [Option<BoundaryCondition>; 6],
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
            sides: [Some(condition); 6],
        }
    }

    /// Sets the condition of `side`.
    pub fn with(mut self, side: Side, condition: BoundaryCondition) -> Self {
        self.sides[side_index(side)] = Some(condition);
        self
    }

    /// The condition of `side`.
    pub fn get(&self, side: Side) -> Option<BoundaryCondition> {
        self.sides[side_index(side)]
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
}

impl BoundaryConditions {
    /// The conditions as a language modifier of the graph field `tag` (of
    /// location `L`): the same values as [`Self::apply`], written as masked
    /// assignments to the ghost layers (and boundary faces) that read the
    /// field's interior, so they run wherever the language runs.
    pub fn modifier<L: Location>(&self, tag: &Tag) -> LanguageModifier {
        let conditions = *self;
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
            let face_value = match condition {
                BoundaryCondition::Dirichlet(v) if on_face => Some(v),
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
                out.push((slab(first), Expr::<L>::constant(v).node().clone()));
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
                let value: Expr<'static, L> = match condition {
                    BoundaryCondition::Dirichlet(v) => Expr::constant(2.0 * v) - mirror,
                    BoundaryCondition::Neumann(_) | BoundaryCondition::Flux { .. } => {
                        mirror + Expr::constant(distance * gradient)
                    }
                    BoundaryCondition::Periodic => {
                        // Beyond the plus end: interior point l - 1; beyond
                        // the minus end: n - l.
                        let image = if side.plus { l - 1 } else { n - l };
                        shift(field.clone(), along(image - ghost))
                    }
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
#[derive(Debug, Clone, Copy)]
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
            conditions.get(side)
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
            BoundaryCondition::Periodic => None,
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
        let gradient = match condition {
            BoundaryCondition::Neumann(q) => q,
            BoundaryCondition::Flux { flux, diffusivity } => {
                if diffusivity == 0.0 || !diffusivity.is_finite() {
                    return Err(setup(format!(
                        "a flux condition on side {} needs a finite, non-zero diffusivity",
                        side.name()
                    )));
                }
                -flux / diffusivity
            }
            _ => 0.0,
        };
        let writes_face = on_face && matches!(condition, BoundaryCondition::Dirichlet(_));
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
    fn same<L: Location>(patch: &Patch, conditions: BoundaryConditions) {
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
            same::<CellCentre>(&patch, walls);
            same::<XFace>(&patch, walls);
            same::<YFace>(&patch, walls);
            let periodic = Grid::new([4, 6, 1], [1.0; 3], [0.0; 3])
                .unwrap()
                .with_periodic([true, false, false]);
            let patch =
                Patch::new(&periodic, [0; 3], [4, 6, 1], GhostWidth::uniform(ghosts)).unwrap();
            same::<CellCentre>(
                &patch,
                walls.with(Side::MINUS_X, BoundaryCondition::Periodic),
            );
        }
    }
}
