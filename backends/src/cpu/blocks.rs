//! Block planning: a region cut into blocks of rows (at most a tile along
//! x, a few rows, one plane), the row groups of a kernel by location, and
//! the band order that keeps planes larger than L2 in cache.

use crate::kernel::Kernel;
use crate::kernel::OUTPUT;
use crate::vocabulary::FieldData;
use crate::vocabulary::TILE;
use smallvec::SmallVec;
use watershed_fields::IndexBox;
use watershed_fields::LocationKind;
use watershed_fields::Patch;

/// Largest number of points in a block (x points times rows).
pub const BLOCK_POINTS: usize = 4096;

/// Smallest block size chosen for kernels with many registers.
pub(super) const MIN_BLOCK_POINTS: usize = 512;

/// Register bytes per thread a block aims to stay within.
pub(super) const L1_REGISTER_BYTES: usize = 64 * 1024;

/// A block: x in `x0..x1`, rows `j0..j0 + rows` of the planes
/// `k..k + planes` (more than one plane only for compiled kernels that
/// write the target directly, see [`Plan::new`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    pub(super) x0: isize,
    pub(super) x1: isize,
    pub(super) j0: isize,
    pub(super) rows: usize,
    pub(super) k: isize,
    pub(super) planes: usize,
}

impl Block {
    /// The block of plane `k + q` alone.
    pub(super) fn plane(self, q: usize) -> Block {
        Block {
            k: self.k + q as isize,
            planes: 1,
            ..self
        }
    }
}

/// What evaluating a kernel over a region fixes before its first block:
/// the row groups, the register shape and, for a compiled kernel, the
/// slots' strides and the patch geometry it is called with. It depends on
/// the kernel, the region and the layouts of the fields (not on their
/// data), so a prepared assignment makes it once and reuses it while those
/// stay the same (`watershed_operators::prepared`); other calls make it per call.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The region's row groups in (k, j) order.
    pub(super) groups: SmallVec<[RowGroup; 8]>,
    /// The same groups in the order an assignment visits them when the
    /// planes are too large for the cache (see [`band_order`]); empty when
    /// that order is `groups`'.
    pub(super) bands: Vec<RowGroup>,
    pub(super) width: usize,
    pub(super) rows: usize,
    pub(super) halo: isize,
    /// Per field slot: y and z strides (compiled kernels).
    pub(super) strides: SmallVec<[i64; 16]>,
    /// Coordinates and boundary masks (compiled kernels).
    pub(super) geometry: Vec<f64>,
}

