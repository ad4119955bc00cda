//! The XDMF 3 documents that make a run's HDF5 dumps a time series for
//! ParaView and VisIt, laid out for ParaView's default `.xmf` reader.
//!
//! **One document per staggered location.** `CASE.xmf` holds every
//! cell-centred field (the pressure, scalars, and the derived cell-centred
//! velocity, speed and vorticity of a flow, see [`crate::derived`]);
//! `CASE_xface.xmf`, `CASE_yface.xmf` and `CASE_zface.xmf` hold the
//! staggered face fields (u, v, w as the solver has them), each on its own
//! mesh shifted by half a cell along its axis, so that every value sits at
//! its true position. Each document is a plain temporal collection of one
//! uniform grid per dump, all with the same name: ParaView's default reader
//! ("Xdmf3 Reader", what `OpenDataFile` picks) shows it as one image whose
//! arrays can be coloured by at once, and a filter made at one time stays
//! valid at every other. (One document holding all locations as a spatial
//! collection per dump came out of that reader as unnamed pieces of one
//! multi-piece dataset: the cavity coloured by p was a uniform grey
//! square.)
//!
//! **Meshes have the case's dimension.** An axis the grid does not resolve
//! (one cell, for example z in a 2D case) gets a single plane of points, so
//! a 2D case is a 2D image in the x-y plane (VTK data dimension 2) and a 1D
//! case a line, not a one-cell-thick slab. (`2DCoRectMesh` was tried too:
//! the Xdmf3 reader puts it in the y-z plane.)
//!
//! **A dump written per rank** ([`crate::rank_dumps`]) is a spatial
//! collection inside the temporal one: one uniform grid per patch, named
//! `patch <index>`, at its place in the grid, its values in its rank's
//! file. In a face document each patch's grid has its piece of the face
//! field ([`crate::DumpPiece::extent`]): the patch's cells, one more along
//! the axis where it ends on a wall. Every patch holds the same arrays, so ParaView's default reader
//! returns one multi-block dataset per time that colours, slices and
//! filters as one (scripts/viewer/paraview_sees_patches.py checks it).
//!
//! All values are `Center="Cell"`; dimensions, origins and spacings are in
//! z y x order as XDMF wants. Vectors are `AttributeType="Vector"` over a
//! `(nz, ny, nx, 3)` dataset. A derived field carries an `Information`
//! element `derived` saying how it was computed.

use crate::record::{DumpRecord, DumpedField};
use std::fmt::Write as _;
use watershed_fields::{Grid, LocationKind};

/// The file name of the XDMF document for the fields of `case` at
/// `location`: `CASE.xmf` for the cell centres, `CASE_xface.xmf` (and y, z)
/// for the faces.
pub fn xdmf_file_name(case: &str, location: LocationKind) -> String {
    match location {
        LocationKind::CellCentre => format!("{case}.xmf"),
        face => format!("{case}_{}.xmf", face.name().to_ascii_lowercase()),
    }
}

/// The locations that `dumps` hold fields at, in [`LocationKind::ALL`]
/// order.
pub fn dumped_locations(dumps: &[DumpRecord]) -> Vec<LocationKind> {
    LocationKind::ALL
        .into_iter()
        .filter(|l| {
            dumps
                .iter()
                .flat_map(|d| &d.fields)
                .any(|f| f.location == *l)
        })
        .collect()
}

