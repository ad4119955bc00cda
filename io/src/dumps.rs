//! HDF5 dumps and the XDMF time series that ParaView and VisIt open.
//!
//! **One HDF5 file per dump** (`CASE_<step>.h5`), not one file with a group
//! per dump: each dump is written to a temporary file and renamed into place
//! (see `watershed_fields::io::replace_file`), so a run killed at any moment
//! leaves every completed dump whole, and no dump ever rewrites (or copies)
//! the ones before it. Each file holds one dataset per field (its interior,
//! `(nz, ny, nx)`) with the attributes of `watershed_fields::io`, and root
//! attributes `case`, `time` and `step`.
//!
//! **The XDMF documents** (`CASE.xmf` for the cell-centred fields,
//! `CASE_xface.xmf` ... for the staggered ones; their layout is
//! [`crate::xdmf`]'s) are rewritten after every dump to a temporary file
//! that is synced and renamed over the old one, so each is always valid and
//! never names a dump that is not complete.
//!
//! **Dumps per rank** ([`crate::rank_dumps`]) enter the same series:
//! [`DumpSeries::record_rank_dump`] records one once every rank has written
//! its file, and a restart finds them again among the whole ones.

use crate::attributes::{hdf5_error, read_number_attribute};
use crate::dump_file::{read_fields, write_dump_file};
use crate::error::{OutputError, OutputResult};
use crate::files::{is_writers_temporary, numbered_file_step, write_text_file_atomically};
use crate::lock::OutputLock;
use crate::rank_dumps::{
    RankDumpReport, fields_fingerprint, patch_group_name, rank_dump_file_name, rank_dump_file_step,
    read_rank_dump_file,
};
use crate::xdmf::{dumped_locations, xdmf_document, xdmf_file_name};
use std::path::{Path, PathBuf};
use watershed_exprgraph::{ExpressionGraph, GraphLocation, Tag};
use watershed_fields::io::{GhostSelection, write_field};
use watershed_fields::{
    FieldLayout, FieldScalar, Grid, Location, LocationKind, PatchLayout, SpatialField,
};

pub use crate::record::{DumpPiece, DumpRecord, DumpedField};

/// Writes the interior of `field` as dataset `name` of `group`.
pub fn dump_field<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
    field: &SpatialField<L, T>,
) -> OutputResult<DumpedField> {
    write_field(group, name, field, GhostSelection::Interior)?;
    Ok(DumpedField {
        name: name.into(),
        location: L::KIND,
        extent: field.layout().interior_extent(),
        components: 1,
        derived: None,
    })
}

/// Writes the interior of the graph's field `tag` as dataset `name`.
pub fn dump_graph_field<L: GraphLocation>(
    graph: &ExpressionGraph,
    tag: &Tag,
    group: &hdf5::Group,
    name: &str,
) -> OutputResult<DumpedField> {
    graph.with_field::<L, _>(tag, |field| dump_field(group, name, field))?
}

/// A field that [`DumpSeries::write`] can put into a dump: a
/// [`SpatialField`] at any location, of `f64` or `f32`.
pub trait DumpableField {
    /// Writes the field's interior as dataset `name` of `group`.
    fn dump_into(&self, group: &hdf5::Group, name: &str) -> OutputResult<DumpedField>;
}

impl<L: Location, T: FieldScalar> DumpableField for SpatialField<L, T> {
    fn dump_into(&self, group: &hdf5::Group, name: &str) -> OutputResult<DumpedField> {
        dump_field(group, name, self)
    }
}

/// Writes the dumps of a run into a directory and keeps its XDMF current.
#[derive(Debug)]
pub struct DumpSeries {
    directory: PathBuf,
    case: String,
    grid: Grid,
    dumps: Vec<DumpRecord>,
    /// What `--overwrite` removed of the earlier run (dumps, checkpoints).
    replaced: (usize, usize),
    /// Temporary files of killed writers removed at the start: (files,
    /// bytes).
    swept: (usize, u64),
    /// The steps of incomplete dumps per rank removed at a restart.
    incomplete: Vec<u64>,
    /// The folder belongs to this run while the manager lives.
    _lock: OutputLock,
}

