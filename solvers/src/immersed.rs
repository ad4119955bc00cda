//! What the staggered grid makes of immersed bodies ([`crate::body`]):
//! which velocity faces are solid, which are forced and how, what the
//! projection may not touch, and the weights of the force integral.
//!
//! **Direct forcing** (Fadlun, Verzicco, Orlandi & Mohd-Yusof 2000). A
//! face whose position is inside a body (`phi < 0`) is *solid*: the
//! provisional velocity there is the body's velocity. A fluid face with a
//! solid neighbour along a grid line is *forced*: its provisional velocity
//! is the linear interpolation between the body's velocity at the nearest
//! surface point and the provisional velocity of the next face outward,
//! along the grid axis closest to the surface normal,
//! `u_f = u_s + (u_n - u_s) phi_f / phi_n` (the distance along that line
//! is `phi` to first order). Every other face keeps its value. All three
//! cases are one linear map `u_f = keep u*_f + value + sum_d c_d u*_{f+d}`
//! whose coefficients are fields computed once ([`FaceForcing`]).
//!
//! **The projection** leaves solid faces alone: the correction is
//! `u = u* - open grad(psi)` with `open = 0` on every solid face, and the
//! Poisson operator `sum_a D_a(open_a G_a(psi))` closes the solid faces
//! of every cell with fluid, so the fluid cells end divergence-free to
//! the solver's tolerance while the flux through the body's staircase
//! surface is exactly the body's (zero at rest; a rigid rotation has no
//! net flux through any closed face loop): no flow goes through the body.
//! Solid faces between two *enclosed* cells (all faces solid) stay open
//! in the operator: the inside of a body then keeps the Laplacian, which
//! the open V-cycle preconditions well (an identity there made CG stall),
//! and the body's velocity is discretely divergence-free anyway.
//!
//! **The force** on a body is John's (2004) volume form of the surface
//! integral: with a weight `w = 1` on the body and a band around it,
//! falling smoothly to 0 further out (`w(phi)`, a quintic of `phi`),
//! `F_k = -[ d/dt int w u_k - int u_k (u . grad w) + nu int grad u_k .
//! grad w - int p d_k w - f_k int_fluid w ]`, which is what the
//! momentum equation times `w e_k`, integrated by parts, leaves of the
//! surface stresses. Only `grad w` (away from the body, where the flow is
//! resolved) and the weighted momentum enter, so the force needs no
//! surface reconstruction. The band must stay two cells from the domain's
//! non-periodic sides and off other bodies.

use crate::body::Body;
use crate::error::{SolverError, SolverResult};
use watershed_fields::{FieldLayout, Grid, IndexBox};

/// The coefficients of the forcing map of one velocity component, over a
/// field layout's allocated points (in its linear order).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FaceForcing {
    /// Coefficient of the face's own provisional value.
    pub keep: Vec<f64>,
    /// The constant part (the body's velocity).
    pub value: Vec<f64>,
    /// 1 where the projection may change the face, 0 on solid faces.
    pub open: Vec<f64>,
    /// Coefficient of the neighbour at each offset, for the offsets used.
    pub neighbours: Vec<([isize; 3], Vec<f64>)>,
    /// Counts of solid and forced interior faces.
    pub solid: usize,
    pub forced: usize,
}

/// The bodies of a flow on its grid.
#[derive(Debug, Clone)]
pub(crate) struct Immersed {
    bodies: Vec<Body>,
    grid: Grid,
    /// Per body: the force band (inner, outer) when its force can be
    /// computed, else why not.
    bands: Vec<Result<(f64, f64), String>>,
}

/// The C2 step from 1 (`s <= 0`) to 0 (`s >= 1`) and its derivative.
fn falloff(s: f64) -> (f64, f64) {
    if s <= 0.0 {
        (1.0, 0.0)
    } else if s >= 1.0 {
        (0.0, 0.0)
    } else {
        let smooth = s * s * s * (10.0 - 15.0 * s + 6.0 * s * s);
        let slope = 30.0 * s * s * (1.0 - s) * (1.0 - s);
        (1.0 - smooth, -slope)
    }
}

