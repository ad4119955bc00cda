//! Cell-centred fields derived from a flow's staggered velocity, written
//! beside the solution in every dump so that ParaView colours, glyphs and
//! traces streamlines without filters.
//!
//! The solver keeps u, v and w on the faces normal to their axes, three
//! different grids; no single ParaView dataset holds all three. Each dump
//! of a flow case therefore also holds, at the cell centres (in the main
//! `CASE.xmf`):
//!
//! - `velocity`: the vector (u, v, w), each component the mean of the two
//!   faces of the cell along its axis (w = 0 in a 2D case);
//! - `speed`: its magnitude;
//! - `vorticity`: the curl of that cell-centred velocity by second-order
//!   differences: central inside and across periodic sides, one-sided
//!   (-3 q0 + 4 q1 - q2) / 2h next to a wall. A 2D case gets the scalar
//!   dv/dx - du/dy, a 3D case the vector.
//!
//! They are views, not state: a restart never reads them, and each dataset
//! says so in its `derived` attribute (and the XDMF in an `Information`
//! element), with how it was computed.

use crate::error::CaseResult;
use hdf5::types::VarLenUnicode;
use std::path::PathBuf;
use watershed_fields::{Location, LocationKind, SpatialField, on_face};
use watershed_io::attributes::hdf5_error;
use watershed_io::dumps::DumpedField;
use watershed_solvers::IncompressibleFlow;

/// How `velocity` is derived (its `derived` attribute).
pub const VELOCITY_DERIVATION: &str =
    "derived for viewing: each component the mean of the two staggered faces of the cell";
/// How `speed` is derived.
pub const SPEED_DERIVATION: &str = "derived for viewing: the magnitude of `velocity`";
/// How `vorticity` is derived.
pub const VORTICITY_DERIVATION: &str = "derived for viewing: the curl of `velocity` by second-order differences (central; one-sided next to a wall); dv/dx - du/dy in 2D";

/// How `body_mask` is derived.
pub const BODY_MASK_DERIVATION: &str = "derived for viewing: 1 where the cell centre lies inside an immersed body (signed distance < 0), else 0";
/// How `body_distance` is derived.
pub const BODY_DISTANCE_DERIVATION: &str = "derived for viewing: the signed distance of the cell centre to the nearest immersed body (negative inside; its 0 contour is the surface)";

/// A velocity at the cell centres of a whole grid, each component stored
/// x fastest (`i + nx (j + ny k)`).
#[derive(Debug, Clone, PartialEq)]
pub struct CellVelocity {
    /// Cells per axis.
    pub cells: [usize; 3],
    /// Cell widths per axis.
    pub spacing: [f64; 3],
    /// The grid's origin (its lower corner).
    pub origin: [f64; 3],
    /// Whether each axis is periodic.
    pub periodic: [bool; 3],
    /// Whether each axis is resolved (more than one cell).
    pub active: [bool; 3],
    /// u, v, w at the cell centres (zero along an unresolved axis).
    pub components: [Vec<f64>; 3],
}

impl CellVelocity {
    /// Averages the staggered velocity of `flow` to the cell centres.
    pub fn of_flow(flow: &IncompressibleFlow) -> CaseResult<Self> {
        let mut velocity: Option<CellVelocity> = None;
        for &axis in flow.active_axes() {
            let mut one = on_face!(axis, F => {
                flow.with_velocity::<F, _>(|u| face_to_cells(u, axis))??
            });
            match &mut velocity {
                Some(target) => target.components[axis] = std::mem::take(&mut one.components[axis]),
                None => velocity = Some(one),
            }
        }
        Ok(velocity.unwrap_or(CellVelocity {
            cells: [0; 3],
            spacing: [1.0; 3],
            origin: [0.0; 3],
            periodic: [false; 3],
            active: [false; 3],
            components: [Vec::new(), Vec::new(), Vec::new()],
        }))
    }

    fn len(&self) -> usize {
        self.cells.iter().product()
    }

    fn index(&self, i: [usize; 3]) -> usize {
        i[0] + self.cells[0] * (i[1] + self.cells[1] * i[2])
    }

    /// The vector at every cell, interleaved (x, y, z) per cell.
    pub fn interleaved(&self) -> Vec<f64> {
        (0..self.len())
            .flat_map(|n| [0, 1, 2].map(|c| self.components[c][n]))
            .collect()
    }