impl DumpSeries {
    /// Output of case `case` on `grid` into `directory` (created if
    /// needed), locked for this run while the manager lives
    /// ([`OutputLock`]: a second run into it is refused). A directory that
    /// already holds this case's results is refused unless `overwrite` (the
    /// old dumps and checkpoints are then removed, [`Self::replaced`]), or a
    /// restart continues from `restart_step`: every dump stays in the
    /// series (the restart reproduces its run bit for bit, and replaces
    /// each dump it reaches; one it does not reach is never deleted).
    pub fn create(
        directory: &Path,
        case: &str,
        grid: &Grid,
        overwrite: bool,
        restart_step: Option<u64>,
    ) -> OutputResult<Self> {
        let error = |reason: String| OutputError::Output {
            path: directory.to_path_buf(),
            reason,
        };
        std::fs::create_dir_all(directory)
            .map_err(|e| error(format!("cannot create the directory: {e}")))?;
        // Before anything in it is looked at or removed: one run per folder.
        let lock = OutputLock::acquire(directory, case)?;
        let mut existing: Vec<(u64, PathBuf)> = Vec::new();
        // The files of dumps written per rank: (step, rank, path).
        let mut rank_files: Vec<(u64, usize, PathBuf)> = Vec::new();
        let mut checkpoints: Vec<PathBuf> = Vec::new();
        let mut checkpoint_count = 0;
        let mut swept = (0usize, 0u64);
        let entries = std::fs::read_dir(directory)
            .map_err(|e| error(format!("cannot list the directory: {e}")))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_writers_temporary(&name) {
                // The folder is this run's (the lock): a temporary file in
                // it was left by a writer that was killed.
                let bytes = entry.metadata().map_or(0, |m| m.len());
                std::fs::remove_file(entry.path()).map_err(|e| {
                    error(format!(
                        "cannot remove the stale temporary file {name}: {e}"
                    ))
                })?;
                swept = (swept.0 + 1, swept.1 + bytes);
            } else if let Some(step) = numbered_file_step(&name, case) {
                existing.push((step, entry.path()));
            } else if let Some((step, rank)) = rank_dump_file_step(&name, case) {
                rank_files.push((step, rank, entry.path()));
            } else if numbered_file_step(&name, "checkpoint").is_some() {
                checkpoints.push(entry.path());
                checkpoint_count += 1;
            } else if rank_dump_file_step(&name, "checkpoint").is_some() {
                // A rank's part of a checkpoint written per rank: it goes
                // with the checkpoint.
                checkpoints.push(entry.path());
            }
        }
        existing.sort();
        rank_files.sort();
        let mut rank_steps: Vec<u64> = rank_files.iter().map(|f| f.0).collect();
        rank_steps.dedup();
        rank_steps.retain(|step| !existing.iter().any(|(s, _)| s == step));
        let earlier_dumps = existing.len() + rank_steps.len();
        let xdmf = directory.join(format!("{case}.xmf"));
        if restart_step.is_none() && !overwrite && (xdmf.exists() || earlier_dumps > 0) {
            return Err(error(format!(
                "already holds the results of a `{case}` run ({earlier_dumps} dump(s)); choose another --output, continue it with --restart, or pass --overwrite to replace them"
            )));
        }
        // An overwrite replaces the whole earlier run: its checkpoints
        // too, or the newest-two rule would delete the new run's instead.
        let mut replaced = (0, 0);
        if overwrite && restart_step.is_none() {
            replaced = (earlier_dumps, checkpoint_count);
            for path in &checkpoints {
                std::fs::remove_file(path)
                    .map_err(|e| error(format!("cannot remove {}: {e}", path.display())))?;
            }
        }
        // A restart continues its own run, whose state it reproduces bit
        // for bit: every dump stays in the series, and each one the
        // restart reaches is replaced (atomically) by the same values. A
        // dump the restart does not reach (it stops earlier, or dumps on
        // another schedule) is never deleted.
        let mut dumps = Vec::new();
        for (_, path) in existing {
            if restart_step.is_some() {
                dumps.push(Self::read_record(&path)?);
            } else {
                std::fs::remove_file(&path)
                    .map_err(|e| error(format!("cannot remove {}: {e}", path.display())))?;
            }
        }
        let mut manager = DumpSeries {
            directory: directory.to_path_buf(),
            case: case.into(),
            grid: grid.clone(),
            dumps,
            replaced,
            swept,
            incomplete: Vec::new(),
            _lock: lock,
        };
        manager.take_rank_dumps(rank_files, restart_step.is_some())?;
        manager.write_xdmf()?;
        Ok(manager)
    }

    /// The dumps per rank a new series finds (`files`: step, rank, path).
    /// Without `keep` (a new run) they are removed. A restart keeps each
    /// complete one in the series; a step that also has a whole dump keeps
    /// that one. The files of a dump that is not complete (a rank's file
    /// missing or of another dump: a run killed while writing it) named no
    /// dump in the XDMF and are removed ([`Self::incomplete`]).
    fn take_rank_dumps(
        &mut self,
        files: Vec<(u64, usize, PathBuf)>,
        keep: bool,
    ) -> OutputResult<()> {
        let remove = |path: &Path| {
            std::fs::remove_file(path).map_err(|e| {
                OutputError::output(path, format!("cannot remove this earlier dump file: {e}"))
            })
        };
        let mut steps: Vec<u64> = files.iter().map(|f| f.0).collect();
        steps.dedup();
        for step in steps {
            let of_step: Vec<&(u64, usize, PathBuf)> =
                files.iter().filter(|f| f.0 == step).collect();
            let whole = self.dumps.iter().any(|d| d.step == step);
            // Complete: rank 0's file says how many ranks wrote the dump,
            // and each of their files is here. Anything else wrong with
            // them is an error, not a reason to remove them.
            let mut record = None;
            if keep && !whole {
                let ranks = match of_step.iter().find(|f| f.1 == 0) {
                    Some(first) => Some(read_rank_dump_file(&first.2, &self.grid)?.ranks),
                    None => None,
                };
                let complete =
                    ranks.is_some_and(|n| (0..n).all(|r| of_step.iter().any(|f| f.1 == r)));
                match ranks {
                    Some(n) if complete => record = Some(self.read_rank_dump(step, n)?),
                    _ => self.incomplete.push(step),
                }
            }
            for (_, rank, path) in &of_step {
                let name = rank_dump_file_name(&self.case, step, *rank);
                let used = record
                    .as_ref()
                    .is_some_and(|r: &DumpRecord| r.pieces.iter().any(|p| p.file == name));
                if !used {
                    remove(path)?;
                }
            }
            if let Some(record) = record {
                self.dumps.push(record);
            }
        }
        self.dumps.sort_by_key(|d| d.step);
        Ok(())
    }

    /// The steps of dumps per rank a restart found incomplete (a run
    /// killed while writing them, before they were recorded) and removed.
    pub fn incomplete(&self) -> &[u64] {
        &self.incomplete
    }

    fn read_record(path: &Path) -> OutputResult<DumpRecord> {
        let file = hdf5::File::open(path).map_err(|e| hdf5_error(path, "/", e))?;
        let time = read_number_attribute::<f64>(&file, "time")?;
        let step = read_number_attribute::<u64>(&file, "step")?;
        let fields = read_fields(path, &file, "")?;
        Ok(DumpRecord {
            file: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            time,
            step,
            fields,
            pieces: Vec::new(),
        })
    }

    /// Temporary files that killed writers left in the folder, removed at
    /// the start: (files, bytes).
    pub fn swept(&self) -> (usize, u64) {
        self.swept
    }

    /// What `overwrite` removed of an earlier run: (dumps, checkpoints).
    pub fn replaced(&self) -> (usize, usize) {
        self.replaced
    }

    /// The output directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The main XDMF document: the cell-centred fields (see
    /// [`crate::xdmf`]).
    pub fn xdmf_path(&self) -> PathBuf {
        self.directory
            .join(xdmf_file_name(&self.case, LocationKind::CellCentre))
    }

    /// Every XDMF document the run has: the main one, then one per
    /// staggered face location the dumps hold.
    pub fn xdmf_paths(&self) -> Vec<PathBuf> {
        let locations = dumped_locations(&self.dumps);
        LocationKind::ALL
            .into_iter()
            .filter(|l| *l == LocationKind::CellCentre || locations.contains(l))
            .map(|l| self.directory.join(xdmf_file_name(&self.case, l)))
            .collect()
    }

    /// The completed dumps.
    pub fn dumps(&self) -> &[DumpRecord] {
        &self.dumps
    }

    /// Writes one dump at (`time`, `step`): `write` adds the fields to the
    /// new file and returns what it wrote. Then the XDMF is rewritten.
    pub fn dump<E: From<OutputError>>(
        &mut self,
        time: f64,
        step: u64,
        write: impl FnOnce(&hdf5::Group) -> Result<Vec<DumpedField>, E>,
    ) -> Result<PathBuf, E> {
        let name = format!("{}_{step:08}.h5", self.case);
        let path = self.directory.join(&name);
        let fields = write_dump_file(&path, &self.case, time, step, |_| Ok(()), write)?;
        self.remember(DumpRecord {
            file: name,
            time,
            step,
            fields,
            pieces: Vec::new(),
        })?;
        Ok(path)
    }

    /// Records the dump at (`time`, `step`) that every rank has written
    /// into a file of its own ([`crate::rank_dumps::write_rank_dump`]) and
    /// reported (`reports`, by rank, gathered from every rank); call it on
    /// the rank that holds this series. `fields` are what rank 0's own
    /// file holds. No rank's file is opened: each must be in this
    /// series' directory with the size its rank reported (else it was
    /// written where this rank cannot see it, or replaced), every rank's
    /// fields must be rank 0's, and the pieces are the patches of
    /// `layout` each rank owns, which must tile the grid. Then the XDMF is
    /// rewritten, with the dump as a spatial collection of its patches.
    /// Files this step had before (a whole dump, or rank files of more
    /// ranks) are removed.
    pub fn record_rank_dump(
        &mut self,
        time: f64,
        step: u64,
        layout: &PatchLayout,
        reports: &[RankDumpReport],
        fields: Vec<DumpedField>,
    ) -> OutputResult<PathBuf> {
        let ranks = reports.len();
        let fail = |reason: String| {
            OutputError::output(
                &self.directory,
                format!("the dump at step {step} per rank: {reason}"),
            )
        };
        if ranks == 0 {
            return Err(fail("no rank reported its file".into()));
        }
        if layout.grid().cells() != self.grid.cells() {
            return Err(fail(format!(
                "the patch layout is of a grid of {:?} cells, the series of {:?}",
                layout.grid().cells(),
                self.grid.cells()
            )));
        }
        if fields_fingerprint(&fields) != reports[0].fields {
            return Err(fail(
                "rank 0's fields are not those its report describes".into(),
            ));
        }
        let mut pieces = Vec::new();
        for (rank, report) in reports.iter().enumerate() {
            let file = rank_dump_file_name(&self.case, step, rank);
            let path = self.directory.join(&file);
            let seen = std::fs::metadata(&path).map(|m| m.len()).map_err(|e| {
                OutputError::output(
                    &path,
                    format!(
                        "rank {rank} wrote its file of the dump at step {step} ({} bytes), but it is not here ({e}): every rank must write into a directory this rank reads (a shared file system)",
                        report.bytes
                    ),
                )
            })?;
            if seen != report.bytes {
                return Err(OutputError::output(
                    &path,
                    format!(
                        "holds {seen} bytes, but rank {rank} wrote {}: the file was replaced, or the directory is not the one rank {rank} wrote to; remove it or choose another --output",
                        report.bytes
                    ),
                ));
            }
            if report.fields != reports[0].fields {
                return Err(OutputError::output(
                    &path,
                    format!(
                        "rank {rank}'s patches hold other fields than rank 0's: every patch of a dump holds the same fields"
                    ),
                ));
            }
            for index in layout.owned_by(rank, ranks)? {
                let patch = layout.patch(index)?;
                pieces.push(DumpPiece {
                    file: file.clone(),
                    group: patch_group_name(index),
                    patch: index,
                    offset: patch.offset(),
                    cells: patch.cells(),
                });
            }
        }
        self.check_tiling(step, &pieces)?;
        let mut fields = fields;
        // The whole grid's extent per location: the pieces of a face
        // field tile it as the patches tile the cells.
        let whole = self.grid.whole_domain(0);
        for field in &mut fields {
            field.extent = FieldLayout::new(&whole, field.location).interior_extent();
        }
        self.remember(DumpRecord {
            file: rank_dump_file_name(&self.case, step, 0),
            time,
            step,
            fields,
            pieces,
        })?;
        Ok(self
            .directory
            .join(rank_dump_file_name(&self.case, step, 0)))
    }

    /// The record of the dump at `step` written by `ranks` ranks, read
    /// back from their files (a restart's check of a dump it keeps): they
    /// must all be there, of this dump and time, hold the same fields, and
    /// their patches must tile the grid.
    fn read_rank_dump(&self, step: u64, ranks: usize) -> OutputResult<DumpRecord> {
        let mut fields: Option<Vec<DumpedField>> = None;
        let mut pieces = Vec::new();
        let mut dump_time: Option<f64> = None;
        for rank in 0..ranks {
            let path = self
                .directory
                .join(rank_dump_file_name(&self.case, step, rank));
            if !path.exists() {
                return Err(OutputError::output(
                    &path,
                    format!(
                        "rank {rank}'s file of the dump at step {step} is missing: every one of the {ranks} ranks writes its patches before the dump is recorded"
                    ),
                ));
            }
            let held = read_rank_dump_file(&path, &self.grid)?;
            let expected_time = *dump_time.get_or_insert(held.time);
            if held.step != step
                || held.rank != rank
                || held.ranks != ranks
                || held.time.to_bits() != expected_time.to_bits()
            {
                return Err(OutputError::output(
                    &path,
                    format!(
                        "holds rank {} of {} at step {} and time {:e}, not rank {rank} of {ranks} at step {step} and time {expected_time:e}: it comes from another run or dump; remove it or choose another --output",
                        held.rank, held.ranks, held.step, held.time
                    ),
                ));
            }
            let names = |list: &[DumpedField]| -> Vec<(String, usize)> {
                list.iter()
                    .map(|f| (f.name.clone(), f.components))
                    .collect()
            };
            match &fields {
                None => fields = Some(held.fields),
                Some(first) if names(first) != names(&held.fields) => {
                    return Err(OutputError::output(
                        &path,
                        format!(
                            "holds the fields {:?}, rank 0's file {:?}: every patch of a dump holds the same fields",
                            names(&held.fields),
                            names(first)
                        ),
                    ));
                }
                Some(_) => {}
            }
            pieces.extend(held.pieces);
        }
        pieces.sort_by_key(|p| p.patch);
        self.check_tiling(step, &pieces)?;
        let mut fields = fields.unwrap_or_default();
        // The whole grid's extent per location: the pieces of a face
        // field tile it as the patches tile the cells.
        let whole = self.grid.whole_domain(0);
        for field in &mut fields {
            field.extent = FieldLayout::new(&whole, field.location).interior_extent();
        }
        Ok(DumpRecord {
            file: rank_dump_file_name(&self.case, step, 0),
            time: dump_time.unwrap_or(0.0),
            step,
            fields,
            pieces,
        })
    }

    /// Checks that `pieces` (in patch order) cover every cell of the grid
    /// exactly once.
    fn check_tiling(&self, step: u64, pieces: &[DumpPiece]) -> OutputResult<()> {
        let cells = self.grid.cells();
        let fail = |reason: String| {
            OutputError::output(
                &self.directory,
                format!("the dump at step {step} per rank: {reason}"),
            )
        };
        if pieces.is_empty() {
            return Err(fail("no rank wrote a patch".into()));
        }
        let mut covered = 0usize;
        for (k, piece) in pieces.iter().enumerate() {
            if k > 0 && pieces[k - 1].patch == piece.patch {
                return Err(fail(format!(
                    "patch {} is in {} and {}",
                    piece.patch,
                    pieces[k - 1].file,
                    piece.file
                )));
            }
            let inside = (0..3).all(|a| {
                piece.cells[a] > 0
                    && piece.offset[a]
                        .checked_add(piece.cells[a])
                        .is_some_and(|end| end <= cells[a])
            });
            if !inside {
                return Err(fail(format!(
                    "patch {} of {} ({:?} cells from {:?}) does not lie in the grid's {cells:?} cells",
                    piece.patch, piece.file, piece.cells, piece.offset
                )));
            }
            covered += piece.cells.iter().product::<usize>();
        }
        // Boxes inside the grid, none repeated: they tile it when their
        // cells add up and no two overlap.
        for (k, a) in pieces.iter().enumerate() {
            for b in &pieces[k + 1..] {
                let overlap = (0..3).all(|axis| {
                    a.offset[axis] < b.offset[axis] + b.cells[axis]
                        && b.offset[axis] < a.offset[axis] + a.cells[axis]
                });
                if overlap {
                    return Err(fail(format!("patches {} and {} overlap", a.patch, b.patch)));
                }
            }
        }
        if covered != self.grid.total_cells() {
            return Err(fail(format!(
                "its patches hold {covered} cells, the grid {}: a rank's patches are missing",
                self.grid.total_cells()
            )));
        }
        Ok(())
    }

    /// Puts `record` into the series in step order (replacing a dump of
    /// its step), removes the files of that step it does not use (a whole
    /// dump replaced by one per rank, or the reverse; rank files of more
    /// ranks) and rewrites the XDMF.
    fn remember(&mut self, record: DumpRecord) -> OutputResult<()> {
        let used: Vec<&str> = if record.pieces.is_empty() {
            vec![record.file.as_str()]
        } else {
            record.pieces.iter().map(|p| p.file.as_str()).collect()
        };
        let step = record.step;
        for path in self.files_of_step(step)? {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !used.contains(&name.as_str()) {
                std::fs::remove_file(&path).map_err(|e| {
                    OutputError::output(
                        &path,
                        format!("cannot remove this step's earlier dump file: {e}"),
                    )
                })?;
            }
        }
        self.dumps.retain(|d| d.step != step);
        self.dumps.push(record);
        // A restart's dumps land among kept later ones: the series stays
        // in step (and time) order.
        self.dumps.sort_by_key(|d| d.step);
        self.write_xdmf()
    }

    /// The dump files of `step` in the folder: the whole one and every
    /// rank's.
    fn files_of_step(&self, step: u64) -> OutputResult<Vec<PathBuf>> {
        let entries = std::fs::read_dir(&self.directory).map_err(|e| {
            OutputError::output(&self.directory, format!("cannot list the directory: {e}"))
        })?;
        Ok(entries
            .flatten()
            .filter(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                numbered_file_step(&name, &self.case) == Some(step)
                    || rank_dump_file_step(&name, &self.case).is_some_and(|(s, _)| s == step)
            })
            .map(|entry| entry.path())
            .collect())
    }

    /// Writes one dump at (`time`, `step`) holding `fields`, each under its
    /// name, at whatever location it has (cell-centred fields go into the
    /// main XDMF document, face fields into that of their face), then
    /// rewrites the XDMF. A step already dumped is replaced.
    pub fn write(
        &mut self,
        time: f64,
        step: u64,
        fields: &[(&str, &dyn DumpableField)],
    ) -> OutputResult<PathBuf> {
        let mut names: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(OutputError::output(
                &self.directory,
                format!(
                    "two fields of the dump at step {step} are both named `{}`; give each its own name",
                    pair[0]
                ),
            ));
        }
        self.dump(time, step, |group| {
            fields
                .iter()
                .map(|(name, field)| field.dump_into(group, name))
                .collect::<OutputResult<Vec<_>>>()
        })
    }

    /// Writes one XDMF document per location the dumps hold (the main,
    /// cell-centred one always, empty before the first dump, so that the
    /// folder says whose it is) and removes a face document no dump needs
    /// any more (a restart before the dumps that had it).
    fn write_xdmf(&self) -> OutputResult<()> {
        let locations = dumped_locations(&self.dumps);
        for location in LocationKind::ALL {
            let path = self.directory.join(xdmf_file_name(&self.case, location));
            if location == LocationKind::CellCentre || locations.contains(&location) {
                let document = xdmf_document(&self.case, &self.grid, &self.dumps, location);
                write_text_file_atomically(&path, &document)?;
            } else if path.exists() {
                std::fs::remove_file(&path).map_err(|e| OutputError::Output {
                    path: path.clone(),
                    reason: format!("cannot remove the XDMF document no dump needs: {e}"),
                })?;
            }
        }
        Ok(())
    }
}
