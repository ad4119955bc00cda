//! Dumps written per rank: every rank of a decomposed run writes the
//! patches it owns into a file of its own, so no rank ever holds (or
//! sends) the whole domain to write it.
//!
//! **Files.** Rank `r` of the dump at step `s` writes
//! `CASE_<s>.rank<r>.h5` (atomically, like every dump). Its root has the
//! attributes `case`, `time`, `step`, `rank` and `ranks`; each of its
//! patches is a group `patch_<index>` with the attributes `patch`,
//! `offset` (its first cell in the whole grid, x y z) and `cells`, holding
//! one dataset per field (the patch's interior, `(nz, ny, nx)`, with the
//! attributes of `watershed_fields::io`). A face field's piece is the
//! patch's faces normal to its axis but the last: a seam face belongs to
//! the patch on its plus side, and a patch that ends on a wall also holds
//! the wall's face ([`DumpPiece::extent`]), so the pieces tile the whole
//! face field as the patches tile the cells. The files say all a reader
//! needs to put the patches back together, without the XDMF.
//!
//! **Completion.** Rank 0 records the dump ([`crate::DumpSeries::record_rank_dump`])
//! only after every rank has written its file and reported it
//! ([`RankDumpReport`]: the file's size and a fingerprint of the fields
//! it holds, gathered from every rank). Rank 0 opens no other rank's
//! file: it checks that each file is where it sees the output directory
//! and of the size its rank wrote (a rank writing to a disk rank 0 cannot
//! read is refused by name), that every rank holds rank 0's fields, and
//! takes the pieces from the patch layout (which patches each rank owns).
//! Only then does it rewrite the XDMF, which shows each dump as a spatial
//! collection of its patches (one dataset in ParaView, see
//! [`crate::xdmf`]). A run killed between the files and the XDMF leaves a
//! dump the XDMF does not name; a restart reads the files of each dump
//! back ([`read_rank_dump_file`]) and removes those of an incomplete one.

use crate::attributes::{
    hdf5_error, read_number_attribute, read_triple_attribute, write_number_attribute,
    write_triple_attribute,
};
use crate::error::{OutputError, OutputResult};
use crate::record::{DumpPiece, DumpedField};
use std::path::{Path, PathBuf};
use watershed_fields::Grid;

/// The file rank `rank` writes for the dump of `case` at `step`:
/// `CASE_<step>.rank<rank>.h5`.
pub fn rank_dump_file_name(case: &str, step: u64, rank: usize) -> String {
    format!("{case}_{step:08}.rank{rank:05}.h5")
}

/// The step and rank of a file named by [`rank_dump_file_name`] for
/// `case`.
pub fn rank_dump_file_step(name: &str, case: &str) -> Option<(u64, usize)> {
    let rest = name.strip_prefix(case)?.strip_prefix('_')?;
    let rest = rest.strip_suffix(".h5")?;
    let (step, rank) = rest.split_once(".rank")?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits(step) || !digits(rank) {
        return None;
    }
    Some((step.parse().ok()?, rank.parse().ok()?))
}

/// The name of patch `index`'s group in a rank's dump file.
pub fn patch_group_name(index: usize) -> String {
    format!("patch_{index:05}")
}

/// Creates the group of patch `index` in a rank's dump file (`root`), with
/// where its cells lie in the whole grid. Write the patch's fields into it
/// (their interiors, e.g. with [`crate::dumps::dump_field`]). A group this
/// patch already has is opened instead, so that several writers (a case's
/// species and the flow that carries them) fill one patch's group; a group
/// of that name that says another offset or size is an error naming the
/// file and the group.
pub fn create_patch_group(
    root: &hdf5::Group,
    index: usize,
    offset: [usize; 3],
    cells: [usize; 3],
) -> OutputResult<hdf5::Group> {
    let name = patch_group_name(index);
    let file = PathBuf::from(root.filename());
    if root.link_exists(&name) {
        let group = root.group(&name).map_err(|e| hdf5_error(&file, &name, e))?;
        let held = (
            read_number_attribute::<u64>(&group, "patch")?,
            read_triple_attribute(&group, "offset")?,
            read_triple_attribute(&group, "cells")?,
        );
        let asked = (
            index as u64,
            offset.map(|v| v as u64),
            cells.map(|v| v as u64),
        );
        if held != asked {
            return Err(OutputError::output(
                &file,
                format!(
                    "group {name} holds patch {} of {:?} cells from {:?}, not patch {index} of {cells:?} cells from {offset:?}: the fields written into one patch's group must share its layout",
                    held.0, held.2, held.1
                ),
            ));
        }
        return Ok(group);
    }
    let group = root
        .create_group(&name)
        .map_err(|e| hdf5_error(&file, &name, e))?;
    write_number_attribute(&group, "patch", index as u64)?;
    write_triple_attribute(&group, "offset", offset.map(|v| v as u64))?;
    write_triple_attribute(&group, "cells", cells.map(|v| v as u64))?;
    Ok(group)
}