    /// The magnitude at every cell.
    pub fn speed(&self) -> Vec<f64> {
        (0..self.len())
            .map(|n| {
                let [u, v, w] = [0, 1, 2].map(|c| self.components[c][n]);
                (u * u + v * v + w * w).sqrt()
            })
            .collect()
    }

    /// d(component c)/d(axis b) at every cell (see the module docs).
    pub fn derivative(&self, c: usize, b: usize) -> Vec<f64> {
        let n = self.cells[b];
        let q = &self.components[c];
        let h = self.spacing[b];
        let mut out = vec![0.0; self.len()];
        if !self.active[b] || n < 2 {
            return out;
        }
        for k in 0..self.cells[2] {
            for j in 0..self.cells[1] {
                for x in 0..self.cells[0] {
                    let i = [x, j, k];
                    let at = |m: usize| {
                        let mut shifted = i;
                        shifted[b] = m;
                        q[self.index(shifted)]
                    };
                    let m = i[b];
                    let d = if self.periodic[b] {
                        (at((m + 1) % n) - at((m + n - 1) % n)) / (2.0 * h)
                    } else if m > 0 && m + 1 < n {
                        (at(m + 1) - at(m - 1)) / (2.0 * h)
                    } else if n == 2 {
                        (at(1) - at(0)) / h
                    } else if m == 0 {
                        (-3.0 * at(0) + 4.0 * at(1) - at(2)) / (2.0 * h)
                    } else {
                        (3.0 * at(n - 1) - 4.0 * at(n - 2) + at(n - 3)) / (2.0 * h)
                    };
                    out[self.index(i)] = d;
                }
            }
        }
        out
    }

    /// The vorticity: (x, y, z) interleaved per cell in 3D, the scalar
    /// dv/dx - du/dy in 2D (`components` 3 or 1).
    pub fn vorticity(&self) -> (Vec<f64>, usize) {
        let d = |c, b| self.derivative(c, b);
        let omega_z: Vec<f64> = d(1, 0).iter().zip(d(0, 1)).map(|(a, b)| a - b).collect();
        if !self.active[2] {
            return (omega_z, 1);
        }
        let omega_x: Vec<f64> = d(2, 1).iter().zip(d(1, 2)).map(|(a, b)| a - b).collect();
        let omega_y: Vec<f64> = d(0, 2).iter().zip(d(2, 0)).map(|(a, b)| a - b).collect();
        let interleaved = (0..self.len())
            .flat_map(|n| [omega_x[n], omega_y[n], omega_z[n]])
            .collect();
        (interleaved, 3)
    }
}

/// One face component averaged to the cell centres, in a
/// [`CellVelocity`] of its own.
fn face_to_cells<L: Location>(u: &SpatialField<L>, axis: usize) -> CaseResult<CellVelocity> {
    let layout = u.layout();
    let patch = layout.patch();
    let grid = patch.grid();
    let cells = patch.cells();
    let extent = layout.interior_extent();
    let values = u.values()?;
    let mut out = Vec::with_capacity(cells.iter().product());
    for k in 0..cells[2] {
        for j in 0..cells[1] {
            for i in 0..cells[0] {
                let lo = [i, j, k];
                let mut hi = lo;
                // Without a boundary face on +axis (periodic), the face
                // after the last cell is the first one.
                hi[axis] = (hi[axis] + 1) % extent[axis];
                let at = |p: [usize; 3]| values[layout.linear_index(p.map(|v| v as isize))];
                out.push(0.5 * (at(lo) + at(hi)));
            }
        }
    }
    let mut components = [0, 1, 2].map(|_| vec![0.0; out.len()]);
    components[axis] = out;
    Ok(CellVelocity {
        cells,
        spacing: grid.spacing(),
        origin: grid.origin(),
        periodic: grid.periodic(),
        active: grid.active_dimensions(),
        components,
    })
}

/// The fields derived from a flow for viewing, computed once over the
/// whole grid and written whole or patch by patch (a dump per rank).
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedFlowFields {
    /// The grid's cells, origin and spacing (and the cell velocity).
    velocity: CellVelocity,
    /// Name, values (x fastest, components interleaved), components, how.
    fields: Vec<(&'static str, Vec<f64>, usize, &'static str)>,
}