impl Immersed {
    /// Checks the bodies against the grid: their numbers, that none cuts
    /// a non-periodic side (a side lies wholly in the fluid or wholly in
    /// bodies), and where each body's force band fits.
    pub(crate) fn new(bodies: Vec<Body>, grid: &Grid) -> SolverResult<Self> {
        let setup = |reason: String| SolverError::Setup {
            equation: "incompressible flow".into(),
            reason,
        };
        for body in &bodies {
            if let Some(problem) = body.problem() {
                return Err(setup(format!("body '{}': {problem}", body.name())));
            }
        }
        let mut immersed = Immersed {
            bodies,
            grid: grid.clone(),
            bands: Vec::new(),
        };
        let active = grid.active_dimensions();
        let cells = grid.cells().map(|n| n as isize);
        for side in watershed_operators::Side::ALL {
            let axis = side.axis;
            if !active[axis] || grid.periodic()[axis] {
                continue;
            }
            // The layer of cells along the side.
            let mut layer = IndexBox::new([0; 3], cells);
            let at = if side.plus { cells[axis] - 1 } else { 0 };
            layer.lo[axis] = at;
            layer.hi[axis] = at + 1;
            let (mut solid, mut fluid) = (None, None);
            for cell in layer.iter() {
                let (phi, body) = immersed.nearest(immersed.cell_position(cell));
                if phi < 0.0 {
                    solid.get_or_insert((cell, body));
                } else {
                    fluid.get_or_insert(cell);
                }
            }
            if let (Some((cell, body)), Some(open)) = (solid, fluid) {
                return Err(setup(format!(
                    "body '{}' cuts side {}: the cell {cell:?} next to it is inside the body and the cell {open:?} is not; a body must stay at least two cells off a side, or cover the whole side",
                    immersed.bodies[body].name(),
                    side.name()
                )));
            }
        }
        let spacing = grid.spacing();
        let largest = (0..3)
            .filter(|&a| active[a])
            .map(|a| spacing[a])
            .fold(0.0, f64::max);
        for n in 0..immersed.bodies.len() {
            let (inner, outer) = immersed.bodies[n]
                .band()
                .unwrap_or((2.0 * largest, 8.0 * largest));
            let band = immersed.band_fits(n, inner, outer).map(|()| (inner, outer));
            immersed.bands.push(band);
        }
        Ok(immersed)
    }

    /// Whether body `n`'s band `(inner, outer)` keeps two cells off the
    /// non-periodic sides and off every other body.
    fn band_fits(&self, n: usize, inner: f64, outer: f64) -> Result<(), String> {
        let active = self.grid.active_dimensions();
        let cells = self.grid.cells().map(|c| c as isize);
        let whole = IndexBox::new([0; 3], cells);
        for cell in whole.iter() {
            let x = self.cell_position(cell);
            if self.bodies[n].shape().distance(x) >= outer {
                continue;
            }
            let near_side = (0..3).find(|&a| {
                active[a] && !self.grid.periodic()[a] && (cell[a] < 2 || cell[a] >= cells[a] - 2)
            });
            if let Some(axis) = near_side {
                return Err(format!(
                    "its force band (weights from {inner:e} to {outer:e} off the surface) reaches cell {cell:?}, within two cells of a side along {}: set a narrower Body::force_band or refine the grid",
                    ["x", "y", "z"][axis]
                ));
            }
            if let Some(other) =
                (0..self.bodies.len()).find(|&m| m != n && self.bodies[m].shape().distance(x) < 0.0)
            {
                return Err(format!(
                    "its force band (weights from {inner:e} to {outer:e} off the surface) reaches body '{}' at cell {cell:?}: set a narrower Body::force_band",
                    self.bodies[other].name()
                ));
            }
        }
        Ok(())
    }

