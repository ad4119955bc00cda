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
use hdf5::{Hyperslab, SliceOrIndex};
use std::path::PathBuf;
use watershed_fields::io::chunk_planes;
use watershed_fields::{Grid, Location, LocationKind, Patch, SpatialField, on_face};
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

/// A box of cells of a grid: its first cell and cells per axis.
pub type CellBox = ([usize; 3], [usize; 3]);

/// The cells around a box that the derived fields read, along one axis:
/// two more each side (a one-sided difference at a wall reads two cells
/// inward), cut at walls and wrapped across a periodic side.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reach {
    /// The first sampled cell, unwrapped: on a periodic axis it may lie
    /// before the grid's first cell or past its last.
    start: isize,
    /// Cells sampled.
    len: usize,
    /// The grid's cells along the axis.
    cells: usize,
    periodic: bool,
}

impl Reach {
    /// The reach of the box `[first, first + extent)` on an axis of
    /// `cells` cells, resolved (`active`) or not.
    fn of_box(first: usize, extent: usize, cells: usize, periodic: bool, active: bool) -> Self {
        let whole = Reach {
            start: 0,
            len: cells,
            cells,
            periodic,
        };
        if !active {
            return whole;
        }
        let (lo, hi) = (first as isize - 2, (first + extent) as isize + 2);
        if periodic {
            if hi - lo >= cells as isize {
                whole
            } else {
                Reach {
                    start: lo,
                    len: (hi - lo) as usize,
                    cells,
                    periodic,
                }
            }
        } else {
            let (lo, hi) = (lo.max(0), hi.min(cells as isize));
            Reach {
                start: lo,
                len: (hi - lo) as usize,
                cells,
                periodic,
            }
        }
    }

    /// Where the grid's cell `cell` lies in the sampled cells.
    fn local(&self, cell: usize) -> usize {
        let offset = cell as isize - self.start;
        if self.periodic {
            offset.rem_euclid(self.cells as isize) as usize
        } else {
            offset as usize
        }
    }

    /// The grid's cell that the sampled cell `local` is.
    fn global(&self, local: usize) -> usize {
        (self.start + local as isize).rem_euclid(self.cells as isize) as usize
    }
}

/// `window` (the whole grid of `cells` when `None`), or an error when it
/// does not lie in the grid.
fn checked_window(cells: [usize; 3], window: Option<CellBox>) -> CaseResult<CellBox> {
    let (first, extent) = window.unwrap_or(([0; 3], cells));
    if (0..3).any(|a| {
        first[a]
            .checked_add(extent[a])
            .is_none_or(|end| end > cells[a])
    }) {
        return Err(crate::error::CaseError::Usage(format!(
            "a window of {extent:?} cells from {first:?} does not lie in the flow's {cells:?} cells"
        )));
    }
    Ok((first, extent))
}

/// The grid of `flow` (nothing is read).
fn flow_grid(flow: &IncompressibleFlow) -> Grid {
    flow.graph().patch().grid().clone()
}

/// The patch of `flow`'s layout that this rank owns and that holds every
/// cell of `window`, or `None` (an undecomposed flow, or a box across
/// patches).
fn owned_patch_around(flow: &IncompressibleFlow, window: CellBox) -> CaseResult<Option<Patch>> {
    let (Some(layout), Some(owned)) = (flow.patch_layout(), flow.owned_patches()) else {
        return Ok(None);
    };
    let (first, extent) = window;
    for index in owned {
        let patch = layout.patch(index)?;
        let (offset, cells) = (patch.offset(), patch.cells());
        if (0..3).all(|a| first[a] >= offset[a] && first[a] + extent[a] <= offset[a] + cells[a]) {
            return Ok(Some(patch));
        }
    }
    Ok(None)
}