impl DerivedFlowFields {
    /// `velocity`, `speed` and `vorticity` of `flow` at the cell centres,
    /// and with immersed bodies `body_mask` and `body_distance` (see the
    /// module docs).
    pub fn of_flow(flow: &IncompressibleFlow) -> CaseResult<Self> {
        let velocity = CellVelocity::of_flow(flow)?;
        let (vorticity, vorticity_components) = velocity.vorticity();
        let mut fields = vec![
            ("velocity", velocity.interleaved(), 3, VELOCITY_DERIVATION),
            ("speed", velocity.speed(), 1, SPEED_DERIVATION),
            (
                "vorticity",
                vorticity,
                vorticity_components,
                VORTICITY_DERIVATION,
            ),
        ];
        if !flow.bodies().is_empty() {
            let [nx, ny, nz] = velocity.cells;
            let mut distance = Vec::with_capacity(nx * ny * nz);
            for k in 0..nz {
                for j in 0..ny {
                    for i in 0..nx {
                        let centre = [0, 1, 2].map(|a| {
                            velocity.origin[a] + ([i, j, k][a] as f64 + 0.5) * velocity.spacing[a]
                        });
                        distance.push(flow.body_distance(centre).unwrap_or(f64::INFINITY));
                    }
                }
            }
            let mask: Vec<f64> = distance
                .iter()
                .map(|&d| if d < 0.0 { 1.0 } else { 0.0 })
                .collect();
            fields.push(("body_mask", mask, 1, BODY_MASK_DERIVATION));
            fields.push(("body_distance", distance, 1, BODY_DISTANCE_DERIVATION));
        }
        Ok(DerivedFlowFields { velocity, fields })
    }

    /// Writes every field into `group`: over the whole grid, or (`window`:
    /// `(offset, cells)`) over the box of `cells` cells from global cell
    /// `offset`, with that box's origin.
    pub fn write(
        &self,
        group: &hdf5::Group,
        window: Option<([usize; 3], [usize; 3])>,
    ) -> CaseResult<Vec<DumpedField>> {
        let whole = self.velocity.cells;
        let (offset, cells) = window.unwrap_or(([0; 3], whole));
        if (0..3).any(|a| {
            offset[a]
                .checked_add(cells[a])
                .is_none_or(|end| end > whole[a])
        }) {
            return Err(crate::error::CaseError::Usage(format!(
                "a window of {cells:?} cells from {offset:?} does not lie in the flow's {whole:?} cells"
            )));
        }
        let origin = [0, 1, 2]
            .map(|a| self.velocity.origin[a] + (offset[a] as f64 + 0.5) * self.velocity.spacing[a]);
        let mut written = Vec::with_capacity(self.fields.len());
        for (name, data, components, how) in &self.fields {
            let part;
            let values = if window.is_none() {
                data.as_slice()
            } else {
                let row = cells[0] * components;
                let mut cut = Vec::with_capacity(cells.iter().product::<usize>() * components);
                for k in offset[2]..offset[2] + cells[2] {
                    for j in offset[1]..offset[1] + cells[1] {
                        let start = (offset[0] + whole[0] * (j + whole[1] * k)) * components;
                        cut.extend_from_slice(&data[start..start + row]);
                    }
                }
                part = cut;
                part.as_slice()
            };
            written.push(write_cell_dataset(
                group,
                name,
                (cells, origin, self.velocity.spacing),
                *components,
                values,
                how,
            )?);
        }
        Ok(written)
    }
}

/// Writes `velocity`, `speed` and `vorticity` of `flow` at the cell
/// centres into `group` (see the module docs).
pub fn dump_derived_flow_fields(
    flow: &IncompressibleFlow,
    group: &hdf5::Group,
) -> CaseResult<Vec<DumpedField>> {
    DerivedFlowFields::of_flow(flow)?.write(group, None)
}

