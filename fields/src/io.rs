//! HDF5 output and input of fields.
//!
//! A field is written as one dataset of shape `(nz, ny, nx)` (x varies
//! fastest, the order ParaView's XDMF reader and h5py expect) holding either
//! its interior points or its points with ghosts, in chunks of whole
//! planes of about 4 MiB with Fletcher-32 checksums, written one chunk at a
//! time (writing holds one chunk's copy of the values). Attributes on the dataset
//! describe it completely, so [`read_field`] can rebuild the field and any
//! HDF5 tool can interpret it:
//!
//! | attribute | meaning |
//! | --- | --- |
//! | `location` | `CellCentre`, `XFace`, `YFace` or `ZFace` |
//! | `field_name` | the field's name |
//! | `scalar_type` | `f64` or `f32` |
//! | `spacing` | (dx, dy, dz) |
//! | `origin` | coordinates (x, y, z) of the first stored point |
//! | `extents` | stored points (nx, ny, nz) |
//! | `ghost_width_minus`, `ghost_width_plus` | ghost layers included per side (0 for interior-only) |
//! | `grid_cells`, `grid_origin`, `periodic` | the whole grid |
//! | `patch_offset`, `patch_cells`, `patch_ghosts_minus`, `patch_ghosts_plus` | the patch |
//!
//! Vectors are in (x, y, z) order. Later issues build the XDMF time series on
//! these datasets.

use crate::Device;
use crate::error::{FieldError, FieldResult};
use crate::field::SpatialField;
use crate::grid::{GhostWidth, Grid, Patch};
use crate::layout::{FieldLayout, IndexBox};
use crate::location::{Location, LocationKind};
use crate::scalar::FieldScalar;
use hdf5::types::VarLenUnicode;
use std::path::{Path, PathBuf};

/// The largest count (cells, offsets) a file may state: 2^40.
const MAX_FILE_COUNT: f64 = 1_099_511_627_776.0;

/// The most ghost layers per side a file may state.
const MAX_FILE_GHOSTS: usize = 64;

/// Which points of a field a write includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GhostSelection {
    /// The interior (valid region) only: what visualisation wants.
    #[default]
    Interior,
    /// Every allocated point, ghosts included: what a restart wants.
    WithGhosts,
}

fn hdf5_error(group: &hdf5::Group, object: &str, source: hdf5::Error) -> FieldError {
    FieldError::Hdf5 {
        file: PathBuf::from(group.filename()),
        object: object.to_string(),
        source,
    }
}

/// The error for reading dataset `name` of `group`, where HDF5 reports a
/// Fletcher-32 checksum that does not match as "filter returned failure":
/// that becomes [`FieldError::Hdf5Format`] saying the data is corrupted.
pub fn read_error(group: &hdf5::Group, name: &str, source: hdf5::Error) -> FieldError {
    let text = source.to_string();
    if text.contains("filter returned failure") || text.to_ascii_lowercase().contains("fletcher") {
        return FieldError::Hdf5Format {
            file: PathBuf::from(group.filename()),
            dataset: name.to_string(),
            reason: format!(
                "its data fails its Fletcher-32 checksum: the bytes in the file were changed or damaged after writing (HDF5: {text}); restore the file from a copy or write it again"
            ),
        };
    }
    hdf5_error(group, name, source)
}

/// Names `path`, the file the caller asked for, in an error that names
/// the `temporary` file it was written through (the caller never sees
/// that name, and it is removed after the error).
fn name_the_callers_file(error: FieldError, temporary: &Path, path: &Path) -> FieldError {
    match error {
        FieldError::Hdf5 {
            file,
            object,
            source,
        } if file == temporary => FieldError::Hdf5 {
            file: path.to_path_buf(),
            object,
            source,
        },
        FieldError::Hdf5Format {
            file,
            dataset,
            reason,
        } if file == temporary => FieldError::Hdf5Format {
            file: path.to_path_buf(),
            dataset,
            reason,
        },
        other => other,
    }
}

