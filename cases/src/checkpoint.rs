//! Crash-safe checkpoints and restarts.
//!
//! A checkpoint `checkpoint_<step>.h5` holds the full persistent state of a
//! run: every solution field with its ghosts (written by the simulation's
//! [`Simulation::save_state`](crate::driver::Simulation::save_state)), and
//! root attributes `case`, `time`, `step`, `last_dt`, `grid_cells`,
//! `config` (the TOML text), `watershed_version`, and the run's
//! `dump_schedule` and `checkpoint_every` (which a restart keeps unless it
//! is given others). It is written
//! atomically; after each one only the newest two are kept. A restart reads
//! the header, refuses a file of another case, and the simulation refuses
//! fields whose grid or layout differ from its own, naming both.
//!
//! **Per rank** (`--per-rank-files`): every rank first writes its patches'
//! state into `checkpoint_<step>.rank<r>.h5` (a group `patch_<index>` per
//! patch, fields with their ghosts); once all have, rank 0 writes
//! `checkpoint_<step>.h5` last, with the header, the state that is not on
//! patches, and `patch_ranks`: which rank's file holds each patch. That
//! file is the checkpoint (it is what `--restart` names, and it exists only
//! once every rank file is complete); a restart on any number of ranks with
//! the same patch layout reads each of its patches from the file that holds
//! it ([`RankCheckpoint`]). The newest-two rule removes a checkpoint's rank
//! files with it.

use crate::error::{CaseError, CaseResult};
use std::path::{Path, PathBuf};
use watershed_exprgraph::{ExpressionGraph, GraphLocation, Tag};
use watershed_fields::io::{GhostSelection, read_field, replace_file, write_field};
use watershed_fields::{FieldError, FieldLayout, Location, SpatialField};
use watershed_io::attributes::{
    hdf5_error, read_number_attribute, read_text_attribute, write_number_attribute,
    write_text_attribute,
};
use watershed_io::files::numbered_file_step;
use watershed_io::rank_dumps::{rank_dump_file_name, rank_dump_file_step};

/// What a checkpoint says about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointHeader {
    /// The case that wrote it.
    pub case: String,
    /// Simulated time.
    pub time: f64,
    /// Steps taken.
    pub step: u64,
    /// The last time step.
    pub last_dt: f64,
    /// Cells of the grid (x, y, z).
    pub grid_cells: [u64; 3],
    /// The configuration (TOML) of the run.
    pub config: String,
    /// The run's dump schedule as text (`DumpSchedule::to_text`), so
    /// that a restart that does not give one keeps it; `None` in
    /// checkpoints written before it was stored.
    pub dump_schedule: Option<String>,
    /// The run's `--checkpoint-every`, likewise (0: none).
    pub checkpoint_every: Option<u64>,
    /// Of a checkpoint written per rank: the rank whose file
    /// ([`rank_checkpoint_file_name`]) holds each patch, in patch order.
    /// `None`: the file holds the whole state.
    pub patch_ranks: Option<Vec<u64>>,
}

/// The file rank `rank` writes for the checkpoint at `step` written per
/// rank: `checkpoint_<step>.rank<rank>.h5`.
pub fn rank_checkpoint_file_name(step: u64, rank: usize) -> String {
    rank_dump_file_name("checkpoint", step, rank)
}

/// Writes rank `rank`'s file of the checkpoint at `step` written per rank
/// into `directory`, whole or not at all: root attributes `step`, `rank`
/// and `ranks`, then what `save` writes (a group per owned patch, see
/// `watershed_io::rank_dumps::create_patch_group`). Every rank calls this
/// before rank 0 writes the checkpoint itself with [`write_checkpoint`].
pub fn write_rank_checkpoint(
    directory: &Path,
    step: u64,
    rank: usize,
    ranks: usize,
    save: impl FnOnce(&hdf5::Group) -> CaseResult<()>,
) -> CaseResult<PathBuf> {
    let path = directory.join(rank_checkpoint_file_name(step, rank));
    write_atomically(&path, |file| {
        write_number_attribute(file, "step", step)?;
        write_number_attribute(file, "rank", rank as u64)?;
        write_number_attribute(file, "ranks", ranks as u64)?;
        save(file)
    })?;
    Ok(path)
}