/// Writes `data` (x fastest, `components` interleaved) on `cells` cells,
/// the first centred at `first_centre`, `spacing` apart (`box_`), as a
/// dataset of shape `(nz, ny, nx[, components])` marked as derived, with
/// the `location`, `origin` (the first cell's centre) and `spacing`
/// attributes of a solution field.
fn write_cell_dataset(
    group: &hdf5::Group,
    name: &str,
    box_: ([usize; 3], [f64; 3], [f64; 3]),
    components: usize,
    data: &[f64],
    how: &str,
) -> CaseResult<DumpedField> {
    let file = PathBuf::from(group.filename());
    let err = |e| hdf5_error(&file, name, e);
    let (cells, first_centre, spacing) = box_;
    let mut shape = vec![cells[2], cells[1], cells[0]];
    if components > 1 {
        shape.push(components);
    }
    let array = ndarray::ArrayViewD::from_shape(shape, data)
        .map_err(|e| err(hdf5::Error::from(e.to_string())))?;
    let dataset = group
        .new_dataset_builder()
        .fletcher32()
        .with_data(array)
        .create(name)
        .map_err(err)?;
    for (attribute, text) in [
        ("location", LocationKind::CellCentre.name()),
        ("field_name", name),
        ("derived", how),
    ] {
        let value: VarLenUnicode = text
            .parse()
            .map_err(|e| err(hdf5::Error::from(format!("{e}"))))?;
        dataset
            .new_attr::<VarLenUnicode>()
            .create(attribute)
            .and_then(|a| a.write_scalar(&value))
            .map_err(|e| hdf5_error(&file, &format!("{name}/{attribute}"), e))?;
    }
    for (attribute, value) in [("origin", first_centre), ("spacing", spacing)] {
        dataset
            .new_attr_builder()
            .with_data(&value)
            .create(attribute)
            .map_err(|e| hdf5_error(&file, &format!("{name}/{attribute}"), e))?;
    }
    Ok(DumpedField {
        name: name.into(),
        location: LocationKind::CellCentre,
        extent: cells,
        components,
        derived: Some(how.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(
        cells: [usize; 3],
        periodic: [bool; 3],
        f: impl Fn([f64; 3]) -> [f64; 3],
    ) -> CellVelocity {
        let spacing = [0.1, 0.2, 0.3];
        let mut components = [Vec::new(), Vec::new(), Vec::new()];
        for k in 0..cells[2] {
            for j in 0..cells[1] {
                for i in 0..cells[0] {
                    let x = [i, j, k].map(|n| n as f64);
                    let centre = [0, 1, 2].map(|a| (x[a] + 0.5) * spacing[a]);
                    let value = f(centre);
                    for c in 0..3 {
                        components[c].push(value[c]);
                    }
                }
            }
        }
        CellVelocity {
            cells,
            spacing,
            origin: [0.0; 3],
            periodic,
            active: cells.map(|n| n > 1),
            components,
        }
    }

    #[test]
    fn second_order_differences_are_exact_for_quadratics_up_to_the_walls() {
        // u = x^2 + y z, v = 3 x y, w = z^2 - x: second-order one-sided
        // and central differences are exact for them, walls included.
        let velocity = field([5, 4, 3], [false; 3], |[x, y, z]| {
            [x * x + y * z, 3.0 * x * y, z * z - x]
        });
        let (omega, components) = velocity.vorticity();
        assert_eq!(components, 3);
        for k in 0..3 {
            for j in 0..4 {
                for i in 0..5 {
                    let [y, z] = [(j as f64 + 0.5) * 0.2, (k as f64 + 0.5) * 0.3];
                    // curl = (dw/dy - dv/dz, du/dz - dw/dx, dv/dx - du/dy)
                    let exact = [0.0, y + 1.0, 3.0 * y - z];
                    let n = i + 5 * (j + 4 * k);
                    for c in 0..3 {
                        let got = omega[3 * n + c];
                        assert!(
                            (got - exact[c]).abs() < 1e-12,
                            "cell {i} {j} {k} component {c}: {got} vs {}",
                            exact[c]
                        );
                    }
                }
            }
        }
        let speed = velocity.speed();
        let [u, v, w] = [0, 1, 2].map(|c| velocity.components[c][7]);
        assert_eq!(speed[7], (u * u + v * v + w * w).sqrt());
        assert_eq!(&velocity.interleaved()[21..24], &[u, v, w]);
    }

    #[test]
    fn a_2d_field_has_the_scalar_vorticity_and_periodic_sides_wrap() {
        // One period of sin along x on 8 cells, periodic: the central
        // difference wraps around, so d(sin)/dx = cos * sin(h)/h exactly.
        let h = 0.1;
        let length = 8.0 * h;
        let k = 2.0 * std::f64::consts::PI / length;
        let velocity = field([8, 4, 1], [true, false, false], |[x, y, _]| {
            [y, (k * x).sin(), 0.0]
        });
        let (omega, components) = velocity.vorticity();
        assert_eq!(components, 1);
        assert_eq!(omega.len(), 32);
        for j in 0..4 {
            for i in 0..8 {
                let x = (i as f64 + 0.5) * h;
                let exact = k * (k * x).cos() * (k * h).sin() / (k * h) - 1.0;
                let got = omega[i + 8 * j];
                assert!(
                    (got - exact).abs() < 1e-12,
                    "cell {i} {j}: {got} vs {exact}"
                );
            }
        }
    }
}