/// The XDMF 3 document of the `location` fields of `dumps` on `grid` (see
/// the module docs). A dump without fields at `location` is left out.
pub fn xdmf_document(
    case: &str,
    grid: &Grid,
    dumps: &[DumpRecord],
    location: LocationKind,
) -> String {
    let active = grid.active_dimensions();
    // An unresolved axis has one plane of points, and its spacing means
    // nothing; ParaView's default "Slice" view of a 2D image showed nothing
    // with the cavity's dz = 1 (64 times dx), and shows it with dz = dx: an
    // unresolved axis gets the smallest resolved spacing.
    let finest = (0..3)
        .filter(|&a| active[a])
        .map(|a| grid.spacing()[a])
        .fold(f64::INFINITY, f64::min);
    let spacing = [0, 1, 2].map(|a| {
        if active[a] || !finest.is_finite() {
            grid.spacing()[a]
        } else {
            finest
        }
    });
    let grid_name = match location {
        LocationKind::CellCentre => "cells".to_string(),
        face => face.name().to_ascii_lowercase(),
    };
    let mut xml = String::new();
    let _ = writeln!(xml, "<?xml version=\"1.0\" ?>");
    let _ = writeln!(xml, "<Xdmf Version=\"3.0\">");
    let _ = writeln!(xml, "  <Domain>");
    let _ = writeln!(
        xml,
        "    <Grid Name=\"{}\" GridType=\"Collection\" CollectionType=\"Temporal\">",
        escape(case)
    );
    for dump in dumps {
        let fields: Vec<&DumpedField> = dump
            .fields
            .iter()
            .filter(|f| f.location == location)
            .collect();
        let Some(first) = fields.first() else {
            continue;
        };
        let mut origin = grid.origin();
        if let Some(axis) = location.face_axis() {
            origin[axis] -= 0.5 * grid.spacing()[axis];
        }
        if dump.pieces.is_empty() {
            let data =
                |field: &DumpedField| (format!("{}:/{}", dump.file, field.name), field.extent);
            let _ = writeln!(
                xml,
                "      <Grid Name=\"{grid_name}\" GridType=\"Uniform\">"
            );
            let _ = writeln!(xml, "        <Time Value=\"{:e}\"/>", dump.time);
            uniform_grid(
                &mut xml,
                "        ",
                first.extent,
                origin,
                spacing,
                active,
                &fields,
                data,
            );
            let _ = writeln!(xml, "      </Grid>");
            continue;
        }
        // Per rank: one uniform grid per patch, at its place in the grid.
        let _ = writeln!(
            xml,
            "      <Grid Name=\"{grid_name}\" GridType=\"Collection\" CollectionType=\"Spatial\">"
        );
        let _ = writeln!(xml, "        <Time Value=\"{:e}\"/>", dump.time);
        for piece in &dump.pieces {
            let corner = [0, 1, 2].map(|a| origin[a] + piece.offset[a] as f64 * grid.spacing()[a]);
            // A face field's piece holds one more plane where the patch
            // ends on a wall: its own mesh of that many cells.
            let extent = piece.extent(grid, location).unwrap_or(piece.cells);
            let data = |field: &DumpedField| {
                (
                    format!("{}:/{}/{}", piece.file, piece.group, field.name),
                    extent,
                )
            };
            let _ = writeln!(
                xml,
                "        <Grid Name=\"patch {}\" GridType=\"Uniform\">",
                piece.patch
            );
            uniform_grid(
                &mut xml,
                "          ",
                extent,
                corner,
                spacing,
                active,
                &fields,
                data,
            );
            let _ = writeln!(xml, "        </Grid>");
        }
        let _ = writeln!(xml, "      </Grid>");
    }
    let _ = writeln!(xml, "    </Grid>");
    let _ = writeln!(xml, "  </Domain>");
    let _ = writeln!(xml, "</Xdmf>");
    xml
}

