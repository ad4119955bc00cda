//! HDF5 output and input of fields.
//!
//! A field is written as one dataset of shape `(nz, ny, nx)` (x varies
//! fastest, the order ParaView's XDMF reader and h5py expect) holding either
//! its interior points or its points with ghosts. Attributes on the dataset
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
    let layout = field.layout();
    let stored = match selection {
        GhostSelection::Interior => layout.interior(),
        GhostSelection::WithGhosts => layout.allocated(),
    };
    let values = field.values()?;
    let data: Vec<T> = if stored == layout.allocated() {
        values.to_vec()
    } else {
        stored
            .iter()
            .map(|index| values[layout.linear_index(index)])
            .collect()
    };
    let extent = stored.extent();
    let err = |e| hdf5_error(group, name, e);
    let dataset = group
        .new_dataset_builder()
        .with_data(
            ndarray::ArrayView3::from_shape((extent[2], extent[1], extent[0]), &data)
                .expect("data holds the stored box"),
        )
        .create(name)
        .map_err(err)?;

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
        Ok([v[0] as usize, v[1] as usize, v[2] as usize])
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
    let data: Vec<T> = dataset.read_raw().map_err(|e| hdf5_error(group, name, e))?;
    let mut field = SpatialField::<L, T>::new(&field_name, &patch, Device::Cpu)?;
    let values = field.values_mut()?;
    for (index, value) in stored.iter().zip(data) {
        values[layout.linear_index(index)] = value;
    }
    Ok(field)
}

/// Writes `field` as dataset `name` into the HDF5 file at `path`, creating
/// the file if needed and keeping what it already holds.
pub fn write_field_to_file<L: Location, T: FieldScalar>(
    path: impl AsRef<Path>,
    name: &str,
    field: &SpatialField<L, T>,
    selection: GhostSelection,
) -> FieldResult<()> {
    let path = path.as_ref();
    let file = hdf5::File::append(path).map_err(|source| FieldError::Hdf5 {
        file: path.to_path_buf(),
        object: "/".into(),
        source,
    })?;
    write_field(&file, name, field, selection)
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