/// Refuses empty names, names with NUL, and names already in `group`
/// (nothing already written is overwritten).
fn check_dataset_name(group: &hdf5::Group, name: &str) -> FieldResult<()> {
    let refuse = |reason: String| {
        Err(FieldError::Hdf5Format {
            file: PathBuf::from(group.filename()),
            dataset: name.escape_debug().to_string(),
            reason,
        })
    };
    if name.is_empty() || name.trim_matches('/').is_empty() {
        return refuse("a dataset needs a non-empty name".into());
    }
    if name.contains('\0') {
        return refuse("a dataset name cannot contain a NUL character".into());
    }
    // Each parent group must exist for `link_exists` to answer: walk down.
    let mut prefix = String::new();
    for part in name.split('/').filter(|p| !p.is_empty()) {
        if !prefix.is_empty() || name.starts_with('/') {
            prefix.push('/');
        }
        prefix.push_str(part);
        if !group.link_exists(&prefix) {
            return Ok(());
        }
    }
    refuse(
        "a dataset of that name already exists; write under another name or into a new file".into(),
    )
}

/// About the bytes of one chunk of a dataset the project writes (a field,
/// a derived field): what writing it holds at once beside its source.
pub const CHUNK_BYTES: usize = 4 << 20;

/// The whole planes of `plane_bytes` bytes each that make a chunk of
/// about [`CHUNK_BYTES`], for a dataset of `planes` planes: at least one,
/// at most all.
pub fn chunk_planes(plane_bytes: usize, planes: usize) -> usize {
    (CHUNK_BYTES / plane_bytes.max(1)).clamp(1, planes.max(1))
}

fn to_u64(values: [usize; 3]) -> [u64; 3] {
    values.map(|v| v as u64)
}

/// Writes `field` (its CPU location, which must be valid) as dataset `name`
/// in `group`, with the attributes listed in the module docs. Errors name
/// the file and dataset; an existing dataset of that name is an error, so
/// nothing already written is overwritten.
pub fn write_field<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
    field: &SpatialField<L, T>,
    selection: GhostSelection,
) -> FieldResult<()> {
    check_dataset_name(group, name)?;
    let layout = field.layout();
    let stored = match selection {
        GhostSelection::Interior => layout.interior(),
        GhostSelection::WithGhosts => layout.allocated(),
    };
    let values = field.values()?;
    let extent = stored.extent();
    let err = |e| hdf5_error(group, name, e);
    // Fletcher-32 checksums per chunk: corrupted bytes are an error on read.
    // Chunks of whole planes, about CHUNK_BYTES each, written one at a
    // time: a dump or checkpoint holds one chunk's copy of the values, not
    // a copy of the whole field (HDF5 would take 64 MiB chunks).
    let plane = extent[0] * extent[1];
    let planes = chunk_planes(plane * std::mem::size_of::<T>(), extent[2]);
    let dataset = group
        .new_dataset::<T>()
        .fletcher32()
        .shape((extent[2], extent[1], extent[0]))
        .chunk((planes, extent[1], extent[0]))
        // No chunk cache: each chunk is written whole, once.
        .chunk_cache(0, 0, 1.0)
        .create(name)
        .map_err(err)?;
    let mut slab = Vec::new();
    let mut k = 0;
    while k < extent[2] {
        let count = planes.min(extent[2] - k);
        let data: &[T] = if stored == layout.allocated() {
            &values[k * plane..(k + count) * plane]
        } else {
            slab.clear();
            for z in k..k + count {
                for y in 0..extent[1] {
                    let row = [
                        stored.lo[0],
                        stored.lo[1] + y as isize,
                        stored.lo[2] + z as isize,
                    ];
                    let start = layout.linear_index(row);
                    slab.extend_from_slice(&values[start..start + extent[0]]);
                }
            }
            &slab
        };
        let array = ndarray::ArrayView3::from_shape((count, extent[1], extent[0]), data)
            .map_err(|e| err(hdf5::Error::from(e.to_string())))?;
        dataset
            .write_slice(array, (k..k + count, 0..extent[1], 0..extent[0]))
            .map_err(err)?;
        k += count;
    }

    let patch = layout.patch();
    let grid = patch.grid();
    let ghost_minus = stored.lo.map(|lo| (-lo) as usize);
    let ghost_plus = [0, 1, 2].map(|a| stored.hi[a] as usize - layout.interior_extent()[a]);
    let write_text = |attribute: &str, text: &str| -> FieldResult<()> {
        let value: VarLenUnicode = text.parse().map_err(|e| {
            hdf5_error(
                group,
                &format!("{name}/{attribute}"),
                hdf5::Error::from(format!("{e}")),
            )
        })?;
        dataset
            .new_attr::<VarLenUnicode>()
            .create(attribute)
            .and_then(|a| a.write_scalar(&value))
            .map_err(|e| hdf5_error(group, &format!("{name}/{attribute}"), e))
    };
    write_text("location", L::KIND.name())?;
    write_text("field_name", field.name())?;
    write_text("scalar_type", T::NAME)?;
    let write_f64 = |attribute: &str, v: [f64; 3]| -> FieldResult<()> {
        dataset
            .new_attr_builder()
            .with_data(&v)
            .create(attribute)
            .map(drop)
            .map_err(|e| hdf5_error(group, &format!("{name}/{attribute}"), e))
    };
    let write_u64 = |attribute: &str, v: [u64; 3]| -> FieldResult<()> {
        dataset
            .new_attr_builder()
            .with_data(&v)
            .create(attribute)
            .map(drop)
            .map_err(|e| hdf5_error(group, &format!("{name}/{attribute}"), e))
    };
    write_f64("spacing", grid.spacing())?;
    write_f64("origin", layout.coordinate(stored.lo))?;
    write_u64("extents", to_u64(extent))?;
    write_u64("ghost_width_minus", to_u64(ghost_minus))?;
    write_u64("ghost_width_plus", to_u64(ghost_plus))?;
    write_u64("grid_cells", to_u64(grid.cells()))?;
    write_f64("grid_origin", grid.origin())?;
    write_u64("periodic", grid.periodic().map(u64::from))?;
    write_u64("patch_offset", to_u64(patch.offset()))?;
    write_u64("patch_cells", to_u64(patch.cells()))?;
    write_u64("patch_ghosts_minus", to_u64(patch.ghosts().minus))?;
    write_u64("patch_ghosts_plus", to_u64(patch.ghosts().plus))?;
    Ok(())
}