/// What one rank's dump file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct RankDumpFile {
    /// Simulated time.
    pub time: f64,
    /// Step.
    pub step: u64,
    /// The rank that wrote it.
    pub rank: usize,
    /// How many ranks wrote the dump.
    pub ranks: usize,
    /// The fields every patch holds (their extent is the first patch's).
    pub fields: Vec<DumpedField>,
    /// Its patches, in patch order.
    pub pieces: Vec<DumpPiece>,
}

/// Reads what the rank dump file at `path` holds (not the values): its
/// root attributes and its patch groups, each of which must lie in `grid`
/// and hold the same fields, each with the points its location has on
/// the patch ([`DumpPiece::extent`]: the patch's cells, a face field one
/// more along its axis where the patch ends on a wall).
pub fn read_rank_dump_file(path: &Path, grid: &Grid) -> OutputResult<RankDumpFile> {
    let error = |reason: String| OutputError::Output {
        path: path.to_path_buf(),
        reason,
    };
    let file = hdf5::File::open(path).map_err(|e| hdf5_error(path, "/", e))?;
    let time = read_number_attribute::<f64>(&file, "time")?;
    let step = read_number_attribute::<u64>(&file, "step")?;
    let rank = read_number_attribute::<u64>(&file, "rank")?;
    let ranks = read_number_attribute::<u64>(&file, "ranks")?;
    let to_usize = |value: u64, what: &str| {
        usize::try_from(value)
            .map_err(|_| error(format!("{what} {value} does not fit this machine")))
    };
    let (rank, ranks) = (to_usize(rank, "rank")?, to_usize(ranks, "ranks")?);
    if rank >= ranks {
        return Err(error(format!(
            "says it is rank {rank} of {ranks}; the file was altered"
        )));
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut names = file.member_names().map_err(|e| hdf5_error(path, "/", e))?;
    names.sort();
    let mut fields: Option<Vec<DumpedField>> = None;
    let mut pieces = Vec::new();
    for name in names {
        let group = file.group(&name).map_err(|e| hdf5_error(path, &name, e))?;
        let patch = to_usize(read_number_attribute::<u64>(&group, "patch")?, "patch")?;
        if name != patch_group_name(patch) {
            return Err(error(format!(
                "group {name} says it holds patch {patch}; the file was altered"
            )));
        }
        let offset = read_triple_attribute(&group, "offset")?;
        let cells = read_triple_attribute(&group, "cells")?;
        let mut triple = [[0usize; 3]; 2];
        for (k, values) in [offset, cells].iter().enumerate() {
            for a in 0..3 {
                triple[k][a] = to_usize(values[a], "a patch's offset or cells")?;
            }
        }
        let [offset, cells] = triple;
        let piece = DumpPiece {
            file: file_name.clone(),
            group: name.clone(),
            patch,
            offset,
            cells,
        };
        let held = crate::dump_file::read_fields(path, &group, &name)?;
        for field in &held {
            let Some(extent) = piece.extent(grid, field.location) else {
                return Err(error(format!(
                    "group {name} says its patch has {cells:?} cells from {offset:?}, which do not lie in the grid's {:?} cells: the file is of another grid",
                    grid.cells()
                )));
            };
            if field.extent != extent {
                return Err(error(format!(
                    "dataset {name}/{} has {:?} points, not the {extent:?} a {} field has on the patch's {cells:?} cells",
                    field.name,
                    field.extent,
                    field.location.name()
                )));
            }
        }
        match &fields {
            None => fields = Some(held),
            Some(first) => {
                let names = |list: &[DumpedField]| -> Vec<(String, usize)> {
                    list.iter()
                        .map(|f| (f.name.clone(), f.components))
                        .collect()
                };
                if names(first) != names(&held) {
                    return Err(error(format!(
                        "group {name} holds {:?}, the file's first patch {:?}: every patch of a dump holds the same fields",
                        names(&held),
                        names(first)
                    )));
                }
            }
        }
        pieces.push(piece);
    }
    Ok(RankDumpFile {
        time,
        step,
        rank,
        ranks,
        fields: fields.unwrap_or_default(),
        pieces,
    })
}

/// What a rank says of the dump file it wrote, for rank 0 to record the
/// dump without opening the file ([`crate::DumpSeries::record_rank_dump`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankDumpReport {
    /// The file's size in bytes once complete.
    pub bytes: u64,
    /// [`fields_fingerprint`] of the fields its patches hold.
    pub fields: u64,
}