    /// The bodies.
    pub(crate) fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// Body `n`'s force band, or why its force is not computed.
    pub(crate) fn band(&self, n: usize) -> Result<(f64, f64), String> {
        self.bands[n].clone()
    }

    /// The smallest signed distance at `x` and the body it belongs to.
    pub(crate) fn nearest(&self, x: [f64; 3]) -> (f64, usize) {
        let mut best = (f64::INFINITY, 0);
        for (n, body) in self.bodies.iter().enumerate() {
            let phi = body.shape().distance(x);
            if phi < best.0 {
                best = (phi, n);
            }
        }
        best
    }

    /// The position of cell `index` (whole-domain numbering).
    pub(crate) fn cell_position(&self, index: [isize; 3]) -> [f64; 3] {
        let (origin, h) = (self.grid.origin(), self.grid.spacing());
        [0, 1, 2].map(|a| origin[a] + (index[a] as f64 + 0.5) * h[a])
    }

    /// The position of face `index` normal to `axis`.
    pub(crate) fn face_position(&self, axis: usize, index: [isize; 3]) -> [f64; 3] {
        let (origin, h) = (self.grid.origin(), self.grid.spacing());
        [0, 1, 2].map(|a| {
            let stagger = if a == axis { 0.0 } else { 0.5 };
            origin[a] + (index[a] as f64 + stagger) * h[a]
        })
    }

    /// Whether the face `index` normal to `axis` is inside a body.
    pub(crate) fn solid_face(&self, axis: usize, index: [isize; 3]) -> bool {
        self.nearest(self.face_position(axis, index)).0 < 0.0
    }

    /// Whether the projection closes the face `index` normal to `axis`:
    /// a solid face with a cell on either side that is not enclosed.
    pub(crate) fn closed_face(&self, axis: usize, index: [isize; 3]) -> bool {
        let mut below = index;
        below[axis] -= 1;
        self.solid_face(axis, index) && !(self.enclosed_cell(below) && self.enclosed_cell(index))
    }

    /// Whether every face of cell `index` is solid (the cell has no
    /// equation in the projection).
    pub(crate) fn enclosed_cell(&self, index: [isize; 3]) -> bool {
        let active = self.grid.active_dimensions();
        (0..3).filter(|&a| active[a]).all(|a| {
            let mut upper = index;
            upper[a] += 1;
            self.solid_face(a, index) && self.solid_face(a, upper)
        })
    }

    /// The gradient of the distance to the nearest body at `x`.
    fn normal(&self, x: [f64; 3]) -> [f64; 3] {
        self.gradient(x, |y| self.nearest(y).0)
    }

    /// The gradient of `phi` at `x` over the active axes, by central
    /// differences of a thousandth of a cell.
    fn gradient(&self, x: [f64; 3], phi: impl Fn([f64; 3]) -> f64) -> [f64; 3] {
        let active = self.grid.active_dimensions();
        let h = self.grid.spacing();
        let mut g = [0.0; 3];
        for a in (0..3).filter(|&a| active[a]) {
            let e = 1e-3 * h[a];
            let (mut plus, mut minus) = (x, x);
            plus[a] += e;
            minus[a] -= e;
            g[a] = (phi(plus) - phi(minus)) / (2.0 * e);
        }
        g
    }

