//! `watershed inspect`: what an HDF5 file holds (dumps, checkpoints, any
//! file written by `watershed_fields::io`): root attributes (case, time,
//! step), every dataset with its shape, type and attributes.

use crate::error::{CaseError, CaseResult};
use hdf5::types::VarLenUnicode;
use std::fmt::Write;
use std::path::Path;

/// An attribute's value as text, whatever its type.
fn attribute_text(attribute: &hdf5::Attribute) -> String {
    if let Ok(text) = attribute.read_scalar::<VarLenUnicode>() {
        return text.as_str().to_string();
    }
    let scalar = attribute.ndim() == 0;
    let float = attribute
        .dtype()
        .map(|t| t.is::<f64>() || t.is::<f32>())
        .unwrap_or(false);
    if float {
        if scalar && let Ok(v) = attribute.read_scalar::<f64>() {
            return format!("{v}");
        }
        if let Ok(v) = attribute.read_raw::<f64>() {
            return format!("{v:?}");
        }
    }
    if scalar && let Ok(v) = attribute.read_scalar::<i64>() {
        return format!("{v}");
    }
    if let Ok(v) = attribute.read_raw::<i64>() {
        return format!("{v:?}");
    }
    "(unreadable type)".into()
}

fn attributes(location: &hdf5::Location, indent: &str, text: &mut String) {
    for name in location.attr_names().unwrap_or_default() {
        let value = location
            .attr(&name)
            .map(|a| attribute_text(&a))
            .unwrap_or_else(|e| format!("(error: {e})"));
        let value = if value.chars().count() > 200 {
            let head: String = value.chars().take(200).collect();
            format!(
                "{}... ({} characters)",
                head.replace('\n', "\\n"),
                value.chars().count()
            )
        } else {
            value.replace('\n', "\\n")
        };
        let _ = writeln!(text, "{indent}@{name} = {value}");
    }
}

fn group(g: &hdf5::Group, path: &str, text: &mut String) -> CaseResult<()> {
    let file = std::path::PathBuf::from(g.filename());
    let mut names = g
        .member_names()
        .map_err(|e| watershed_io::attributes::hdf5_error(&file, path, e))?;
    names.sort();
    for name in names {
        let full = format!("{path}{name}");
        if let Ok(dataset) = g.dataset(&name) {
            let dtype = dataset
                .dtype()
                .ok()
                .map(|t| format!("{} bytes", t.size()))
                .unwrap_or_default();
            let shape = dataset.shape();
            let axes = match shape.len() {
                3 => " (z, y, x)",
                4 => " (z, y, x, component)",
                _ => "",
            };
            let _ = writeln!(
                text,
                "dataset {full}: shape {shape:?}{axes}, {dtype} per value"
            );
            attributes(&dataset, "    ", text);
        } else if let Ok(inner) = g.group(&name) {
            let _ = writeln!(text, "group {full}/");
            attributes(&inner, "    ", text);
            group(&inner, &format!("{full}/"), text)?;
        } else {
            // A soft link to nothing, an external link to a missing file,
            // a named datatype: listed, never hidden.
            let _ = writeln!(
                text,
                "other {full}: neither a dataset nor a group that opens (a dangling or external link, or a named type)"
            );
        }
    }
    Ok(())
}

/// Describes the HDF5 file at `path`.
pub fn describe_file(path: &Path) -> CaseResult<String> {
    if path.is_dir() {
        return Err(CaseError::Io(watershed_io::OutputError::output(
            path.to_path_buf(),
            "is a directory; inspect describes one HDF5 file, for example a dump (CASE_00000000.h5) or a checkpoint in it",
        )));
    }
    if !path.is_file() {
        return Err(CaseError::Io(watershed_io::OutputError::output(
            path.to_path_buf(),
            "no such file",
        )));
    }
    let file = hdf5::File::open(path).map_err(|e| {
        CaseError::Io(watershed_io::OutputError::output(
            path.to_path_buf(),
            format!("not a readable HDF5 file ({e})"),
        ))
    })?;
    let mut text = String::new();
    let _ = writeln!(text, "file {}", path.display());
    attributes(&file, "    ", &mut text);
    group(&file, "/", &mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_named_by_rank_links_are_listed_and_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.h5");
        {
            let file = hdf5::File::create(&path).unwrap();
            let line = ndarray::Array1::<f64>::zeros(5);
            file.new_dataset_builder()
                .with_data(&line)
                .create("line")
                .unwrap();
            let vectors = ndarray::Array4::<f64>::zeros((1, 2, 3, 3));
            file.new_dataset_builder()
                .with_data(&vectors)
                .create("velocity")
                .unwrap();
            file.link_soft("/missing", "dangling").unwrap();
        }
        let text = describe_file(&path).unwrap();
        assert!(text.contains("dataset /line: shape [5], 8 bytes"), "{text}");
        assert!(
            text.contains("dataset /velocity: shape [1, 2, 3, 3] (z, y, x, component)"),
            "{text}"
        );
        assert!(
            text.contains("other /dangling: neither a dataset"),
            "{text}"
        );
        let error = describe_file(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is a directory"), "{error}");
    }
}