impl RankDumpReport {
    /// How many numbers [`Self::to_numbers`] gives.
    pub const NUMBERS: usize = 3;

    /// The report as numbers a gather of `f64` carries exactly: the size
    /// (below 2^53 bytes), then the fingerprint's high and low 32 bits.
    pub fn to_numbers(self) -> [f64; Self::NUMBERS] {
        [
            self.bytes as f64,
            (self.fields >> 32) as f64,
            (self.fields & 0xffff_ffff) as f64,
        ]
    }

    /// The report [`Self::to_numbers`] gave; `None` for numbers it cannot
    /// have given (not whole, out of range, too few).
    pub fn from_numbers(numbers: &[f64]) -> Option<Self> {
        let whole = |value: f64, limit: f64| {
            (value >= 0.0 && value < limit && value.fract() == 0.0).then_some(value as u64)
        };
        let [bytes, high, low] = numbers else {
            return None;
        };
        let word = 4_294_967_296.0;
        Some(RankDumpReport {
            bytes: whole(*bytes, 9_007_199_254_740_992.0)?,
            fields: (whole(*high, word)? << 32) | whole(*low, word)?,
        })
    }
}

/// A fingerprint of a dump's fields (names, locations, components and
/// how derived fields were computed, in order; not their extents, which
/// differ between patches): FNV-1a over their bytes, the same in every
/// process, so ranks can compare what their files hold by sending 8
/// bytes.
pub fn fields_fingerprint(fields: &[DumpedField]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for field in fields {
        eat(field.name.as_bytes());
        eat(&[0]);
        eat(field.location.name().as_bytes());
        eat(&(field.components as u64).to_le_bytes());
        match &field.derived {
            Some(how) => {
                eat(&[1]);
                eat(how.as_bytes());
            }
            None => eat(&[0]),
        }
        eat(&[0xff]);
    }
    hash
}

/// What [`write_rank_dump`] wrote.
#[derive(Debug, Clone)]
pub struct WrittenRankDump {
    /// The file.
    pub path: PathBuf,
    /// The fields its patches hold (each with the extent of its last patch).
    pub fields: Vec<DumpedField>,
    /// What to send to rank 0.
    pub report: RankDumpReport,
}