/// The topology, geometry and attributes of one uniform grid of `cells`
/// cells from `origin`, each line indented by `indent`; `data` says where
/// a field's values are (`FILE:/PATH`) and their extent (x, y, z).
#[allow(clippy::too_many_arguments)]
fn uniform_grid(
    xml: &mut String,
    indent: &str,
    cells: [usize; 3],
    origin: [f64; 3],
    spacing: [f64; 3],
    active: [bool; 3],
    fields: &[&DumpedField],
    data: impl Fn(&DumpedField) -> (String, [usize; 3]),
) {
    let zyx = |v: [f64; 3]| format!("{:e} {:e} {:e}", v[2], v[1], v[0]);
    // Points per axis: one more than the cells where the axis is resolved,
    // a single plane where it is not.
    let points = [0, 1, 2].map(|a| if active[a] { cells[a] + 1 } else { 1 });
    let _ = writeln!(
        xml,
        "{indent}<Topology TopologyType=\"3DCoRectMesh\" Dimensions=\"{} {} {}\"/>",
        points[2], points[1], points[0]
    );
    let _ = writeln!(
        xml,
        "{indent}<Geometry GeometryType=\"ORIGIN_DXDYDZ\">\n{indent}  <DataItem Dimensions=\"3\" NumberType=\"Float\" Precision=\"8\" Format=\"XML\">{}</DataItem>\n{indent}  <DataItem Dimensions=\"3\" NumberType=\"Float\" Precision=\"8\" Format=\"XML\">{}</DataItem>\n{indent}</Geometry>",
        zyx(origin),
        zyx(spacing)
    );
    for field in fields {
        let (kind, components) = if field.components == 3 {
            ("Vector", " 3")
        } else {
            ("Scalar", "")
        };
        let _ = writeln!(
            xml,
            "{indent}<Attribute Name=\"{}\" AttributeType=\"{kind}\" Center=\"Cell\">",
            escape(&field.name)
        );
        if let Some(how) = &field.derived {
            let _ = writeln!(
                xml,
                "{indent}  <Information Name=\"derived\" Value=\"{}\"/>",
                escape(how)
            );
        }
        let (path, extent) = data(field);
        let _ = writeln!(
            xml,
            "{indent}  <DataItem Dimensions=\"{} {} {}{components}\" NumberType=\"Float\" Precision=\"8\" Format=\"HDF\">{}</DataItem>\n{indent}</Attribute>",
            extent[2],
            extent[1],
            extent[0],
            escape(&path)
        );
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, location: LocationKind, extent: [usize; 3]) -> DumpedField {
        DumpedField {
            name: name.into(),
            location,
            extent,
            components: 1,
            derived: None,
        }
    }

    #[test]
    fn each_location_has_its_own_file_and_a_2d_case_a_single_z_plane() {
        let grid = Grid::new([4, 3, 1], [1.0, 0.75, 2.0], [0.0; 3]).unwrap();
        let dumps: Vec<DumpRecord> = [0.0, 0.5]
            .iter()
            .enumerate()
            .map(|(k, &time)| DumpRecord {
                file: format!("c_{k}.h5"),
                time,
                step: k as u64,
                fields: vec![
                    field("p", LocationKind::CellCentre, [4, 3, 1]),
                    field("u", LocationKind::XFace, [5, 3, 1]),
                    DumpedField {
                        components: 3,
                        derived: Some("mean of <faces> & more".into()),
                        ..field("velocity", LocationKind::CellCentre, [4, 3, 1])
                    },
                ],
                pieces: Vec::new(),
            })
            .collect();
        assert_eq!(
            dumped_locations(&dumps),
            vec![LocationKind::CellCentre, LocationKind::XFace]
        );
        assert_eq!(
            xdmf_file_name("c", LocationKind::CellCentre),
            "c.xmf".to_string()
        );
        assert_eq!(xdmf_file_name("c", LocationKind::YFace), "c_yface.xmf");
        let cells = xdmf_document("c", &grid, &dumps, LocationKind::CellCentre);
        // Two dumps, one grid each, the same name at every time.
        assert_eq!(cells.matches("<Grid Name=\"cells\"").count(), 2);
        assert!(!cells.contains("Spatial"));
        // z unresolved: one plane of points.
        assert!(cells.contains("Dimensions=\"1 4 5\""), "{cells}");
        assert!(cells.contains("Dimensions=\"1 3 4 3\""), "{cells}");
        assert!(cells.contains("AttributeType=\"Vector\""));
        assert!(cells.contains("Value=\"mean of &lt;faces&gt; &amp; more\""));
        assert!(!cells.contains(":/u<"));
        let faces = xdmf_document("c", &grid, &dumps, LocationKind::XFace);
        assert!(faces.contains("Dimensions=\"1 4 6\""), "{faces}");
        // Shifted half a cell (0.25) down x: origin in z y x order.
        assert!(faces.contains(">0e0 0e0 -1.25e-1<"), "{faces}");
        // dz = 2 is replaced by the finest resolved spacing, dx = dy.
        assert!(faces.contains(">2.5e-1 2.5e-1 2.5e-1<"), "{faces}");
        assert!(faces.contains("c_1.h5:/u<"));
        assert!(!faces.contains(":/p<"));
    }
}