/// A flow's velocity at the cell centres of a box of its grid and of the
/// cells around it that the differences read ([`Reach`]), each component
/// stored x fastest over the sampled cells.
#[derive(Debug, Clone, PartialEq)]
pub struct CellVelocity {
    /// The whole grid's cells per axis.
    cells: [usize; 3],
    /// Cell widths per axis.
    spacing: [f64; 3],
    /// The grid's origin (its lower corner).
    origin: [f64; 3],
    /// Whether each axis is periodic.
    periodic: [bool; 3],
    /// Whether each axis is resolved (more than one cell).
    active: [bool; 3],
    /// The box whose cells the derived fields are for.
    window: CellBox,
    /// The sampled cells per axis.
    reach: [Reach; 3],
    /// u, v, w at the sampled cells (zero along an unresolved axis).
    components: [Vec<f64>; 3],
}

impl CellVelocity {
    /// Averages the staggered velocity of `flow` to the cell centres of
    /// `window` (the whole grid when `None`) and of the cells around it
    /// that the differences read; an error when the box does not lie in
    /// the grid.
    ///
    /// A box inside one of this rank's patches of a flow whose state lives
    /// on the patches is sampled from that patch (its velocity with the
    /// seams exchanged: [`IncompressibleFlow::with_patch_velocity`]), so
    /// nothing of the whole domain is read: a dump per rank forms no
    /// whole field. Otherwise the whole domain's velocity is read.
    pub fn of_flow(flow: &IncompressibleFlow, window: Option<CellBox>) -> CaseResult<Self> {
        let mut velocity = CellVelocity::on_grid(&flow_grid(flow), window)?;
        let home = match window {
            Some(window) => owned_patch_around(flow, window)?,
            None => None,
        };
        for &axis in flow.active_axes() {
            let on_patch = match &home {
                Some(patch) => on_face!(axis, F => {
                    flow.with_patch_velocity::<F, _>(patch, |u| velocity.face_to_cells_on_patch(u, axis))?
                }),
                None => None,
            };
            velocity.components[axis] = match on_patch {
                Some(values) => values?,
                None => on_face!(axis, F => {
                    flow.with_velocity::<F, _>(|u| velocity.face_to_cells(u, axis))??
                }),
            };
        }
        // The components the flow does not have are zero.
        let sampled = velocity.reach.iter().map(|r| r.len).product();
        for component in &mut velocity.components {
            if component.is_empty() {
                component.resize(sampled, 0.0);
            }
        }
        Ok(velocity)
    }

    /// A velocity with no values yet on the cells of `grid` that `window`
    /// reaches (the whole grid when `None`); an error when the box does
    /// not lie in the grid.
    fn on_grid(grid: &Grid, window: Option<CellBox>) -> CaseResult<Self> {
        CellVelocity::empty(
            grid.cells(),
            grid.spacing(),
            grid.origin(),
            grid.periodic(),
            grid.active_dimensions(),
            window,
        )
    }

    /// A velocity with no values yet on the cells `window` reaches (the
    /// whole grid of `cells` when `None`).
    fn empty(
        cells: [usize; 3],
        spacing: [f64; 3],
        origin: [f64; 3],
        periodic: [bool; 3],
        active: [bool; 3],
        window: Option<CellBox>,
    ) -> CaseResult<Self> {
        let (first, extent) = checked_window(cells, window)?;
        let reach =
            [0, 1, 2].map(|a| Reach::of_box(first[a], extent[a], cells[a], periodic[a], active[a]));
        Ok(CellVelocity {
            cells,
            spacing,
            origin,
            periodic,
            active,
            window: (first, extent),
            reach,
            components: [Vec::new(), Vec::new(), Vec::new()],
        })
    }