/// Writes rank `rank`'s file of the dump of `case` at (`time`, `step`)
/// into `directory` (which rank 0's [`crate::DumpSeries`] holds), whole or
/// not at all: `write` adds one group per owned patch
/// ([`create_patch_group`]) and returns the fields each holds. Every rank
/// calls this and sends the [`RankDumpReport`] to rank 0, which then
/// records the dump with [`crate::DumpSeries::record_rank_dump`].
#[allow(clippy::too_many_arguments)]
pub fn write_rank_dump<E: From<OutputError>>(
    directory: &Path,
    case: &str,
    time: f64,
    step: u64,
    rank: usize,
    ranks: usize,
    write: impl FnOnce(&hdf5::Group) -> Result<Vec<DumpedField>, E>,
) -> Result<WrittenRankDump, E> {
    if rank >= ranks {
        return Err(E::from(OutputError::output(
            directory,
            format!("rank {rank} is not one of the {ranks} ranks writing the dump at step {step}"),
        )));
    }
    let path = directory.join(rank_dump_file_name(case, step, rank));
    let fields = crate::dump_file::write_dump_file(
        &path,
        case,
        time,
        step,
        |file| {
            write_number_attribute(file, "rank", rank as u64)?;
            write_number_attribute(file, "ranks", ranks as u64)
        },
        write,
    )?;
    let bytes = std::fs::metadata(&path)
        .map_err(|e| {
            E::from(OutputError::output(
                &path,
                format!("cannot read the size of the dump file just written: {e}"),
            ))
        })?
        .len();
    let report = RankDumpReport {
        bytes,
        fields: fields_fingerprint(&fields),
    };
    Ok(WrittenRankDump {
        path,
        fields,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dumps::{DumpSeries, dump_field};
    use watershed_fields::decomposition::PatchLayout;
    use watershed_fields::{
        CellCentre, Device, GhostWidth, Grid, LocationKind, SpatialField, XFace,
    };

    /// Writes rank `rank`'s file of a dump of `layout` at `step`: each
    /// owned patch's field `c` holds its cells' global x index.
    fn write_rank(
        dir: &Path,
        layout: &PatchLayout,
        step: u64,
        rank: usize,
        ranks: usize,
    ) -> WrittenRankDump {
        write_rank_dump::<OutputError>(dir, "demo", 0.5 * step as f64, step, rank, ranks, |root| {
            let mut fields = Vec::new();
            for index in layout.owned_by(rank, ranks)? {
                let patch = layout.patch(index)?;
                let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
                let mut c = SpatialField::<CellCentre>::new("c", &patch, Device::Cpu)?;
                let field_layout = c.layout().clone();
                let values = c.values_mut()?;
                for point in field_layout.interior().iter() {
                    values[field_layout.linear_index(point)] =
                        (patch.offset()[0] as isize + point[0]) as f64;
                }
                fields = vec![dump_field(&group, "c", &c)?];
            }
            Ok(fields)
        })
        .unwrap()
    }

    /// Records the dump at `step` from what each of `written` (every
    /// rank's, in rank order) reports, as rank 0 does.
    fn record(
        series: &mut DumpSeries,
        layout: &PatchLayout,
        time: f64,
        step: u64,
        written: &[WrittenRankDump],
    ) -> OutputResult<PathBuf> {
        let reports: Vec<RankDumpReport> = written.iter().map(|w| w.report).collect();
        series.record_rank_dump(time, step, layout, &reports, written[0].fields.clone())
    }

    fn layout() -> PatchLayout {
        let grid = Grid::new([8, 4, 2], [1.0, 0.5, 0.25], [0.0; 3]).unwrap();
        PatchLayout::new(&grid, [2, 2, 1], GhostWidth::uniform(1)).unwrap()
    }

    #[test]
    fn names_parse_back_and_other_names_do_not() {
        assert_eq!(
            rank_dump_file_name("demo", 12, 3),
            "demo_00000012.rank00003.h5"
        );
        assert_eq!(
            rank_dump_file_step("demo_00000012.rank00003.h5", "demo"),
            Some((12, 3))
        );
        for other in [
            "demo_00000012.h5",
            "demo_00000012.rank.h5",
            "demo_00000012.rank-1.h5",
            "other_00000012.rank00001.h5",
            "demo_x.rank00001.h5",
        ] {
            assert_eq!(rank_dump_file_step(other, "demo"), None, "{other}");
        }
    }

    /// Two writers fill one patch's group; a group of the same name with
    /// another offset is refused naming the group and both layouts.
    #[test]
    fn a_patch_group_reopens_for_a_second_writer_and_refuses_another_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("two_writers.h5");
        let file = hdf5::File::create(&path).unwrap();
        let grid = Grid::new([8, 4, 1], [1.0; 3], [0.0; 3]).unwrap();
        let patch =
            watershed_fields::Patch::new(&grid, [4, 0, 0], [4, 4, 1], GhostWidth::uniform(1))
                .unwrap();
        let first = create_patch_group(&file, 1, [4, 0, 0], [4, 4, 1]).unwrap();
        let a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu).unwrap();
        dump_field(&first, "a", &a).unwrap();
        let again = create_patch_group(&file, 1, [4, 0, 0], [4, 4, 1]).unwrap();
        dump_field(&again, "b", &a).unwrap();
        let mut names = file.group("patch_00001").unwrap().member_names().unwrap();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        let OutputError::Output { path: at, reason } =
            create_patch_group(&file, 1, [0, 0, 0], [4, 4, 1]).unwrap_err()
        else {
            panic!("not an output error");
        };
        assert_eq!(at, path);
        assert!(
            reason.contains("group patch_00001 holds patch 1 of [4, 4, 1] cells from [4, 0, 0]"),
            "{reason}"
        );
        assert!(
            reason.contains("not patch 1 of [4, 4, 1] cells from [0, 0, 0]"),
            "{reason}"
        );
    }

    #[test]
    fn ranks_files_make_one_dump_whose_xdmf_places_every_patch() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout();
        let grid = layout.grid().clone();
        let mut series = DumpSeries::create(dir.path(), "demo", &grid, false, None).unwrap();
        // 4 patches over 3 ranks: rank 0 owns two.
        let written: Vec<WrittenRankDump> = (0..3)
            .map(|rank| write_rank(dir.path(), &layout, 2, rank, 3))
            .collect();
        for w in &written {
            let bytes = std::fs::metadata(&w.path).unwrap().len();
            assert_eq!(w.report.bytes, bytes);
            assert_eq!(w.report.fields, written[0].report.fields);
            // The report survives the gather's numbers exactly.
            let numbers = w.report.to_numbers();
            assert_eq!(RankDumpReport::from_numbers(&numbers), Some(w.report));
        }
        record(&mut series, &layout, 1.0, 2, &written).unwrap();
        let record = &series.dumps()[0];
        assert_eq!(record.pieces.len(), 4);
        assert_eq!(
            record
                .pieces
                .iter()
                .map(|p| p.file.as_str())
                .collect::<Vec<_>>(),
            [
                "demo_00000002.rank00000.h5",
                "demo_00000002.rank00000.h5",
                "demo_00000002.rank00001.h5",
                "demo_00000002.rank00002.h5"
            ]
        );
        assert_eq!(record.pieces[3].offset, [4, 2, 0]);
        assert_eq!(record.pieces[3].cells, [4, 2, 2]);
        assert_eq!(record.fields[0].extent, [8, 4, 2]);
        let xdmf = std::fs::read_to_string(series.xdmf_path()).unwrap();
        assert_eq!(xdmf.matches("CollectionType=\"Spatial\"").count(), 1);
        assert_eq!(xdmf.matches("<Grid Name=\"patch ").count(), 4);
        // Patch 3 starts at x = 4 * 0.125, y = 2 * 0.125 (z y x order).
        assert!(xdmf.contains(">0e0 2.5e-1 5e-1<"), "{xdmf}");
        assert!(
            xdmf.contains("demo_00000002.rank00002.h5:/patch_00003/c<"),
            "{xdmf}"
        );
        assert!(xdmf.contains("Dimensions=\"2 2 4\""), "{xdmf}");
        // The values a reader finds in patch 3 are its cells' global x.
        let file = hdf5::File::open(dir.path().join("demo_00000002.rank00002.h5")).unwrap();
        let values: Vec<f64> = file.dataset("patch_00003/c").unwrap().read_raw().unwrap();
        assert_eq!(&values[..4], &[4.0, 5.0, 6.0, 7.0]);
    }

    /// Rank `rank`'s file with an x-face field `u` on each owned patch,
    /// holding each face's global x index; `extra`: one more face plane
    /// than the patch has on every patch.
    fn write_face_rank(
        dir: &Path,
        layout: &PatchLayout,
        rank: usize,
        ranks: usize,
        extra: bool,
    ) -> OutputResult<WrittenRankDump> {
        write_rank_dump::<OutputError>(dir, "demo", 1.0, 2, rank, ranks, |root| {
            let mut fields = Vec::new();
            for index in layout.owned_by(rank, ranks)? {
                let patch = layout.patch(index)?;
                let group = create_patch_group(root, index, patch.offset(), patch.cells())?;
                let mut cells = patch.cells();
                if extra {
                    cells[0] += 1;
                }
                let stored = if extra {
                    watershed_fields::Patch::new(
                        &Grid::new([9, 4, 2], [1.125, 0.5, 0.25], [0.0; 3]).unwrap(),
                        patch.offset(),
                        cells,
                        GhostWidth::uniform(0),
                    )?
                } else {
                    patch.clone()
                };
                let mut u = SpatialField::<XFace>::new("u", &stored, Device::Cpu)?;
                let field_layout = u.layout().clone();
                let values = u.values_mut()?;
                for point in field_layout.interior().iter() {
                    values[field_layout.linear_index(point)] =
                        (patch.offset()[0] as isize + point[0]) as f64;
                }
                let c = SpatialField::<CellCentre>::new("c", &patch, Device::Cpu)?;
                fields = vec![dump_field(&group, "u", &u)?, dump_field(&group, "c", &c)?];
            }
            Ok(fields)
        })
    }

    #[test]
    fn face_fields_per_rank_tile_the_whole_face_field_and_get_their_own_meshes() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout();
        let grid = layout.grid().clone();
        let mut series = DumpSeries::create(dir.path(), "demo", &grid, false, None).unwrap();
        let written: Vec<WrittenRankDump> = (0..3)
            .map(|rank| write_face_rank(dir.path(), &layout, rank, 3, false).unwrap())
            .collect();
        record(&mut series, &layout, 1.0, 2, &written).unwrap();
        let record = &series.dumps()[0];
        // The whole x-face field has 9 planes over 8 cells.
        let u = record.fields.iter().find(|f| f.name == "u").unwrap();
        assert_eq!((u.location, u.extent), (LocationKind::XFace, [9, 4, 2]));
        // Patches 1 and 3 end on the +x wall: 5 planes; 0 and 2: 4.
        let pieces: Vec<[usize; 3]> = record
            .pieces
            .iter()
            .map(|p| p.extent(&grid, LocationKind::XFace).unwrap())
            .collect();
        assert_eq!(pieces, [[4, 2, 2], [5, 2, 2], [4, 2, 2], [5, 2, 2]]);
        // Their values: every global face index once along each row.
        let file = hdf5::File::open(dir.path().join("demo_00000002.rank00000.h5")).unwrap();
        let right: Vec<f64> = file.dataset("patch_00001/u").unwrap().read_raw().unwrap();
        assert_eq!(&right[..5], &[4.0, 5.0, 6.0, 7.0, 8.0]);
        let faces = std::fs::read_to_string(dir.path().join("demo_xface.xmf")).unwrap();
        assert_eq!(faces.matches("<Grid Name=\"patch ").count(), 4);
        // Patch 1's mesh: 5 cells of faces from x = 4 - 0.5 (z y x order).
        assert!(faces.contains("Dimensions=\"3 3 6\""), "{faces}");
        assert!(faces.contains(">0e0 0e0 4.375e-1<"), "{faces}");
        assert!(
            faces.contains("Dimensions=\"2 2 5\" NumberType=\"Float\" Precision=\"8\" Format=\"HDF\">demo_00000002.rank00000.h5:/patch_00001/u<"),
            "{faces}"
        );
        // A piece with a face plane too many, in files a run left
        // without recording them, is refused by name when a restart reads
        // them back.
        drop(series);
        std::fs::remove_file(dir.path().join("demo.lock")).ok();
        for rank in 0..2 {
            write_face_rank(dir.path(), &layout, rank, 2, rank == 1).unwrap();
        }
        let error = DumpSeries::create(dir.path(), "demo", &grid, false, Some(2)).unwrap_err();
        assert!(
            matches!(&error, OutputError::Output { path, reason }
                if path.ends_with("demo_00000002.rank00001.h5")
                    && reason.contains("dataset patch_00002/u has [5, 2, 2] points, not the [4, 2, 2] a XFace field has")),
            "{error}"
        );
    }

    /// Rank 0 records a dump from the ranks' reports without opening
    /// their files, but refuses one it cannot see (written to a disk it
    /// does not share), one of another size than its rank wrote, and a
    /// rank whose patches hold other fields, each by name; nothing is
    /// recorded.
    #[test]
    fn a_missing_replaced_or_different_rank_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout();
        let mut series =
            DumpSeries::create(dir.path(), "demo", layout.grid(), false, None).unwrap();
        let first = write_rank(dir.path(), &layout, 1, 0, 2);
        let elsewhere = tempfile::tempdir().unwrap();
        let second = write_rank(elsewhere.path(), &layout, 1, 1, 2);
        let missing = record(&mut series, &layout, 0.5, 1, &[first.clone(), second]).unwrap_err();
        assert!(
            matches!(&missing, OutputError::Output { path, reason }
                if path.ends_with("demo_00000001.rank00001.h5")
                    && reason.contains("rank 1 wrote its file")
                    && reason.contains("shared file system")),
            "{missing}"
        );
        // Rank 1's file here, then one byte longer than it wrote.
        let second = write_rank(dir.path(), &layout, 1, 1, 2);
        let mut longer = std::fs::read(&second.path).unwrap();
        longer.push(0);
        std::fs::write(&second.path, longer).unwrap();
        let replaced = record(
            &mut series,
            &layout,
            0.5,
            1,
            &[first.clone(), second.clone()],
        )
        .unwrap_err();
        assert!(
            matches!(&replaced, OutputError::Output { path, reason }
                if path.ends_with("demo_00000001.rank00001.h5")
                    && reason.contains(&format!("but rank 1 wrote {}", second.report.bytes))),
            "{replaced}"
        );
        // Rank 1's patches with another field than rank 0's.
        let second = write_rank(dir.path(), &layout, 1, 1, 2);
        let mut other = second.clone();
        other.report.fields = fields_fingerprint(&[DumpedField {
            name: "d".into(),
            ..first.fields[0].clone()
        }]);
        let different = record(&mut series, &layout, 0.5, 1, &[first.clone(), other]).unwrap_err();
        assert!(
            matches!(&different, OutputError::Output { path, reason }
                if path.ends_with("demo_00000001.rank00001.h5")
                    && reason.contains("rank 1's patches hold other fields than rank 0's")),
            "{different}"
        );
        assert!(series.dumps().is_empty());
        record(&mut series, &layout, 0.5, 1, &[first, second]).unwrap();
        assert_eq!(series.dumps().len(), 1);
    }

    /// A restart reads each complete dump's files back: patches of two
    /// layouts that overlap are refused.
    #[test]
    fn a_restart_refuses_rank_files_whose_patches_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout();
        let grid = layout.grid().clone();
        write_rank(dir.path(), &layout, 4, 0, 3);
        write_rank(dir.path(), &layout, 4, 1, 3);
        let two = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1)).unwrap();
        // Rank 2 writes a patch of another layout that overlaps patch 0.
        write_rank_dump::<OutputError>(dir.path(), "demo", 2.0, 4, 2, 3, |root| {
            let patch = two.patch(0)?;
            let group = create_patch_group(root, 7, patch.offset(), patch.cells())?;
            let c = SpatialField::<CellCentre>::new("c", &patch, Device::Cpu)?;
            Ok(vec![dump_field(&group, "c", &c)?])
        })
        .unwrap();
        let overlap = DumpSeries::create(dir.path(), "demo", &grid, false, Some(4)).unwrap_err();
        assert!(
            matches!(&overlap, OutputError::Output { reason, .. } if reason.contains("overlap")),
            "{overlap}"
        );
    }

    #[test]
    fn a_restart_keeps_complete_dumps_per_rank_and_removes_an_incomplete_one() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout();
        let grid = layout.grid().clone();
        {
            let mut series = DumpSeries::create(dir.path(), "demo", &grid, false, None).unwrap();
            // Step 0 whole, step 2 on 2 ranks, then step 2 again on 4
            // ranks: the 2-rank files go.
            series
                .write(
                    0.0,
                    0,
                    &[(
                        "c",
                        &SpatialField::<CellCentre>::new("c", &grid.whole_domain(1), Device::Cpu)
                            .unwrap(),
                    )],
                )
                .unwrap();
            let two: Vec<WrittenRankDump> = (0..2)
                .map(|rank| write_rank(dir.path(), &layout, 2, rank, 2))
                .collect();
            record(&mut series, &layout, 1.0, 2, &two).unwrap();
            let four: Vec<WrittenRankDump> = (0..4)
                .map(|rank| write_rank(dir.path(), &layout, 2, rank, 4))
                .collect();
            record(&mut series, &layout, 1.0, 2, &four).unwrap();
            assert_eq!(series.dumps().len(), 2);
            // A dump at step 4 killed before rank 1 wrote.
            write_rank(dir.path(), &layout, 4, 0, 2);
        }
        std::fs::remove_file(dir.path().join("demo.lock")).ok();
        let series = DumpSeries::create(dir.path(), "demo", &grid, false, Some(2)).unwrap();
        assert_eq!(series.incomplete(), &[4]);
        assert!(!dir.path().join("demo_00000004.rank00000.h5").exists());
        let steps: Vec<(u64, usize)> = series
            .dumps()
            .iter()
            .map(|d| (d.step, d.pieces.len()))
            .collect();
        assert_eq!(steps, [(0, 0), (2, 4)]);
        assert_eq!(
            series.dumps()[1].pieces[3].file,
            "demo_00000002.rank00003.h5"
        );
        drop(series);
        // A new run into the folder is refused; an overwrite removes
        // every rank file.
        let refused = DumpSeries::create(dir.path(), "demo", &grid, false, None).unwrap_err();
        assert!(refused.to_string().contains("2 dump(s)"), "{refused}");
        let series = DumpSeries::create(dir.path(), "demo", &grid, true, None).unwrap();
        assert_eq!(series.replaced(), (2, 0));
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".h5"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