/// Reads dataset `name` of `group`, written by [`write_field`], back into a
/// new CPU field on the patch it was written from. Ghost points that were
/// not written are zero.
///
/// Errors when the dataset is missing, lacks an attribute, holds another
/// location than `L`, or its shape contradicts its attributes.
pub fn read_field<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
) -> FieldResult<SpatialField<L, T>> {
    let stored = stored_field::<L, T>(group, name)?;
    let data: Vec<T> = stored
        .dataset
        .read_raw()
        .map_err(|e| read_error(group, name, e))?;
    let mut field = SpatialField::<L, T>::new(&stored.field_name, &stored.patch, Device::Cpu)?;
    let layout = stored.layout;
    let values = field.values_mut()?;
    for (index, value) in stored.stored.iter().zip(data) {
        values[layout.linear_index(index)] = value;
    }
    Ok(field)
}

/// Reads the part of dataset `name` of `group` (written by
/// [`write_field`] with its ghosts, e.g. a whole domain's) that `window`
/// covers, ghosts included, into a new CPU field on `window`: a rank
/// restarting its patches reads only them. Errors, naming the dataset,
/// when the window lies on another grid or reaches beyond what is stored,
/// and as [`read_field`].
pub fn read_field_window<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
    window: &Patch,
) -> FieldResult<SpatialField<L, T>> {
    let stored = stored_field::<L, T>(group, name)?;
    let format_error = |reason: String| FieldError::Hdf5Format {
        file: PathBuf::from(group.filename()),
        dataset: name.to_string(),
        reason,
    };
    if window.grid() != stored.patch.grid() {
        return Err(format_error(format!(
            "it was written on a grid of {:?} cells (spacing {:?}), not the {:?} cells (spacing {:?}) of the patch to read",
            stored.patch.grid().cells(),
            stored.patch.grid().spacing(),
            window.grid().cells(),
            window.grid().spacing()
        )));
    }
    let target = FieldLayout::new(window, L::KIND);
    // The window's points in the stored patch's indices.
    let shift = [0, 1, 2].map(|a| window.offset()[a] as isize - stored.patch.offset()[a] as isize);
    let allocated = target.allocated();
    let wanted = IndexBox::new(
        [0, 1, 2].map(|a| allocated.lo[a] + shift[a]),
        [0, 1, 2].map(|a| allocated.hi[a] + shift[a]),
    );
    if stored.stored.intersect(&wanted) != wanted {
        return Err(format_error(format!(
            "it holds points {:?}..{:?} of its patch; the patch to read needs {:?}..{:?} (its ghosts included)",
            stored.stored.lo, stored.stored.hi, wanted.lo, wanted.hi
        )));
    }
    let lo = [0, 1, 2].map(|a| (wanted.lo[a] - stored.stored.lo[a]) as usize);
    let hi = [0, 1, 2].map(|a| (wanted.hi[a] - stored.stored.lo[a]) as usize);
    let data: ndarray::Array3<T> = stored
        .dataset
        .read_slice(ndarray::s![lo[2]..hi[2], lo[1]..hi[1], lo[0]..hi[0]])
        .map_err(|e| read_error(group, name, e))?;
    let mut field = SpatialField::<L, T>::new(&stored.field_name, window, Device::Cpu)?;
    let values = field.values_mut()?;
    for (index, value) in allocated.iter().zip(data.iter()) {
        values[target.linear_index(index)] = *value;
    }
    Ok(field)
}

