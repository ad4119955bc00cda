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

use crate::attributes::{
    hdf5_error, read_number_attribute, write_number_attribute, write_text_attribute,
};
use crate::error::{OutputError, OutputResult};
use crate::files::{is_writers_temporary, numbered_file_step, write_text_file_atomically};
use crate::lock::OutputLock;
use crate::xdmf::{dumped_locations, xdmf_document, xdmf_file_name};
use hdf5::types::VarLenUnicode;
use std::path::{Path, PathBuf};
use watershed_exprgraph::{ExpressionGraph, GraphLocation, Tag};
use watershed_fields::io::{GhostSelection, replace_file, write_field};
use watershed_fields::{FieldError, FieldScalar, Grid, Location, LocationKind, SpatialField};

pub use crate::record::{DumpRecord, DumpedField};

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
        let mut checkpoints: Vec<PathBuf> = Vec::new();
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
            } else if numbered_file_step(&name, "checkpoint").is_some() {
                checkpoints.push(entry.path());
            }
        }
        existing.sort();
        let xdmf = directory.join(format!("{case}.xmf"));
        if restart_step.is_none() && !overwrite && (xdmf.exists() || !existing.is_empty()) {
            return Err(error(format!(
                "already holds the results of a `{case}` run ({} dump(s)); choose another --output, continue it with --restart, or pass --overwrite to replace them",
                existing.len()
            )));
        }
        // An overwrite replaces the whole earlier run: its checkpoints
        // too, or the newest-two rule would delete the new run's instead.
        let mut replaced = (0, 0);
        if overwrite && restart_step.is_none() {
            replaced = (existing.len(), checkpoints.len());
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
        let manager = DumpSeries {
            directory: directory.to_path_buf(),
            case: case.into(),
            grid: grid.clone(),
            dumps,
            replaced,
            swept,
            _lock: lock,
        };
        manager.write_xdmf()?;
        Ok(manager)
    }

    fn read_record(path: &Path) -> OutputResult<DumpRecord> {
        let file = hdf5::File::open(path).map_err(|e| hdf5_error(path, "/", e))?;
        let time = read_number_attribute::<f64>(&file, "time")?;
        let step = read_number_attribute::<u64>(&file, "step")?;
        let mut fields = Vec::new();
        for name in file.member_names().map_err(|e| hdf5_error(path, "/", e))? {
            let dataset = file
                .dataset(&name)
                .map_err(|e| hdf5_error(path, &name, e))?;
            let location: VarLenUnicode = dataset
                .attr("location")
                .and_then(|a| a.read_scalar())
                .map_err(|e| hdf5_error(path, &format!("{name}/location"), e))?;
            let location = LocationKind::ALL
                .into_iter()
                .find(|l| l.name() == location.as_str())
                .ok_or_else(|| OutputError::Output {
                    path: path.to_path_buf(),
                    reason: format!("dataset {name} has an unknown location {location}"),
                })?;
            let shape = dataset.shape();
            let components = match shape.len() {
                3 => 1,
                4 if shape[3] == 3 => 3,
                _ => {
                    return Err(OutputError::Output {
                        path: path.to_path_buf(),
                        reason: format!(
                            "dataset {name} has shape {shape:?}, neither (nz, ny, nx) nor (nz, ny, nx, 3)"
                        ),
                    });
                }
            };
            let derived = match dataset.attr("derived") {
                Ok(attribute) => Some(
                    attribute
                        .read_scalar::<VarLenUnicode>()
                        .map_err(|e| hdf5_error(path, &format!("{name}/derived"), e))?
                        .as_str()
                        .to_string(),
                ),
                Err(_) => None,
            };
            fields.push(DumpedField {
                name,
                location,
                extent: [shape[2], shape[1], shape[0]],
                components,
                derived,
            });
        }
        Ok(DumpRecord {
            file: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            time,
            step,
            fields,
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
        let mut fields = Vec::new();
        // The writer's own error, returned as it is once replace_file has
        // removed the half-written temporary file.
        let mut inner: Option<E> = None;
        let result = replace_file(&path, |file| {
            let attributes = || -> OutputResult<()> {
                write_text_attribute(file, "case", &self.case)?;
                write_number_attribute(file, "time", time)?;
                write_number_attribute(file, "step", step)
            };
            match attributes() {
                Err(OutputError::Field(e)) => return Err(e),
                Err(other) => {
                    return Err(FieldError::Hdf5Format {
                        file: path.clone(),
                        dataset: "/".into(),
                        reason: other.to_string(),
                    });
                }
                Ok(()) => {}
            }
            match write(file) {
                Ok(written) => {
                    fields = written;
                    Ok(())
                }
                Err(error) => {
                    inner = Some(error);
                    Err(FieldError::Hdf5Format {
                        file: path.clone(),
                        dataset: "/".into(),
                        reason: "the dump's writer failed".into(),
                    })
                }
            }
        });
        if let Some(e) = inner {
            return Err(e);
        }
        result.map_err(|e| E::from(OutputError::from(e)))?;
        self.dumps.retain(|d| d.step != step);
        self.dumps.push(DumpRecord {
            file: name,
            time,
            step,
            fields,
        });
        // A restart's dumps land among kept later ones: the series stays
        // in step (and time) order.
        self.dumps.sort_by_key(|d| d.step);
        self.write_xdmf()?;
        Ok(path)
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
