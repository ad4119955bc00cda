//! One dump file: written whole or not at all with its root attributes
//! (`case`, `time`, `step` and more), and its field datasets described
//! back ([`DumpedField`]). [`crate::dumps`] (one file per dump) and
//! [`crate::rank_dumps`] (one per rank per dump) both write and read their
//! files through it.

use crate::attributes::{hdf5_error, write_number_attribute, write_text_attribute};
use crate::error::{OutputError, OutputResult};
use crate::record::DumpedField;
use hdf5::types::VarLenUnicode;
use std::path::Path;
use watershed_fields::io::replace_file;
use watershed_fields::{FieldError, LocationKind};

/// What the datasets of `group` (at `prefix` in the file at `path`) are:
/// every member must be a field dataset this crate wrote, `(nz, ny, nx)`
/// or `(nz, ny, nx, 3)` with a known `location`.
pub fn read_fields(
    path: &Path,
    group: &hdf5::Group,
    prefix: &str,
) -> OutputResult<Vec<DumpedField>> {
    let mut fields = Vec::new();
    let mut names = group
        .member_names()
        .map_err(|e| hdf5_error(path, if prefix.is_empty() { "/" } else { prefix }, e))?;
    names.sort();
    for member in names {
        let name = if prefix.is_empty() {
            member.clone()
        } else {
            format!("{prefix}/{member}")
        };
        let dataset = group
            .dataset(&member)
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
            name: member,
            location,
            extent: [shape[2], shape[1], shape[0]],
            components,
            derived,
        });
    }
    Ok(fields)
}

/// Writes the dump file at `path` whole or not at all: the root attributes
/// `case`, `time` and `step`, then `attributes` (more of them), then
/// `write`'s fields. `write`'s own error is returned as it is, once the
/// half-written temporary file is gone.
pub fn write_dump_file<E: From<OutputError>>(
    path: &Path,
    case: &str,
    time: f64,
    step: u64,
    attributes: impl FnOnce(&hdf5::Group) -> OutputResult<()>,
    write: impl FnOnce(&hdf5::Group) -> Result<Vec<DumpedField>, E>,
) -> Result<Vec<DumpedField>, E> {
    let mut fields = Vec::new();
    let mut inner: Option<E> = None;
    let result = replace_file(path, |file| {
        let written = || -> OutputResult<()> {
            write_text_attribute(file, "case", case)?;
            write_number_attribute(file, "time", time)?;
            write_number_attribute(file, "step", step)?;
            attributes(file)
        };
        match written() {
            Err(OutputError::Field(e)) => return Err(e),
            Err(other) => {
                return Err(FieldError::Hdf5Format {
                    file: path.to_path_buf(),
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
                    file: path.to_path_buf(),
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
    Ok(fields)
}
