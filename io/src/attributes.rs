//! Attributes of HDF5 files and groups (text and numbers), read back
//! without conversion, and the error naming the file and object at fault.

use crate::error::{OutputError, OutputResult};
use hdf5::types::VarLenUnicode;
use std::path::{Path, PathBuf};
use watershed_fields::FieldError;

/// The error of an HDF5 call on `object` of `file`.
pub fn hdf5_error(file: &Path, object: &str, source: hdf5::Error) -> FieldError {
    FieldError::Hdf5 {
        file: file.to_path_buf(),
        object: object.into(),
        source,
    }
}

/// Writes a text attribute on `group`.
pub fn write_text_attribute(group: &hdf5::Group, name: &str, text: &str) -> OutputResult<()> {
    let file = PathBuf::from(group.filename());
    let value: VarLenUnicode = text
        .parse()
        .map_err(|e| hdf5_error(&file, name, hdf5::Error::from(format!("{e}"))))?;
    group
        .new_attr::<VarLenUnicode>()
        .create(name)
        .and_then(|a| a.write_scalar(&value))
        .map_err(|e| hdf5_error(&file, name, e).into())
}

/// Writes a number attribute on `group`.
pub fn write_number_attribute<T: hdf5::H5Type>(
    group: &hdf5::Group,
    name: &str,
    value: T,
) -> OutputResult<()> {
    let file = PathBuf::from(group.filename());
    group
        .new_attr::<T>()
        .create(name)
        .and_then(|a| a.write_scalar(&value))
        .map_err(|e| hdf5_error(&file, name, e).into())
}

/// Reads a text attribute of `group`.
pub fn read_text_attribute(group: &hdf5::Group, name: &str) -> OutputResult<String> {
    let file = PathBuf::from(group.filename());
    let value: VarLenUnicode = group
        .attr(name)
        .and_then(|a| a.read_scalar())
        .map_err(|e| hdf5_error(&file, name, e))?;
    Ok(value.as_str().to_string())
}

/// Reads a number attribute of `group`.
pub fn read_number_attribute<T: hdf5::H5Type>(group: &hdf5::Group, name: &str) -> OutputResult<T> {
    let file = PathBuf::from(group.filename());
    let attribute = group.attr(name).map_err(|e| hdf5_error(&file, name, e))?;
    // No conversion on reading: HDF5 would clip a stored -1 to an
    // unsigned 0 (a checkpoint's step) or round a float to an integer.
    let stored = attribute
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| hdf5_error(&file, name, e))?;
    let wanted = T::type_descriptor();
    if stored != wanted {
        return Err(OutputError::Output {
            path: file,
            reason: format!(
                "attribute `{name}` is stored as {stored:?}, not {wanted:?} as Watershed writes it; the file was not written by this program or was altered"
            ),
        });
    }
    attribute
        .read_scalar()
        .map_err(|e| hdf5_error(&file, name, e).into())
}

/// Writes a three-number attribute (x, y, z) on `group`.
pub fn write_triple_attribute(
    group: &hdf5::Group,
    name: &str,
    value: [u64; 3],
) -> OutputResult<()> {
    let file = PathBuf::from(group.filename());
    group
        .new_attr_builder()
        .with_data(&value)
        .create(name)
        .map(drop)
        .map_err(|e| hdf5_error(&file, name, e).into())
}

/// Reads a three-number attribute written by [`write_triple_attribute`].
pub fn read_triple_attribute(group: &hdf5::Group, name: &str) -> OutputResult<[u64; 3]> {
    let file = PathBuf::from(group.filename());
    let values: Vec<u64> = group
        .attr(name)
        .and_then(|a| a.read_raw())
        .map_err(|e| hdf5_error(&file, name, e))?;
    <[u64; 3]>::try_from(values.as_slice()).map_err(|_| OutputError::Output {
        path: file,
        reason: format!(
            "attribute `{name}` holds {} numbers, not 3 (x, y, z); the file was not written by this program or was altered",
            values.len()
        ),
    })
}