/// The layout dataset `name` of `group` was written from (its patch with
/// ghosts and location), from its attributes alone: nothing of its
/// values is read. Errors as [`read_field`] for a dataset that is missing,
/// of another location or type, or whose attributes do not hold.
pub fn stored_layout<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
) -> FieldResult<FieldLayout> {
    Ok(stored_field::<L, T>(group, name)?.layout)
}

/// A field dataset's attributes, checked: the dataset, the field's name,
/// the patch and layout it was written from, and the box it stores.
struct StoredField {
    dataset: hdf5::Dataset,
    field_name: String,
    patch: Patch,
    layout: FieldLayout,
    stored: IndexBox,
}

/// Opens dataset `name` of `group` and checks its attributes against
/// `L` and `T` and its shape.
fn stored_field<L: Location, T: FieldScalar>(
    group: &hdf5::Group,
    name: &str,
) -> FieldResult<StoredField> {
    let dataset = group
        .dataset(name)
        .map_err(|e| hdf5_error(group, name, e))?;
    let format_error = |reason: String| FieldError::Hdf5Format {
        file: PathBuf::from(group.filename()),
        dataset: name.to_string(),
        reason,
    };
    let read_text = |attribute: &str| -> FieldResult<String> {
        let value: VarLenUnicode = dataset
            .attr(attribute)
            .and_then(|a| a.read_scalar())
            .map_err(|e| {
                format_error(format!(
                    "attribute '{attribute}' is missing or not text ({e})"
                ))
            })?;
        Ok(value.as_str().to_string())
    };
    let read_array = |attribute: &str| -> FieldResult<Vec<f64>> {
        let values: Vec<f64> = dataset
            .attr(attribute)
            .and_then(|a| a.read_raw())
            .map_err(|e| {
                format_error(format!(
                    "attribute '{attribute}' is missing or not numeric ({e})"
                ))
            })?;
        if values.len() != 3 {
            return Err(format_error(format!(
                "attribute '{attribute}' has {} values, expected 3 (x, y, z)",
                values.len()
            )));
        }
        Ok(values)
    };
    let read_counts = |attribute: &str| -> FieldResult<[usize; 3]> {
        let v = read_array(attribute)?;
        let mut counts = [0usize; 3];
        for (count, &value) in counts.iter_mut().zip(&v) {
            if !(value.is_finite()
                && value >= 0.0
                && value.fract() == 0.0
                && value <= MAX_FILE_COUNT)
            {
                return Err(format_error(format!(
                    "attribute '{attribute}' holds {value}, which is not a count (a whole number from 0 to {MAX_FILE_COUNT})"
                )));
            }
            *count = value as usize;
        }
        Ok(counts)
    };
    let read_reals = |attribute: &str| -> FieldResult<[f64; 3]> {
        let v = read_array(attribute)?;
        Ok([v[0], v[1], v[2]])
    };

    let location = read_text("location")?;
    match LocationKind::from_name(&location) {
        Some(kind) if kind == L::KIND => {}
        Some(kind) => {
            return Err(format_error(format!(
                "it holds a {kind} field, but a {} field was requested",
                L::KIND
            )));
        }
        None => return Err(format_error(format!("unknown location '{location}'"))),
    }
    let scalar_type = read_text("scalar_type")?;
    if scalar_type != T::NAME {
        return Err(format_error(format!(
            "it holds {scalar_type} values, but {} values were requested; read it as {scalar_type}",
            T::NAME
        )));
    }
    let stored_size = dataset
        .dtype()
        .map(|t| t.size())
        .map_err(|e| hdf5_error(group, name, e))?;
    if stored_size != std::mem::size_of::<T>() {
        return Err(format_error(format!(
            "its values are {stored_size}-byte numbers, but its scalar_type attribute says {scalar_type}"
        )));
    }
    let field_name = read_text("field_name")?;
    let cells = read_counts("grid_cells")?;
    let spacing = read_reals("spacing")?;
    let periodic = read_counts("periodic")?.map(|p| p != 0);
    let grid = Grid::from_spacing(cells, spacing, read_reals("grid_origin")?)
        .map_err(|e| format_error(e.to_string()))?
        .with_periodic(periodic);
    let ghosts = GhostWidth {
        minus: read_counts("patch_ghosts_minus")?,
        plus: read_counts("patch_ghosts_plus")?,
    };
    if ghosts.max() > MAX_FILE_GHOSTS {
        return Err(format_error(format!(
            "its patch has {:?}/{:?} ghost layers; more than {MAX_FILE_GHOSTS} per side is not a field Watershed writes",
            ghosts.minus, ghosts.plus
        )));
    }
    let patch = Patch::new(
        &grid,
        read_counts("patch_offset")?,
        read_counts("patch_cells")?,
        ghosts,
    )
    .map_err(|e| format_error(e.to_string()))?;
    let layout = FieldLayout::new(&patch, L::KIND);
    let stored_minus = read_counts("ghost_width_minus")?;
    let stored_plus = read_counts("ghost_width_plus")?;
    let interior = layout.interior_extent();
    if stored_minus
        .iter()
        .chain(&stored_plus)
        .any(|&g| g > MAX_FILE_GHOSTS)
    {
        return Err(format_error(format!(
            "the stored ghost widths {stored_minus:?}/{stored_plus:?} exceed {MAX_FILE_GHOSTS}"
        )));
    }
    let stored = IndexBox::new(
        stored_minus.map(|g| -(g as isize)),
        [0, 1, 2].map(|a| (interior[a] + stored_plus[a]) as isize),
    );
    if stored.intersect(&layout.allocated()) != stored {
        return Err(format_error(format!(
            "the stored ghost widths {stored_minus:?}/{stored_plus:?} exceed the patch's {:?}/{:?}",
            ghosts.minus, ghosts.plus
        )));
    }
    let extent = stored.extent();
    let expected_shape = vec![extent[2], extent[1], extent[0]];
    if dataset.shape() != expected_shape {
        return Err(format_error(format!(
            "its shape {:?} does not match the (nz, ny, nx) = {expected_shape:?} its attributes describe",
            dataset.shape()
        )));
    }
    Ok(StoredField {
        dataset,
        field_name,
        patch,
        layout,
        stored,
    })
}