impl Plan {
    /// The plan of `kernel` over `region` with fields like `fields`.
    pub fn new(
        kernel: &Kernel,
        native: bool,
        fields: &[FieldData<'_>],
        patch: &Patch,
        region: &IndexBox,
    ) -> Plan {
        let [nx, ny, _] = region.extent();
        let tile = nx.clamp(1, TILE);
        // Bigger blocks share each instruction call's overhead among more
        // points; registers must still fit in L1 (about 64 KiB of them).
        let block_points = (L1_REGISTER_BYTES / (8 * kernel.registers.max(1)))
            .clamp(MIN_BLOCK_POINTS, BLOCK_POINTS);
        let rows = (block_points / tile).clamp(1, ny.max(1));
        // A compiled kernel that writes the target directly (nothing of
        // its rows is read back from the scratch after the call) runs the
        // same rows of several planes in one call when a plane has fewer
        // rows than a block holds: a ghost layer normal to y is one row
        // per plane, and one call per plane cost more than its points.
        let planes_per_group = if runs_many_planes(kernel, native) && rows >= ny {
            (block_points / (tile * ny.max(1))).max(1)
        } else {
            1
        };
        let mut groups: SmallVec<[RowGroup; 8]> = SmallVec::new();
        let mut first_row = 0;
        let mut k = region.lo[2];
        while k < region.hi[2] {
            let planes = planes_per_group.min((region.hi[2] - k) as usize);
            let mut j0 = region.lo[1];
            while j0 < region.hi[1] {
                let count = rows.min((region.hi[1] - j0) as usize);
                groups.push(RowGroup {
                    j0,
                    rows: count,
                    k,
                    planes,
                    first_row,
                });
                first_row += count * planes;
                j0 += count as isize;
            }
            k += planes as isize;
        }
        let bands = band_order(kernel, fields, region, rows, &groups);
        let (strides, geometry) = if native {
            (
                fields
                    .iter()
                    .flat_map(|f| [f.strides[1] as i64, f.strides[2] as i64])
                    .collect(),
                crate::codegen::emit::geometry(kernel, patch),
            )
        } else {
            (SmallVec::new(), Vec::new())
        };
        Plan {
            groups,
            bands,
            width: tile + 2 * kernel.halo as usize,
            rows,
            halo: kernel.halo,
            strides,
            geometry,
        }
    }
}

impl Plan {
    /// The row groups in the order an assignment visits them.
    pub(super) fn assignment_order(&self) -> &[RowGroup] {
        if self.bands.is_empty() {
            &self.groups
        } else {
            &self.bands
        }
    }
}

/// Bytes of the rows an assignment keeps in cache between planes: the
/// planes a stencil reads along z stay in L2 (512 KiB on the smallest
/// current server cores) when a plane's rows fit in it.
pub(super) const BAND_BYTES: usize = 512 * 1024;

/// The row groups of `groups` (in (k, j) order, `rows` rows each except a
/// plane's last) in *band* order, or nothing when (k, j) order is kept.
///
/// A kernel that reads a field at z offsets reads each of its planes
/// again for the next planes (three times for a 7-point stencil). In
/// (k, j) order the reuse distance is whole planes of every field, which
/// at 256^2 points per plane (0.5 MiB per field) is beyond L2, so each
/// plane is read from L3 or memory up to three times. Band order cuts the
/// planes into bands of whole groups, `j0..j0 + band`, and runs every
/// plane of one band before the next band, so the reuse distance is a few
/// band-planes, sized to [`BAND_BYTES`]. Bands only reorder the groups an
/// assignment visits; each group's points, blocks and arithmetic are
/// unchanged, and every point is written once by one kernel call that
/// reads no point another group writes (`cpu/design.md`, aliasing rules), so
/// the values are bitwise the same in either order.
pub(super) fn band_order(
    kernel: &Kernel,
    fields: &[FieldData<'_>],
    region: &IndexBox,
    rows: usize,
    groups: &[RowGroup],
) -> Vec<RowGroup> {
    let [_, ny, nz] = region.extent();
    // Bytes per row of a band that stay in cache for the z reuse: every
    // plane a field's z extent spans, and the target row.
    let mut row_bytes = 8 * region.extent()[0];
    let mut reads_along_z = false;
    for (field, data) in kernel.fields.iter().zip(fields) {
        let span = (field.extent.max[2] - field.extent.min[2]).max(0) as usize;
        if field.transfer.is_some() {
            continue;
        }
        reads_along_z |= span > 0;
        row_bytes = row_bytes.saturating_add(8 * data.strides[1].max(1) as usize * (span + 1));
    }
    let plane_bytes = row_bytes.saturating_mul(ny);
    if !reads_along_z || nz < 3 || rows >= ny || plane_bytes <= BAND_BYTES {
        return Vec::new();
    }
    let groups_per_plane = ny.div_ceil(rows);
    let band = (BAND_BYTES / row_bytes / rows).max(1);
    if band >= groups_per_plane || groups.len() != groups_per_plane * nz {
        return Vec::new();
    }
    let mut order = Vec::with_capacity(groups.len());
    for first in (0..groups_per_plane).step_by(band) {
        let last = (first + band).min(groups_per_plane);
        for plane in 0..nz {
            order.extend_from_slice(
                &groups[plane * groups_per_plane + first..plane * groups_per_plane + last],
            );
        }
    }
    order
}

/// Whether `kernel` may run several planes in one call: compiled, and
/// writing the target directly (a result in the scratch rows is read back
/// after each call, and each plane would overwrite the last).
pub(super) fn runs_many_planes(kernel: &Kernel, native: bool) -> bool {
    native && kernel.result == OUTPUT
}

/// A run of rows of one plane, or the same rows of consecutive planes,
/// processed as blocks along x.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowGroup {
    pub(super) j0: isize,
    pub(super) rows: usize,
    pub(super) k: isize,
    /// Planes `k..k + planes`; more than one only when the rows are all of
    /// the region's rows in a plane (see [`Plan::new`]).
    pub(super) planes: usize,
    /// Index of the group's first row in the region's row numbering.
    pub(super) first_row: usize,
}

/// The context, and the region's row groups in (k, j) order.
/// The position of `kind` in [`LocationKind::ALL`].
pub(super) fn kind_index(kind: LocationKind) -> usize {
    match kind {
        LocationKind::CellCentre => 0,
        LocationKind::XFace => 1,
        LocationKind::YFace => 2,
        LocationKind::ZFace => 3,
    }
}

pub(super) fn blocks_of<'r>(
    group: &RowGroup,
    region: &'r IndexBox,
) -> impl Iterator<Item = Block> + 'r {
    let group = *group;
    (region.lo[0]..region.hi[0])
        .step_by(TILE)
        .map(move |x0| Block {
            x0,
            x1: (x0 + TILE as isize).min(region.hi[0]),
            j0: group.j0,
            rows: group.rows,
            k: group.k,
            planes: group.planes,
        })
}