/// Writes the HDF5 file at `path` through `write`, whole or not at all;
/// `write`'s own error is returned as it is.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&hdf5::File) -> CaseResult<()>,
) -> CaseResult<()> {
    let mut inner: Option<CaseError> = None;
    let result = replace_file(path, |file| {
        write(file).map_err(|e| match e {
            CaseError::Field(e) => e,
            other => {
                let reason = other.to_string();
                inner = Some(other);
                FieldError::Hdf5Format {
                    file: path.to_path_buf(),
                    dataset: "/".into(),
                    reason,
                }
            }
        })
    });
    if let Some(e) = inner {
        return Err(e);
    }
    Ok(result?)
}

/// The patches of a checkpoint written per rank, read from whichever
/// rank's file holds each (see the module docs).
#[derive(Debug)]
pub struct RankCheckpoint {
    directory: PathBuf,
    step: u64,
    patch_ranks: Vec<u64>,
}

impl RankCheckpoint {
    /// The per-rank files of the checkpoint at `path` with `header`
    /// (`None` when it holds the whole state).
    pub fn of(path: &Path, header: &CheckpointHeader) -> Option<Self> {
        let directory = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        header.patch_ranks.as_ref().map(|ranks| RankCheckpoint {
            directory,
            step: header.step,
            patch_ranks: ranks.clone(),
        })
    }

    /// The checkpoint file itself (`checkpoint_<step>.h5`).
    pub fn path(&self) -> PathBuf {
        self.directory
            .join(format!("checkpoint_{:08}.h5", self.step))
    }

    /// How many patches the checkpoint holds.
    pub fn patches(&self) -> usize {
        self.patch_ranks.len()
    }

    /// Refuses, naming the checkpoint and both counts, a run whose layout
    /// has another number of patches than the checkpoint holds.
    pub fn check_patch_count(&self, patches: usize) -> CaseResult<()> {
        if self.patches() == patches {
            return Ok(());
        }
        Err(CaseError::Restart {
            path: self.path(),
            reason: format!(
                "it was written per rank on {} patches, this run has {patches}: restart it with its own patch layout (drop the --set patches=... that changes it)",
                self.patches()
            ),
        })
    }

    /// Opens the file holding patch `index` and its group; the file must be
    /// of this checkpoint's step. A restart with another number of patches
    /// is refused here, naming both counts.
    pub fn patch(&self, index: usize) -> CaseResult<(hdf5::File, hdf5::Group)> {
        let Some(&rank) = self.patch_ranks.get(index) else {
            return Err(CaseError::Restart {
                path: self.path(),
                reason: format!(
                    "it holds {} patches, this run has patch {index}: restart it with its own patch layout (the checkpoint's configuration; drop the --set patches=... that changes it)",
                    self.patches()
                ),
            });
        };
        let path = self
            .directory
            .join(rank_checkpoint_file_name(self.step, rank as usize));
        let refuse = |reason: String| CaseError::Restart {
            path: path.clone(),
            reason,
        };
        if !path.is_file() {
            return Err(refuse(format!(
                "missing: rank {rank}'s file of the checkpoint at step {} holds patch {index}; copy every checkpoint_{:08}.rank*.h5 beside the checkpoint",
                self.step, self.step
            )));
        }
        let file = hdf5::File::open(&path)
            .map_err(|e| refuse(format!("not a readable HDF5 file ({e})")))?;
        let step = read_number_attribute::<u64>(&file, "step")?;
        if step != self.step {
            return Err(refuse(format!(
                "it says step {step}, the checkpoint is at step {}; the file was replaced or altered",
                self.step
            )));
        }
        let name = watershed_io::rank_dumps::patch_group_name(index);
        let group = file
            .group(&name)
            .map_err(|e| refuse(format!("no group {name} for patch {index} ({e})")))?;
        Ok((file, group))
    }
}

/// Keeps at most this many checkpoints.
pub const CHECKPOINTS_KEPT: usize = 2;