/// Writes `field` as dataset `name` into the HDF5 file at `path`, creating
/// the file if needed and keeping what it already holds. The file is
/// replaced atomically (see [`replace_file`]): a crash or a kill leaves the
/// old complete file or the new complete one, and every error HDF5 reports
/// while flushing and closing is returned.
pub fn write_field_to_file<L: Location, T: FieldScalar>(
    path: impl AsRef<Path>,
    name: &str,
    field: &SpatialField<L, T>,
    selection: GhostSelection,
) -> FieldResult<()> {
    update_file(path, |file| write_field(file, name, field, selection))
}

/// Writes a new HDF5 file at `path` with `write`, replacing any file there
/// atomically: the content goes to a temporary file in the same directory,
/// which is flushed, closed (errors returned), synced to disk and renamed
/// over `path`, and the directory is synced. Killing the process at any
/// moment leaves either the old complete file or the new complete one; on
/// an error the old file is untouched and the temporary file removed.
pub fn replace_file(
    path: impl AsRef<Path>,
    write: impl FnOnce(&hdf5::File) -> FieldResult<()>,
) -> FieldResult<()> {
    atomic_write(path.as_ref(), false, write)
}

/// Like [`replace_file`], but `write` starts from a copy of the file's
/// current content (when it exists), so it adds to it.
pub fn update_file(
    path: impl AsRef<Path>,
    write: impl FnOnce(&hdf5::File) -> FieldResult<()>,
) -> FieldResult<()> {
    atomic_write(path.as_ref(), true, write)
}