    /// The forcing map of velocity component `axis` over `layout`'s
    /// allocated points (the whole domain's, or a patch's, whose faces lie
    /// at their indices plus the patch's offset). A forced interior face
    /// whose outward neighbour is not allocated is an error (the body is
    /// too close to a side).
    pub(crate) fn forcing(&self, axis: usize, layout: &FieldLayout) -> SolverResult<FaceForcing> {
        let allocated = layout.allocated();
        let interior = layout.interior();
        let n = layout.allocated_len();
        let active = self.grid.active_dimensions();
        let h = self.grid.spacing();
        let mut forcing = FaceForcing {
            keep: vec![1.0; n],
            value: vec![0.0; n],
            open: vec![1.0; n],
            neighbours: Vec::new(),
            solid: 0,
            forced: 0,
        };
        // A patch's faces are placed by their indices in the whole grid.
        let patch_offset = layout.patch().offset();
        for index in allocated.iter() {
            let at = layout.linear_index(index);
            let global = [0, 1, 2].map(|a| index[a] + patch_offset[a] as isize);
            let x = self.face_position(axis, global);
            let (phi, body) = self.nearest(x);
            if phi < 0.0 {
                forcing.keep[at] = 0.0;
                forcing.open[at] = 0.0;
                forcing.value[at] = self.bodies[body].velocity_at(x)[axis];
                forcing.solid += usize::from(interior.contains(index));
                continue;
            }
            let beside_solid = (0..3).filter(|&a| active[a]).any(|a| {
                [-1, 1].into_iter().any(|s| {
                    let mut y = x;
                    y[a] += s as f64 * h[a];
                    self.nearest(y).0 < 0.0
                })
            });
            if !beside_solid {
                continue;
            }
            let g = self.normal(x);
            let k = (0..3)
                .filter(|&a| active[a])
                .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
                .unwrap_or(0);
            let step: isize = if g[k] >= 0.0 { 1 } else { -1 };
            let mut offset = [0isize; 3];
            offset[k] = step;
            let outward = [0, 1, 2].map(|a| index[a] + offset[a]);
            let mut y = x;
            y[k] += step as f64 * h[k];
            let phi_next = self.nearest(y).0;
            if !allocated.contains(outward) {
                if interior.contains(index) {
                    return Err(SolverError::Setup {
                        equation: "incompressible flow".into(),
                        reason: format!(
                            "body '{}' comes within a cell of a side: the forced face {global:?} of {} interpolates from {:?}, outside the grid; keep bodies at least two cells off the sides",
                            self.bodies[body].name(),
                            ["u", "v", "w"][axis],
                            [0, 1, 2].map(|a| global[a] + offset[a])
                        ),
                    });
                }
                continue; // a ghost: the boundary conditions overwrite it
            }
            if phi_next <= phi {
                continue; // no outward neighbour along the grid: left free
            }
            let ratio = phi / phi_next;
            let length = g
                .iter()
                .map(|c| c * c)
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE);
            let surface = [0, 1, 2].map(|a| x[a] - phi * g[a] / length);
            let wall = self.bodies[body].velocity_at(surface)[axis];
            forcing.keep[at] = 0.0;
            forcing.value[at] = wall * (1.0 - ratio);
            let slot = match forcing.neighbours.iter().position(|(o, _)| *o == offset) {
                Some(slot) => slot,
                None => {
                    forcing.neighbours.push((offset, vec![0.0; n]));
                    forcing.neighbours.len() - 1
                }
            };
            forcing.neighbours[slot].1[at] = ratio;
            forcing.forced += usize::from(interior.contains(index));
        }
        Ok(forcing)
    }

    /// The force weight of body `n` at `x` and its gradient (zero when
    /// the body's force is not computed).
    pub(crate) fn force_weight(&self, n: usize, x: [f64; 3]) -> (f64, [f64; 3]) {
        let Ok((inner, outer)) = self.bands[n] else {
            return (0.0, [0.0; 3]);
        };
        let shape = self.bodies[n].shape();
        let phi = shape.distance(x);
        let (w, slope) = falloff((phi - inner) / (outer - inner));
        if slope == 0.0 {
            return (w, [0.0; 3]);
        }
        let normal = self.gradient(x, |y| shape.distance(y));
        (w, normal.map(|n| slope / (outer - inner) * n))
    }

    /// Checks that every region of fluid cells the bodies cut off from the
    /// rest can be solved for: it touches a side where the projection
    /// potential is given (`dirichlet[side index]`), or there is no such
    /// side anywhere and the fluid is one region (whose potential is then
    /// fixed by its mean).
    pub(crate) fn check_fluid_regions(&self, dirichlet: [bool; 6]) -> SolverResult<()> {
        let active = self.grid.active_dimensions();
        let periodic = self.grid.periodic();
        let cells = self.grid.cells().map(|c| c as isize);
        let whole = IndexBox::new([0; 3], cells);
        let linear = |c: [isize; 3]| ((c[2] * cells[1] + c[1]) * cells[0] + c[0]) as usize;
        let mut region = vec![usize::MAX; whole.len()];
        let mut regions: Vec<([isize; 3], bool)> = Vec::new();
        for start in whole.iter() {
            if region[linear(start)] != usize::MAX || self.enclosed_cell(start) {
                continue;
            }
            let id = regions.len();
            let mut touches = false;
            let mut stack = vec![start];
            region[linear(start)] = id;
            while let Some(cell) = stack.pop() {
                for a in (0..3).filter(|&a| active[a]) {
                    for step in [-1isize, 1] {
                        // The face between the cell and its neighbour.
                        let face = if step < 0 {
                            cell
                        } else {
                            let mut f = cell;
                            f[a] += 1;
                            f
                        };
                        if self.solid_face(a, face) {
                            continue;
                        }
                        let mut next = cell;
                        next[a] += step;
                        if next[a] < 0 || next[a] >= cells[a] {
                            if periodic[a] {
                                next[a] = next[a].rem_euclid(cells[a]);
                            } else {
                                touches |= dirichlet[2 * a + usize::from(step > 0)];
                                continue;
                            }
                        }
                        if region[linear(next)] == usize::MAX {
                            region[linear(next)] = id;
                            stack.push(next);
                        }
                    }
                }
            }
            regions.push((start, touches));
        }
        let any_dirichlet = dirichlet.iter().any(|&d| d);
        let cut_off: Vec<[isize; 3]> = regions
            .iter()
            .filter(|(_, touches)| !touches)
            .map(|(cell, _)| *cell)
            .collect();
        if (any_dirichlet && !cut_off.is_empty()) || (!any_dirichlet && regions.len() > 1) {
            let at = if any_dirichlet {
                cut_off[0]
            } else {
                regions[1].0
            };
            return Err(SolverError::Setup {
                equation: "incompressible flow".into(),
                reason: format!(
                    "the bodies cut off a region of fluid (it holds cell {at:?}) from {}: its pressure would be undetermined; fill the pocket with a body or open it",
                    if any_dirichlet {
                        "every outflow"
                    } else {
                        "the rest of the fluid"
                    }
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Shape;
    use watershed_fields::{Device, LocationKind, SpatialField, XFace, YFace};

    fn grid() -> Grid {
        Grid::new([16, 16, 1], [1.0, 1.0, 1.0], [0.0; 3]).unwrap()
    }

    #[test]
    fn the_falloff_is_smooth_and_monotone() {
        let mut previous = 1.0;
        for n in 0..=100 {
            let s = n as f64 / 100.0;
            let (w, slope) = falloff(s);
            assert!(w <= previous && (0.0..=1.0).contains(&w));
            previous = w;
            // The slope is the derivative.
            let e = 1e-6;
            if n > 0 && n < 100 {
                let numeric = (falloff(s + e).0 - falloff(s - e).0) / (2.0 * e);
                assert!((numeric - slope).abs() < 1e-6, "{s}: {numeric} vs {slope}");
            }
        }
        assert_eq!(falloff(1.0), (0.0, 0.0));
    }

    /// A face next to a disc interpolates from the face outward along the
    /// axis nearest the normal, with the ratio of the distances; a face
    /// inside takes the body's velocity.
    #[test]
    fn forced_faces_interpolate_along_the_normal() {
        let body =
            Body::fixed("disc", Shape::circle([0.5, 0.5, 0.0], 0.2)).rotating([0.0, 0.0, 3.0]);
        let immersed = Immersed::new(vec![body.clone()], &grid()).unwrap();
        let patch = grid().whole_domain(1);
        let u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
        let layout = u.layout();
        let forcing = immersed.forcing(0, layout).unwrap();
        assert!(forcing.solid > 0 && forcing.forced > 0);
        for index in layout.interior().iter() {
            let at = layout.linear_index(index);
            let x = immersed.face_position(0, index);
            let phi = body.shape().distance(x);
            if phi < 0.0 {
                assert_eq!(forcing.keep[at], 0.0);
                assert_eq!(forcing.open[at], 0.0);
                assert_eq!(forcing.value[at], body.velocity_at(x)[0]);
            }
        }
        // A face right of the disc on its horizontal diameter: x = 0.75,
        // y = 0.53125 (index (12, 8)): phi = 0.2521 - 0.2 > 0; its left
        // neighbour (0.6875) has phi = 0.1900 - 0.2 < 0. The normal is
        // mostly +x, so it interpolates from (13, 8).
        let index = [12, 8, 0];
        let at = layout.linear_index(index);
        let x = immersed.face_position(0, index);
        let phi = body.shape().distance(x);
        let mut beyond = x;
        beyond[0] += 1.0 / 16.0;
        let phi_next = body.shape().distance(beyond);
        let ratio = phi / phi_next;
        let (_, c) = forcing
            .neighbours
            .iter()
            .find(|(o, _)| *o == [1, 0, 0])
            .unwrap();
        assert!((c[at] - ratio).abs() < 1e-15);
        assert_eq!(forcing.keep[at], 0.0);
        assert_eq!(forcing.open[at], 1.0);
        // The wall's u at the surface point along the normal.
        let r = ((x[0] - 0.5).powi(2) + (x[1] - 0.5).powi(2)).sqrt();
        let surface = [0.5 + (x[0] - 0.5) * 0.2 / r, 0.5 + (x[1] - 0.5) * 0.2 / r];
        let wall = -3.0 * (surface[1] - 0.5);
        assert!((forcing.value[at] - wall * (1.0 - ratio)).abs() < 1e-9);
        // Far from the disc nothing changes.
        let far = layout.linear_index([2, 2, 0]);
        assert_eq!((forcing.keep[far], forcing.value[far]), (1.0, 0.0));
        let v = SpatialField::<YFace>::new("v", &patch, Device::Cpu).unwrap();
        let vertical = immersed.forcing(1, v.layout()).unwrap();
        assert_eq!(vertical.solid, forcing.solid, "the disc is symmetric");
    }

    /// A patch's forcing map holds, at each of its interior faces, the
    /// whole domain's coefficients at the same face of the grid: its faces
    /// are placed by their indices plus the patch's offset.
    #[test]
    fn a_patchs_forcing_is_the_whole_domains_at_the_same_faces() {
        let body =
            Body::fixed("disc", Shape::circle([0.45, 0.55, 0.0], 0.2)).rotating([0.0, 0.0, 2.0]);
        let immersed = Immersed::new(vec![body], &grid()).unwrap();
        let whole_patch = grid().whole_domain(1);
        let layout = watershed_fields::PatchLayout::new(
            &grid(),
            [2, 2, 1],
            watershed_fields::GhostWidth::uniform(1),
        )
        .unwrap();
        for axis in [0, 1] {
            let kind = [LocationKind::XFace, LocationKind::YFace][axis];
            let whole_layout = FieldLayout::new(&whole_patch, kind);
            let whole = immersed.forcing(axis, &whole_layout).unwrap();
            let coefficient = |forcing: &FaceForcing, offset: [isize; 3], at: usize| {
                forcing
                    .neighbours
                    .iter()
                    .find(|(o, _)| *o == offset)
                    .map_or(0.0, |(_, c)| c[at])
            };
            let (mut solid, mut forced) = (0, 0);
            for index in 0..layout.len() {
                let patch = layout.patch(index).unwrap();
                let part_layout = FieldLayout::new(&patch, kind);
                let part = immersed.forcing(axis, &part_layout).unwrap();
                let offset = patch.offset().map(|o| o as isize);
                for point in part_layout.interior().iter() {
                    let global = [0, 1, 2].map(|a| point[a] + offset[a]);
                    let (at, whole_at) = (
                        part_layout.linear_index(point),
                        whole_layout.linear_index(global),
                    );
                    let what = format!("axis {axis}, patch {index}, face {global:?}");
                    assert_eq!(part.keep[at], whole.keep[whole_at], "{what}");
                    assert_eq!(part.value[at], whole.value[whole_at], "{what}");
                    assert_eq!(part.open[at], whole.open[whole_at], "{what}");
                    for step in [[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]] {
                        assert_eq!(
                            coefficient(&part, step, at),
                            coefficient(&whole, step, whole_at),
                            "{what}, neighbour {step:?}"
                        );
                    }
                }
                solid += part.solid;
                forced += part.forced;
            }
            // Every solid and forced face lies on one patch.
            assert!(whole.solid > 0 && whole.forced > 0);
            assert_eq!((solid, forced), (whole.solid, whole.forced), "axis {axis}");
        }
    }

    #[test]
    fn a_body_across_a_side_is_refused() {
        let body = Body::fixed(
            "plate",
            Shape::Box {
                lo: [-1.0, 0.4, -1.0],
                hi: [0.3, 0.6, 1.0],
            },
        );
        let error = Immersed::new(vec![body], &grid()).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, SolverError::Setup { .. }));
        assert!(message.contains("body 'plate' cuts side -x"), "{message}");
    }

    #[test]
    fn a_body_covering_every_side_is_accepted_and_its_pocket_checked() {
        let wall = Body::fixed(
            "outer",
            Shape::Outside(Box::new(Shape::circle([0.5, 0.5, 0.0], 0.45))),
        );
        let immersed = Immersed::new(vec![wall.clone()], &grid()).unwrap();
        // One region and no Dirichlet side: solvable.
        immersed.check_fluid_regions([false; 6]).unwrap();
        // With an outflow side the annulus is cut off from it.
        let error = immersed
            .check_fluid_regions([false, true, false, false, false, false])
            .unwrap_err();
        assert!(
            error.to_string().contains("cut off a region of fluid"),
            "{error}"
        );
        // A ring cuts the disc in two: refused without a Dirichlet side.
        let ring = Body::fixed(
            "ring",
            Shape::distance_function("ring", |x| {
                let r = ((x[0] - 0.5).powi(2) + (x[1] - 0.5).powi(2)).sqrt();
                (r - 0.25).abs() - 0.05
            }),
        );
        let two = Immersed::new(vec![wall, ring], &grid()).unwrap();
        assert!(two.check_fluid_regions([false; 6]).is_err());
    }

    #[test]
    fn the_force_band_must_fit() {
        let near = Body::fixed("near", Shape::circle([0.5, 0.3, 0.0], 0.1));
        let immersed = Immersed::new(vec![near.clone()], &grid()).unwrap();
        // Default band: 2 to 8 cells: reaches the bottom side.
        let why = immersed.band(0).unwrap_err();
        assert!(why.contains("within two cells of a side"), "{why}");
        let narrow = Immersed::new(vec![near.force_band(0.05, 0.1)], &grid()).unwrap();
        assert_eq!(narrow.band(0), Ok((0.05, 0.1)));
        let (w, g) = narrow.force_weight(0, [0.5, 0.3 + 0.1 + 0.075, 0.0]);
        assert!((w - 0.5).abs() < 1e-12);
        assert!(g[1] < 0.0 && g[0].abs() < 1e-9);
    }
}