/// Writes `checkpoint_<step>.h5` into `directory` with `header` and the
/// state `save` writes; then removes all but the newest
/// [`CHECKPOINTS_KEPT`]. Returns the file.
pub fn write_checkpoint(
    directory: &Path,
    header: &CheckpointHeader,
    save: impl FnOnce(&hdf5::Group) -> CaseResult<()>,
) -> CaseResult<PathBuf> {
    let path = directory.join(format!("checkpoint_{:08}.h5", header.step));
    write_atomically(&path, |file| {
        write_text_attribute(file, "case", &header.case)?;
        write_number_attribute(file, "time", header.time)?;
        write_number_attribute(file, "step", header.step)?;
        write_number_attribute(file, "last_dt", header.last_dt)?;
        let cells = header.grid_cells;
        file.new_attr_builder()
            .with_data(&cells)
            .create("grid_cells")
            .map_err(|e| hdf5_error(&path, "grid_cells", e))?;
        write_text_attribute(file, "config", &header.config)?;
        if let Some(schedule) = &header.dump_schedule {
            write_text_attribute(file, "dump_schedule", schedule)?;
        }
        if let Some(every) = header.checkpoint_every {
            write_number_attribute(file, "checkpoint_every", every)?;
        }
        if let Some(ranks) = &header.patch_ranks {
            file.new_attr_builder()
                .with_data(ranks.as_slice())
                .create("patch_ranks")
                .map_err(|e| hdf5_error(&path, "patch_ranks", e))?;
        }
        write_text_attribute(file, "watershed_version", env!("CARGO_PKG_VERSION"))?;
        save(file)
    })?;
    let listing_error = |e: std::io::Error| {
        CaseError::Io(watershed_io::OutputError::output(
            directory.to_path_buf(),
            format!("cannot list the directory: {e}"),
        ))
    };
    let mut existing: Vec<(u64, PathBuf)> = Vec::new();
    let mut rank_files: Vec<(u64, usize, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(directory)
        .map_err(listing_error)?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(step) = numbered_file_step(&name, "checkpoint") {
            existing.push((step, entry.path()));
        } else if let Some((step, rank)) = rank_dump_file_step(&name, "checkpoint") {
            rank_files.push((step, rank, entry.path()));
        }
    }
    existing.sort();
    let excess = existing.len().saturating_sub(CHECKPOINTS_KEPT);
    let kept: Vec<u64> = existing
        .iter()
        .skip(excess)
        .map(|(step, _)| *step)
        .collect();
    let remove = |old: &Path| {
        std::fs::remove_file(old).map_err(|e| {
            CaseError::Io(watershed_io::OutputError::output(
                old.to_path_buf(),
                format!("cannot remove an old checkpoint: {e}"),
            ))
        })
    };
    for (_, old) in existing.iter().take(excess) {
        remove(old)?;
    }
    // Rank files go with their checkpoint; so do those of a checkpoint
    // whose writing was cut short (no checkpoint file of their step), and
    // at this step those the checkpoint does not name (more ranks wrote it
    // before, or it is whole now).
    let writers = header.patch_ranks.as_ref().map_or(0, |ranks| {
        ranks.iter().copied().max().map_or(0, |r| r as usize + 1)
    });
    for (step, rank, old) in &rank_files {
        let stale = if *step == header.step {
            *rank >= writers
        } else {
            !kept.contains(step) && *step < header.step
        };
        if stale {
            remove(old)?;
        }
    }
    Ok(path)
}