fn io_error(path: &Path, action: &str, e: std::io::Error) -> FieldError {
    FieldError::Hdf5Format {
        file: path.to_path_buf(),
        dataset: "/".into(),
        reason: format!("{action}: {e}"),
    }
}

fn atomic_write(
    path: &Path,
    keep_existing: bool,
    write: impl FnOnce(&hdf5::File) -> FieldResult<()>,
) -> FieldResult<()> {
    let directory = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().ok_or_else(|| {
        io_error(
            path,
            "the path names no file",
            std::io::ErrorKind::InvalidInput.into(),
        )
    })?;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temporary = directory.join(format!(
        ".{}.{}-{}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        let existing = keep_existing && path.exists();
        if existing {
            // Never replace something that is not an HDF5 file by one.
            drop(hdf5::File::open(path).map_err(|source| FieldError::Hdf5 {
                file: path.to_path_buf(),
                object:
                    "/ (the existing file is not a readable HDF5 file; it is left as it is)".into(),
                source,
            })?);
            std::fs::copy(path, &temporary)
                .map_err(|e| io_error(path, "copying the existing file", e))?;
        }
        let hdf5_err = |object: &str| {
            let temporary = temporary.clone();
            let object = object.to_string();
            move |source| FieldError::Hdf5 {
                file: temporary,
                object,
                source,
            }
        };
        // The temporary file is this call's alone (its name holds the
        // process id and a counter) and readers only ever see it complete,
        // under `path`, after the rename: HDF5's file lock protects
        // nothing here. Left on, an exclusive lock could outlive the
        // write: a child process started by another thread meanwhile
        // inherits the open file (HDF5 does not open it close-on-exec),
        // keeps the lock until it exits, and the lock then sits on the
        // renamed file, so opening `path` fails with "unable to lock file".
        let mut options = hdf5::File::with_options();
        options.with_fapl(|fapl| fapl.file_locking(false));
        let file = if existing {
            options.append(&temporary).map_err(hdf5_err("/"))?
        } else {
            options.create(&temporary).map_err(hdf5_err("/"))?
        };
        write(&file)?;
        file.flush().map_err(hdf5_err("flushing the file"))?;
        file.close().map_err(hdf5_err("closing the file"))?;
        std::fs::File::open(&temporary)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_error(&temporary, "syncing the file to disk", e))?;
        std::fs::rename(&temporary, path).map_err(|e| io_error(path, "renaming into place", e))?;
        std::fs::File::open(&directory)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(&directory, "syncing the directory", e))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(|e| name_the_callers_file(e, &temporary, path))
}

/// Reads dataset `name` from the HDF5 file at `path` (see [`read_field`]).
pub fn read_field_from_file<L: Location, T: FieldScalar>(
    path: impl AsRef<Path>,
    name: &str,
) -> FieldResult<SpatialField<L, T>> {
    let path = path.as_ref();
    let file = hdf5::File::open(path).map_err(|source| FieldError::Hdf5 {
        file: path.to_path_buf(),
        object: "/".into(),
        source,
    })?;
    read_field(&file, name)
}