    /// Component `axis` (`u` on its faces) at the sampled cell centres:
    /// the mean of the cell's two faces along `axis`.
    fn face_to_cells<L: Location>(&self, u: &SpatialField<L>, axis: usize) -> CaseResult<Vec<f64>> {
        let layout = u.layout();
        let extent = layout.interior_extent();
        let values = u.values()?;
        let (strides, ghosts) = (layout.strides(), layout.ghosts().minus);
        // The linear index of the face at interior index `p`.
        let index =
            |p: [usize; 3]| -> usize { (0..3).map(|a| (p[a] + ghosts[a]) * strides[a]).sum() };
        let [rx, ry, rz] = &self.reach;
        let mut out = Vec::with_capacity(rx.len * ry.len * rz.len);
        for k in 0..rz.len {
            for j in 0..ry.len {
                for i in 0..rx.len {
                    let lo = [rx.global(i), ry.global(j), rz.global(k)];
                    let mut hi = lo;
                    // Without a boundary face on +axis (periodic), the face
                    // after the last cell is the first one.
                    hi[axis] = (hi[axis] + 1) % extent[axis];
                    out.push(0.5 * (values[index(lo)] + values[index(hi)]));
                }
            }
        }
        Ok(out)
    }

    /// [`Self::face_to_cells`] from `u` on a patch (the box's), whose
    /// ghosts hold the whole domain's values there (periodic images
    /// included): each sampled cell's faces are read at the position
    /// nearest the patch, periodic images considered. A sampled cell
    /// whose faces the patch does not hold (beyond its ghosts: never
    /// read by a box inside a patch of three or more cells along each
    /// axis, see [`Reach`]) is NaN, which would show in the derived
    /// values rather than pass for one.
    fn face_to_cells_on_patch<L: Location>(
        &self,
        u: &SpatialField<L>,
        axis: usize,
    ) -> CaseResult<Vec<f64>> {
        let layout = u.layout();
        let values = u.values()?;
        let held = layout.allocated();
        let offset = layout.patch().offset().map(|o| o as isize);
        // Along each axis, the patch's position of sampled cell `local`
        // (its face there; `None` when the patch holds neither it nor its
        // next face along `axis`).
        let positions: [Vec<Option<isize>>; 3] = [0, 1, 2].map(|a| {
            let reach = &self.reach[a];
            let next = isize::from(a == axis);
            (0..reach.len)
                .map(|local| {
                    let cell = reach.global(local) as isize - offset[a];
                    let period = reach.cells as isize;
                    let images: &[isize] = if reach.periodic { &[0, -1, 1] } else { &[0] };
                    images
                        .iter()
                        .map(|image| cell + image * period)
                        .find(|&p| p >= held.lo[a] && p + next < held.hi[a])
                })
                .collect()
        });
        let mut out = Vec::with_capacity(self.reach.iter().map(|r| r.len).product());
        for &k in &positions[2] {
            for &j in &positions[1] {
                for &i in &positions[0] {
                    out.push(match (i, j, k) {
                        (Some(i), Some(j), Some(k)) => {
                            let lo = [i, j, k];
                            let mut hi = lo;
                            hi[axis] += 1;
                            0.5 * (values[layout.linear_index(lo)]
                                + values[layout.linear_index(hi)])
                        }
                        _ => f64::NAN,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Calls `visit` with the position among a component's values of
    /// every cell of the window and the cell's position in the window, x
    /// fastest.
    fn for_each_cell(&self, mut visit: impl FnMut(usize, [usize; 3])) {
        let (first, extent) = self.window;
        let [lx, ly, lz] = [0, 1, 2].map(|a| {
            (0..extent[a])
                .map(|p| self.reach[a].local(first[a] + p))
                .collect::<Vec<_>>()
        });
        let (sx, sy) = (self.reach[0].len, self.reach[0].len * self.reach[1].len);
        for (z, &cz) in lz.iter().enumerate() {
            for (y, &cy) in ly.iter().enumerate() {
                for (x, &cx) in lx.iter().enumerate() {
                    visit(cx + sx * cy + sy * cz, [x, y, z]);
                }
            }
        }
    }

    /// Cells in the window.
    fn window_len(&self) -> usize {
        self.window.1.iter().product()
    }

    /// The vector at every cell of the window, interleaved (x, y, z) per
    /// cell.
    pub fn interleaved(&self) -> Vec<f64> {
        let [u, v, w] = &self.components;
        let mut out = Vec::with_capacity(3 * self.window_len());
        self.for_each_cell(|n, _| out.extend([u[n], v[n], w[n]]));
        out
    }

    /// The magnitude at every cell of the window.
    pub fn speed(&self) -> Vec<f64> {
        let [u, v, w] = &self.components;
        let mut out = Vec::with_capacity(self.window_len());
        self.for_each_cell(|n, _| out.push((u[n] * u[n] + v[n] * v[n] + w[n] * w[n]).sqrt()));
        out
    }

    /// How d/d(axis `b`) reads each cell of the window along `b` (see the
    /// module docs), by its position in the window: the sampled cells it
    /// reads along `b`.
    fn stencils(&self, b: usize) -> Vec<Stencil> {
        let (first, extent) = self.window;
        let n = self.cells[b];
        let reach = &self.reach[b];
        let local = |m: usize| reach.local(m);
        (0..extent[b])
            .map(|p| {
                let m = first[b] + p;
                if !self.active[b] || n < 2 {
                    Stencil::Zero
                } else if self.periodic[b] {
                    Stencil::Central(local((m + n - 1) % n), local((m + 1) % n))
                } else if m > 0 && m + 1 < n {
                    Stencil::Central(local(m - 1), local(m + 1))
                } else if n == 2 {
                    Stencil::Pair(local(0), local(1))
                } else if m == 0 {
                    Stencil::Forward(local(0), local(1), local(2))
                } else {
                    Stencil::Backward(local(n - 1), local(n - 2), local(n - 3))
                }
            })
            .collect()
    }

    /// The vorticity at every cell of the window: (x, y, z) interleaved
    /// per cell in 3D, the scalar dv/dx - du/dy in 2D (`components` 3 or
    /// 1).
    pub fn vorticity(&self) -> (Vec<f64>, usize) {
        let stencils = [0, 1, 2].map(|b| self.stencils(b));
        let strides = [1, self.reach[0].len, self.reach[0].len * self.reach[1].len];
        let lengths = [0, 1, 2].map(|a| self.reach[a].len);
        let components = if self.active[2] { 3 } else { 1 };
        let mut out = Vec::with_capacity(components * self.window_len());
        self.for_each_cell(|n, position| {
            // d(component c)/d(axis b) at this cell.
            let d = |c: usize, b: usize| {
                let along = (n / strides[b]) % lengths[b];
                let base = n - along * strides[b];
                let values = &self.components[c];
                stencils[b][position[b]].apply(self.spacing[b], |l| values[base + l * strides[b]])
            };
            if components == 3 {
                out.extend([d(2, 1) - d(1, 2), d(0, 2) - d(2, 0), d(1, 0) - d(0, 1)]);
            } else {
                out.push(d(1, 0) - d(0, 1));
            }
        });
        (out, components)
    }

    /// The grid's cells of the window, x fastest.
    fn window_cells(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let (first, extent) = self.window;
        (0..extent[2]).flat_map(move |k| {
            (0..extent[1]).flat_map(move |j| {
                (0..extent[0]).map(move |i| [first[0] + i, first[1] + j, first[2] + k])
            })
        })
    }
}

/// The sampled cells a second-order difference along one axis reads (see
/// the module docs), as positions along that axis.
#[derive(Debug, Clone, Copy)]
enum Stencil {
    /// An unresolved axis: no derivative.
    Zero,
    /// Central: the cells before and after.
    Central(usize, usize),
    /// Two cells in all: their difference.
    Pair(usize, usize),
    /// One-sided at the first wall: cells 0, 1 and 2.
    Forward(usize, usize, usize),
    /// One-sided at the last wall: cells n - 1, n - 2 and n - 3.
    Backward(usize, usize, usize),
}

impl Stencil {
    /// The difference of the values `at` gives, on cells `h` apart.
    fn apply(self, h: f64, at: impl Fn(usize) -> f64) -> f64 {
        match self {
            Stencil::Zero => 0.0,
            Stencil::Central(before, after) => (at(after) - at(before)) / (2.0 * h),
            Stencil::Pair(first, second) => (at(second) - at(first)) / h,
            Stencil::Forward(c0, c1, c2) => (-3.0 * at(c0) + 4.0 * at(c1) - at(c2)) / (2.0 * h),
            Stencil::Backward(c0, c1, c2) => (3.0 * at(c0) - 4.0 * at(c1) + at(c2)) / (2.0 * h),
        }
    }
}

/// One field derived for viewing: its dataset name, components per cell,
/// how it is derived, and how its values over a slab are formed.
struct Derivation {
    name: &'static str,
    components: usize,
    how: &'static str,
    form: fn(&Slab<'_>) -> Vec<f64>,
}

/// What the derived fields of a slab of planes are formed from: the cell
/// velocity around it and, once asked for, its cells' distances to the
/// bodies (the mask and the distance read the same).
struct Slab<'a> {
    velocity: CellVelocity,
    flow: &'a IncompressibleFlow,
    distances: std::cell::OnceCell<Vec<f64>>,
}

impl Slab<'_> {
    /// The signed distance of every cell centre of the slab to the flow's
    /// nearest body (infinite without one).
    fn distances(&self) -> &[f64] {
        self.distances.get_or_init(|| {
            let velocity = &self.velocity;
            velocity
                .window_cells()
                .map(|cell| {
                    let centre = [0, 1, 2]
                        .map(|a| velocity.origin[a] + (cell[a] as f64 + 0.5) * velocity.spacing[a]);
                    self.flow.body_distance(centre).unwrap_or(f64::INFINITY)
                })
                .collect()
        })
    }
}

/// What a dump of `flow` derives (see the module docs): `vorticity` has
/// `vorticity_components` per cell.
fn derivations(flow: &IncompressibleFlow, vorticity_components: usize) -> Vec<Derivation> {
    let mut all = vec![
        Derivation {
            name: "velocity",
            components: 3,
            how: VELOCITY_DERIVATION,
            form: |slab| slab.velocity.interleaved(),
        },
        Derivation {
            name: "speed",
            components: 1,
            how: SPEED_DERIVATION,
            form: |slab| slab.velocity.speed(),
        },
        Derivation {
            name: "vorticity",
            components: vorticity_components,
            how: VORTICITY_DERIVATION,
            form: |slab| slab.velocity.vorticity().0,
        },
    ];
    if !flow.bodies().is_empty() {
        all.push(Derivation {
            name: "body_mask",
            components: 1,
            how: BODY_MASK_DERIVATION,
            form: |slab| {
                slab.distances()
                    .iter()
                    .map(|&d| if d < 0.0 { 1.0 } else { 0.0 })
                    .collect()
            },
        });
        all.push(Derivation {
            name: "body_distance",
            components: 1,
            how: BODY_DISTANCE_DERIVATION,
            form: |slab| slab.distances().to_vec(),
        });
    }
    all
}

/// Writes `velocity`, `speed` and `vorticity` of `flow` at the cell
/// centres of `window` (the whole grid when `None`; a patch for a dump per
/// rank) into `group`, with that box's origin, and with immersed bodies
/// `body_mask` and `body_distance` (see the module docs). Each cell gets
/// the same bits whichever box holds it, so the datasets are formed and
/// written one chunk of planes at a time (chunks of about 4 MiB), from one
/// cell velocity per chunk: a dump holds one chunk's values and the cell
/// velocity around it, not whole derived fields.
pub fn dump_derived_flow_fields(
    flow: &IncompressibleFlow,
    group: &hdf5::Group,
    window: Option<CellBox>,
) -> CaseResult<Vec<DumpedField>> {
    write_derived_fields(flow, group, window, None)
}

/// [`dump_derived_flow_fields`], `planes` planes at a time when given
/// (else a chunk's).
fn write_derived_fields(
    flow: &IncompressibleFlow,
    group: &hdf5::Group,
    window: Option<CellBox>,
    planes: Option<usize>,
) -> CaseResult<Vec<DumpedField>> {
    let grid = flow_grid(flow);
    // The box checked against the grid before any dataset exists.
    let (first, extent) = checked_window(grid.cells(), window)?;
    let (spacing, corner) = (grid.spacing(), grid.origin());
    let origin = [0, 1, 2].map(|a| corner[a] + (first[a] as f64 + 0.5) * spacing[a]);
    let vorticity_components = if grid.active_dimensions()[2] { 3 } else { 1 };
    let derivations = derivations(flow, vorticity_components);
    // Every dataset in chunks of the same planes (about
    // `watershed_fields::io::CHUNK_BYTES` for the widest), so that each
    // slab's cell velocity serves them all.
    let widest = derivations.iter().map(|d| d.components).max().unwrap_or(1);
    let planes_per_chunk = chunk_planes(
        extent[0] * extent[1] * widest * std::mem::size_of::<f64>(),
        extent[2],
    );
    let mut datasets = Vec::with_capacity(derivations.len());
    let mut written = Vec::with_capacity(derivations.len());
    for derivation in &derivations {
        let (dataset, dumped) = create_cell_dataset(
            group,
            derivation.name,
            (extent, origin, spacing),
            (derivation.components, planes_per_chunk),
            derivation.how,
        )?;
        datasets.push(dataset);
        written.push(dumped);
    }
    let planes = planes.unwrap_or(planes_per_chunk).max(1);
    let mut k = 0;
    while k < extent[2] {
        let slab = planes.min(extent[2] - k);
        let planes = Slab {
            velocity: CellVelocity::of_flow(
                flow,
                Some((
                    [first[0], first[1], first[2] + k],
                    [extent[0], extent[1], slab],
                )),
            )?,
            flow,
            distances: std::cell::OnceCell::new(),
        };
        for (derivation, dataset) in derivations.iter().zip(&datasets) {
            let values = (derivation.form)(&planes);
            write_planes(dataset, derivation.components, (k, slab), extent, &values)?;
        }
        k += slab;
    }
    Ok(written)
}

/// The shape of a dataset of `components` values on each of `cells`
/// cells: `(nz, ny, nx[, components])`.
fn dataset_shape(cells: [usize; 3], components: usize) -> Vec<usize> {
    let mut shape = vec![cells[2], cells[1], cells[0]];
    if components > 1 {
        shape.push(components);
    }
    shape
}

/// Writes `values` (x fastest, components interleaved) into planes
/// `k .. k + slab` of `dataset` (of `cells` cells).
fn write_planes(
    dataset: &hdf5::Dataset,
    components: usize,
    (k, slab): (usize, usize),
    cells: [usize; 3],
    values: &[f64],
) -> CaseResult<()> {
    let file = PathBuf::from(dataset.filename());
    let name = dataset.name();
    let err = |e| hdf5_error(&file, &name, e);
    let shape = dataset_shape([cells[0], cells[1], slab], components);
    let array = ndarray::ArrayViewD::from_shape(shape.clone(), values)
        .map_err(|e| err(hdf5::Error::from(e.to_string())))?;
    let mut selection: Vec<SliceOrIndex> = shape
        .iter()
        .map(|&n| SliceOrIndex::SliceTo {
            start: 0,
            step: 1,
            end: n,
            block: 1,
        })
        .collect();
    selection[0] = SliceOrIndex::SliceTo {
        start: k,
        step: 1,
        end: k + slab,
        block: 1,
    };
    Ok(dataset
        .write_slice(array, Hyperslab::from(selection))
        .map_err(err)?)
}

/// Creates the dataset of `components` values on each of `cells` cells,
/// the first centred at `first_centre`, `spacing` apart (`box_`), of
/// shape `(nz, ny, nx[, components])` with Fletcher-32 checksums (in
/// chunks of `planes` whole planes), marked as derived, with the `location`, `origin` (the
/// first cell's centre) and `spacing` attributes of a solution field; its
/// values are written by [`write_planes`].
fn create_cell_dataset(
    group: &hdf5::Group,
    name: &str,
    box_: ([usize; 3], [f64; 3], [f64; 3]),
    (components, planes): (usize, usize),
    how: &str,
) -> CaseResult<(hdf5::Dataset, DumpedField)> {
    let file = PathBuf::from(group.filename());
    let err = |e| hdf5_error(&file, name, e);
    let (cells, first_centre, spacing) = box_;
    let dataset = group
        .new_dataset::<f64>()
        .fletcher32()
        .shape(dataset_shape(cells, components))
        .chunk(dataset_shape([cells[0], cells[1], planes], components))
        // No chunk cache: each chunk is written whole, once, and the
        // datasets of a dump stay open together while their chunks are
        // written in turn (a cache would keep every dataset's last chunk).
        .chunk_cache(0, 0, 1.0)
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
    let dumped = DumpedField {
        name: name.into(),
        location: LocationKind::CellCentre,
        extent: cells,
        components,
        derived: Some(how.into()),
    };
    Ok((dataset, dumped))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` at the cell centres of the whole grid of `cells` (spacing 0.1,
    /// 0.2, 0.3, origin 0) sampled as [`CellVelocity::of_flow`] samples a
    /// flow for `window`.
    fn sampled(
        cells: [usize; 3],
        periodic: [bool; 3],
        window: Option<CellBox>,
        f: &impl Fn([f64; 3]) -> [f64; 3],
    ) -> CellVelocity {
        let spacing = [0.1, 0.2, 0.3];
        let active = cells.map(|n| n > 1);
        let mut velocity =
            CellVelocity::empty(cells, spacing, [0.0; 3], periodic, active, window).unwrap();
        let reach = velocity.reach;
        let mut components = [Vec::new(), Vec::new(), Vec::new()];
        for k in 0..reach[2].len {
            for j in 0..reach[1].len {
                for i in 0..reach[0].len {
                    let cell = [reach[0].global(i), reach[1].global(j), reach[2].global(k)];
                    let centre = [0, 1, 2].map(|a| (cell[a] as f64 + 0.5) * spacing[a]);
                    let value = f(centre);
                    for c in 0..3 {
                        components[c].push(value[c]);
                    }
                }
            }
        }
        velocity.components = components;
        velocity
    }

    fn field(
        cells: [usize; 3],
        periodic: [bool; 3],
        f: impl Fn([f64; 3]) -> [f64; 3],
    ) -> CellVelocity {
        sampled(cells, periodic, None, &f)
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

    /// Every box of a small grid (walls and periodic sides, boxes one cell
    /// wide at a wall, boxes that wrap): each cell's derived values have the
    /// bits of the whole grid's, which is what makes a dump per rank equal
    /// to a whole dump.
    #[test]
    fn every_box_gets_the_whole_grids_bits_at_its_cells() {
        let f = |[x, y, z]: [f64; 3]| {
            [
                (3.0 * x).sin() + y * z,
                (2.0 * y).cos() * x,
                (x * z).exp() - y,
            ]
        };
        let boxes = |n: usize| {
            (0..n).flat_map(move |first| (1..=n - first).map(move |extent| (first, extent)))
        };
        for (cells, periodic) in [
            ([6, 5, 4], [true, false, true]),
            ([5, 6, 4], [false, true, false]),
            ([7, 4, 1], [true, false, false]),
        ] {
            let whole = sampled(cells, periodic, None, &f);
            let (whole_vorticity, components) = whole.vorticity();
            let (whole_velocity, whole_speed) = (whole.interleaved(), whole.speed());
            let index = |cell: [usize; 3]| cell[0] + cells[0] * (cell[1] + cells[1] * cell[2]);
            for (x0, nx) in boxes(cells[0]) {
                for (y0, ny) in boxes(cells[1]) {
                    for (z0, nz) in boxes(cells[2]) {
                        let window = ([x0, y0, z0], [nx, ny, nz]);
                        let part = sampled(cells, periodic, Some(window), &f);
                        let (vorticity, part_components) = part.vorticity();
                        assert_eq!(part_components, components);
                        let (velocity, speed) = (part.interleaved(), part.speed());
                        for (n, cell) in part.window_cells().enumerate() {
                            let w = index(cell);
                            let bits = |v: &[f64], at: usize, c: usize| {
                                v[at * c..at * c + c]
                                    .iter()
                                    .map(|x| x.to_bits())
                                    .collect::<Vec<_>>()
                            };
                            assert_eq!(
                                bits(&vorticity, n, components),
                                bits(&whole_vorticity, w, components),
                                "vorticity at {cell:?} in box {window:?} of {cells:?}"
                            );
                            assert_eq!(bits(&velocity, n, 3), bits(&whole_velocity, w, 3));
                            assert_eq!(speed[n].to_bits(), whole_speed[w].to_bits());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_box_outside_the_grid_is_refused_naming_it() {
        let error = CellVelocity::empty(
            [4, 4, 1],
            [1.0; 3],
            [0.0; 3],
            [false; 3],
            [true, true, false],
            Some(([2, 0, 0], [3, 4, 1])),
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, crate::error::CaseError::Usage(_))
                && text.contains("[3, 4, 1] cells from [2, 0, 0]")
                && text.contains("[4, 4, 1]"),
            "{text}"
        );
    }

    /// A flow's derived fields written a few planes at a time hold the
    /// bits of those written whole, over the whole grid and over a box
    /// (the chunks of a real dump are 4 MiB, too large for a test to
    /// split).
    #[test]
    fn derived_fields_written_by_planes_equal_those_written_whole() {
        use watershed_fields::{XFace, YFace, ZFace};
        let grid = Grid::new([6, 5, 7], [1.0, 1.2, 1.4], [0.0; 3])
            .unwrap()
            .with_periodic([true, false, true]);
        let flow = watershed_solvers::IncompressibleFlowBuilder::new(&grid.whole_domain(1), 0.01)
            .build()
            .unwrap();
        flow.set_velocity::<XFace>(|[x, y, z]| (3.0 * x).sin() + y * z)
            .unwrap();
        flow.set_velocity::<YFace>(|[x, y, z]| (2.0 * y).cos() * x - z)
            .unwrap();
        flow.set_velocity::<ZFace>(|[x, y, z]| (x * z).sin() - y)
            .unwrap();
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.core_filebacked(false))
            .create("derived-by-planes.h5")
            .unwrap();
        let read = |group: &hdf5::Group, name: &str| -> Vec<u64> {
            group
                .dataset(name)
                .unwrap()
                .read_raw::<f64>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        for window in [None, Some(([1, 0, 2], [4, 5, 5]))] {
            let whole = file.create_group(&format!("whole {window:?}")).unwrap();
            let fields = write_derived_fields(&flow, &whole, window, Some(usize::MAX)).unwrap();
            assert_eq!(fields.len(), 3);
            for planes in [1, 2, 3] {
                let group = file.create_group(&format!("{planes} {window:?}")).unwrap();
                write_derived_fields(&flow, &group, window, Some(planes)).unwrap();
                for field in &fields {
                    assert_eq!(
                        read(&group, &field.name),
                        read(&whole, &field.name),
                        "{} by {planes} planes over {window:?}",
                        field.name
                    );
                }
            }
        }
    }
}