/// Opens a checkpoint and reads its header.
pub fn read_checkpoint(path: &Path) -> CaseResult<(hdf5::File, CheckpointHeader)> {
    let refuse = |reason: String| CaseError::Restart {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_file() {
        return Err(refuse("no such file".into()));
    }
    let file =
        hdf5::File::open(path).map_err(|e| refuse(format!("not a readable HDF5 file ({e})")))?;
    let not_checkpoint = |e: watershed_io::OutputError| {
        refuse(format!(
            "not a Watershed checkpoint (written by `watershed run --checkpoint-every N`): {e}"
        ))
    };
    let case = read_text_attribute(&file, "case").map_err(not_checkpoint)?;
    let time = read_number_attribute::<f64>(&file, "time").map_err(not_checkpoint)?;
    let step = read_number_attribute::<u64>(&file, "step").map_err(not_checkpoint)?;
    let last_dt = read_number_attribute::<f64>(&file, "last_dt").map_err(not_checkpoint)?;
    let config = read_text_attribute(&file, "config").map_err(not_checkpoint)?;
    let cells: Vec<u64> = file
        .attr("grid_cells")
        .and_then(|a| a.read_raw())
        .map_err(|e| not_checkpoint(hdf5_error(path, "grid_cells", e).into()))?;
    let grid_cells: [u64; 3] = cells
        .try_into()
        .map_err(|c: Vec<u64>| refuse(format!("grid_cells has {} values, not 3", c.len())))?;
    if !time.is_finite() {
        return Err(refuse(format!("its time {time} is not finite")));
    }
    // Stored since 2026-11-28; older checkpoints have neither.
    let dump_schedule = file
        .attr("dump_schedule")
        .is_ok()
        .then(|| read_text_attribute(&file, "dump_schedule"))
        .transpose()
        .map_err(not_checkpoint)?;
    let checkpoint_every = file
        .attr("checkpoint_every")
        .is_ok()
        .then(|| read_number_attribute::<u64>(&file, "checkpoint_every"))
        .transpose()
        .map_err(not_checkpoint)?;
    let patch_ranks = match file.attr("patch_ranks") {
        Ok(attribute) => Some(
            attribute
                .read_raw::<u64>()
                .map_err(|e| not_checkpoint(hdf5_error(path, "patch_ranks", e).into()))?,
        ),
        Err(_) => None,
    };
    Ok((
        file,
        CheckpointHeader {
            case,
            time,
            step,
            last_dt,
            grid_cells,
            config,
            dump_schedule,
            checkpoint_every,
            patch_ranks,
        },
    ))
}

/// Saves `field` with its ghosts as dataset `name`.
pub fn save_field<L: Location>(
    group: &hdf5::Group,
    name: &str,
    field: &SpatialField<L>,
) -> CaseResult<()> {
    Ok(write_field(group, name, field, GhostSelection::WithGhosts)?)
}

/// Restores `target` from dataset `name` written by [`save_field`]; the
/// stored field must have the same grid, patch and ghosts.
pub fn load_field<L: Location>(
    group: &hdf5::Group,
    name: &str,
    target: &mut SpatialField<L>,
) -> CaseResult<()> {
    let stored: SpatialField<L> = read_field(group, name)?;
    check_saved_layout(group, name, stored.layout(), target.layout())?;
    target.values_mut()?.copy_from_slice(stored.values()?);
    Ok(())
}

/// Refuses dataset `name` of `group`, saved from layout `from`, unless it
/// is this run's layout `to` (grid, patch and ghost layers), naming both.
pub(crate) fn check_saved_layout(
    group: &hdf5::Group,
    name: &str,
    from: &FieldLayout,
    to: &FieldLayout,
) -> CaseResult<()> {
    if from == to && from.patch().grid() == to.patch().grid() {
        return Ok(());
    }
    Err(CaseError::Restart {
        path: PathBuf::from(group.filename()),
        reason: format!(
            "field {name} was saved on a {:?}-cell grid (patch {:?} cells, ghosts {:?}); this run has {:?} cells (patch {:?}, ghosts {:?}); restart with the configuration the checkpoint was written with",
            from.patch().grid().cells(),
            from.patch().cells(),
            from.ghosts(),
            to.patch().grid().cells(),
            to.patch().cells(),
            to.ghosts()
        ),
    })
}

/// Saves the graph's field `tag` with its ghosts as dataset `name`.
pub fn save_graph_field<L: GraphLocation>(
    graph: &ExpressionGraph,
    tag: &Tag,
    group: &hdf5::Group,
    name: &str,
) -> CaseResult<()> {
    graph.with_field::<L, _>(tag, |field| save_field(group, name, field))?
}

/// Restores the graph's field `tag` from dataset `name`.
pub fn load_graph_field<L: GraphLocation>(
    graph: &ExpressionGraph,
    tag: &Tag,
    group: &hdf5::Group,
    name: &str,
) -> CaseResult<()> {
    graph.with_field_mut::<L, _>(tag, |field| load_field(group, name, field))?
}

/// Saves a series of numbers (a history) as a 1-D dataset.
pub fn save_series(group: &hdf5::Group, name: &str, values: &[f64]) -> CaseResult<()> {
    let file = PathBuf::from(group.filename());
    let builder = group.new_dataset_builder();
    // Fletcher-32 checksums, as on the fields (a series such as the
    // initial mass decides a case's check); HDF5 cannot chunk an empty
    // dataset, which has nothing to protect.
    let builder = if values.is_empty() {
        builder
    } else {
        builder.fletcher32()
    };
    builder
        .with_data(values)
        .create(name)
        .map(drop)
        .map_err(|e| hdf5_error(&file, name, e).into())
}

/// Loads a series saved by [`save_series`].
pub fn load_series(group: &hdf5::Group, name: &str) -> CaseResult<Vec<f64>> {
    let file = PathBuf::from(group.filename());
    let dataset = group
        .dataset(name)
        .map_err(|e| hdf5_error(&file, name, e))?;
    dataset
        .read_raw::<f64>()
        .map_err(|e| CaseError::Field(watershed_fields::io::read_error(group, name, e)))
}

/// Saves rows of `N` numbers (a per-step history) as one flat series.
pub fn save_rows<const N: usize>(
    group: &hdf5::Group,
    name: &str,
    rows: &[[f64; N]],
) -> CaseResult<()> {
    save_series(group, name, rows.as_flattened())
}

/// Loads what [`save_rows`] saved; a series whose length is not a whole
/// number of rows is an error naming the file and the dataset.
pub fn load_rows<const N: usize>(group: &hdf5::Group, name: &str) -> CaseResult<Vec<[f64; N]>> {
    let flat = load_series(group, name)?;
    if flat.len() % N != 0 {
        return Err(CaseError::Usage(format!(
            "{}: the dataset '{name}' holds {} numbers, not whole rows of {N}: the checkpoint is damaged; restart from another one",
            group.filename(),
            flat.len()
        )));
    }
    Ok(flat
        .chunks_exact(N)
        .map(|c| std::array::from_fn(|k| c[k]))
        .collect())
}

/// The rows of `rows` from index `from` on, as a series writer takes them.
pub fn rows_from<const N: usize>(rows: &[[f64; N]], from: usize) -> Vec<Vec<f64>> {
    rows.get(from..)
        .unwrap_or_default()
        .iter()
        .map(|r| r.to_vec())
        .collect()
}

#[cfg(test)]
mod series_tests {
    use super::{load_rows, load_series, rows_from, save_rows, save_series};
    use crate::error::CaseError;

    #[test]
    fn rows_come_back_whole_and_a_partial_row_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.h5");
        let rows = [[0.5, 1.0, 2.0], [1.0, 3.0, -4.0]];
        {
            let file = hdf5::File::create(&path).unwrap();
            save_rows(&file, "history", &rows).unwrap();
            save_series(&file, "short", &[1.0, 2.0, 3.0, 4.0]).unwrap();
        }
        let file = hdf5::File::open(&path).unwrap();
        assert_eq!(load_rows::<3>(&file, "history").unwrap(), rows);
        assert_eq!(rows_from(&rows, 1), vec![vec![1.0, 3.0, -4.0]]);
        assert!(rows_from(&rows, 5).is_empty());
        let error = load_rows::<3>(&file, "short").unwrap_err();
        assert!(matches!(error, CaseError::Usage(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("'short' holds 4 numbers, not whole rows of 3"),
            "{message}"
        );
    }

    #[test]
    fn a_damaged_series_such_as_the_initial_mass_is_a_checksum_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.h5");
        let mass = 2718.2818125f64;
        {
            let file = hdf5::File::create(&path).unwrap();
            save_series(&file, "initial_mass", &[mass]).unwrap();
            save_series(&file, "empty", &[]).unwrap();
        }
        {
            let file = hdf5::File::open(&path).unwrap();
            assert_eq!(load_series(&file, "initial_mass").unwrap(), [mass]);
            assert!(load_series(&file, "empty").unwrap().is_empty());
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(8)
            .position(|w| w == mass.to_le_bytes())
            .expect("the value is in the file");
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let file = hdf5::File::open(&path).unwrap();
        let error = load_series(&file, "initial_mass").unwrap_err().to_string();
        assert!(
            error.contains("initial_mass") && error.contains("Fletcher-32 checksum"),
            "{error}"
        );
    }
}
