//! Case configurations: TOML files and `--set key=value` overrides on top of
//! a case's defaults, checked strictly.
//!
//! Every case's configuration is a serde struct with
//! `deny_unknown_fields` and defaults for every key. Loading goes in layers:
//! the defaults (or a checkpoint's stored configuration), then a file, then
//! each `--set` in order. Each layer is checked as it is applied, so an error
//! names where the bad text came from: the file and line, or the `--set`.
//! Finally [`CaseConfig::check_ranges`] checks every value's range and the
//! error names the key, the value, the allowed range and the key's origin.

use crate::error::{CaseError, CaseResult, ConfigOrigin};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::Path;

/// A value outside its allowed range: `(key, value, allowed)`.
pub type RangeProblem = (String, String, String);

/// A case's configuration.
pub trait CaseConfig: Serialize + DeserializeOwned + Default + Clone + std::fmt::Debug {
    /// The documented default file (`cases/configs/CASE.toml`).
    const DOCUMENTED: &'static str;

    /// The first value outside its allowed range.
    fn check_ranges(&self) -> Option<RangeProblem>;
}

/// Checks `low <= value <= high` for key `key`.
pub fn in_range<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    low: T,
    high: T,
) -> Option<RangeProblem> {
    if value >= low && value <= high {
        None
    } else {
        Some((
            key.to_string(),
            value.to_string(),
            format!("{low} ..= {high}"),
        ))
    }
}

/// `text` as a message quotes it: whole when short, else its first 80
/// characters and how long it is (a 10 MB value is not echoed back).
pub fn abbreviated(text: &str) -> String {
    const SHOWN: usize = 80;
    let length = text.chars().count();
    if length <= 2 * SHOWN {
        return text.to_string();
    }
    let head: String = text.chars().take(SHOWN).collect();
    format!("{head}... ({length} characters)")
}

/// [`abbreviated`] line by line (a parser's message quotes the line at
/// fault, which may be a whole 10 MB value).
pub fn abbreviated_lines(text: &str) -> String {
    text.lines().map(abbreviated).collect::<Vec<_>>().join("\n")
}

/// Checks that `value` is one of `allowed`.
pub fn one_of(key: &str, value: &str, allowed: &[&str]) -> Option<RangeProblem> {
    if allowed.contains(&value) {
        None
    } else {
        Some((
            key.to_string(),
            format!("\"{}\"", abbreviated(value)),
            format!("one of {allowed:?}"),
        ))
    }
}

/// The loaded configuration and where each key's value came from.
#[derive(Debug, Clone)]
pub struct Loaded<C> {
    /// The configuration.
    pub config: C,
    /// Origin of every key set by a file or `--set` (dotted key paths).
    pub origins: BTreeMap<String, ConfigOrigin>,
    /// True when nothing overrode the defaults.
    pub defaults_only: bool,
}

fn table_of<C: Serialize>(case: &str, config: &C) -> CaseResult<toml::Table> {
    toml::Table::try_from(config).map_err(|e| CaseError::ConfigSyntax {
        case: case.into(),
        origin: ConfigOrigin::Default,
        message: format!("the configuration cannot be written as TOML: {e}"),
    })
}

/// Every dotted key path of `table`.
fn key_paths(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => key_paths(inner, &path, out),
            _ => out.push(path),
        }
    }
}

/// Overlays `top` on `base`, recursing into tables.
fn merge(base: &mut toml::Table, top: &toml::Table) {
    for (key, value) in top {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => merge(inner, over),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The 1-based line of dotted `key` in TOML `text` (a `[section]` header
/// followed by `name = ...`, or a top-level `name = ...`).
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let (section, name) = match key.rsplit_once('.') {
        Some((section, name)) => (section, name),
        None => ("", key),
    };
    let mut current = String::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[') {
            current = header.trim_end_matches(']').trim().to_string();
            continue;
        }
        if current == section
            && let Some(rest) = trimmed.strip_prefix(name)
            && rest.trim_start().starts_with('=')
        {
            return Some(number + 1);
        }
    }
    None
}

fn from_table<C: DeserializeOwned>(table: toml::Table) -> Result<C, toml::de::Error> {
    toml::Value::Table(table).try_into()
}

/// The value of a `--set key=value`: a TOML value (number, boolean,
/// quoted string, array), a bare comma-separated list as an array
/// (`patches=2,2,1` for `patches=[2,2,1]`), else a bare string.
fn set_value(value: &str) -> toml::Value {
    let parse = |text: &str| {
        toml::from_str::<toml::Table>(&format!("v = {text}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
    };
    parse(value)
        .or_else(|| {
            value
                .contains(',')
                .then(|| parse(&format!("[{value}]")))
                .flatten()
        })
        .unwrap_or_else(|| toml::Value::String(value.trim().into()))
}

/// Loads case `case`'s configuration: `base` (the defaults when `None`),
/// then `file`, then each `key=value` of `sets`; checks every range.
pub fn load<C: CaseConfig>(
    case: &str,
    base: Option<(C, ConfigOrigin)>,
    file: Option<&Path>,
    sets: &[String],
) -> CaseResult<Loaded<C>> {
    let defaults_only = base.is_none() && file.is_none() && sets.is_empty();
    let (base, base_origin) = base.unwrap_or((C::default(), ConfigOrigin::Default));
    let mut table = table_of(case, &base)?;
    let mut known = Vec::new();
    key_paths(&table_of(case, &C::default())?, "", &mut known);
    let mut origins = BTreeMap::new();
    if base_origin != ConfigOrigin::Default {
        for key in &known {
            origins.insert(key.clone(), base_origin.clone());
        }
    }
    if let Some(path) = file {
        let file_text = std::fs::read_to_string(path).map_err(|source| CaseError::ConfigFile {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = ConfigOrigin::File {
            path: path.to_path_buf(),
            line: None,
        };
        // Strict parse first: unknown keys and wrong types with their line.
        if let Err(e) = toml::from_str::<C>(&file_text) {
            return Err(CaseError::ConfigSyntax {
                case: case.into(),
                origin,
                message: abbreviated_lines(&e.to_string()),
            });
        }
        let overlay: toml::Table =
            toml::from_str(&file_text).map_err(|e| CaseError::ConfigSyntax {
                case: case.into(),
                origin: origin.clone(),
                message: abbreviated_lines(&e.to_string()),
            })?;
        let mut given = Vec::new();
        key_paths(&overlay, "", &mut given);
        for key in given {
            let line = line_of(&file_text, &key);
            origins.insert(
                key,
                ConfigOrigin::File {
                    path: path.to_path_buf(),
                    line,
                },
            );
        }
        merge(&mut table, &overlay);
    }
    for set in sets {
        let Some((key, value)) = set.split_once('=') else {
            return Err(CaseError::ConfigSyntax {
                case: case.into(),
                origin: ConfigOrigin::Set,
                message: format!("`{}` is not of the form key=value", abbreviated(set)),
            });
        };
        let key = key.trim();
        if !known.iter().any(|k| k == key) {
            return Err(CaseError::UnknownKey {
                case: case.into(),
                key: abbreviated(key),
                origin: ConfigOrigin::Set,
                known: known.join(", "),
            });
        }
        let parsed = set_value(value);
        let mut cursor = &mut table;
        let parts: Vec<&str> = key.split('.').collect();
        for part in &parts[..parts.len() - 1] {
            cursor = match cursor
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            {
                toml::Value::Table(t) => t,
                _ => {
                    return Err(CaseError::UnknownKey {
                        case: case.into(),
                        key: key.into(),
                        origin: ConfigOrigin::Set,
                        known: known.join(", "),
                    });
                }
            };
        }
        cursor.insert(parts[parts.len() - 1].to_string(), parsed);
        if let Err(e) = from_table::<C>(table.clone()) {
            return Err(CaseError::ConfigSyntax {
                case: case.into(),
                origin: ConfigOrigin::Set,
                message: format!(
                    "--set {key}={}: {}",
                    abbreviated(value),
                    abbreviated(e.message())
                ),
            });
        }
        origins.insert(key.to_string(), ConfigOrigin::Set);
    }
    let config: C = from_table(table).map_err(|e| CaseError::ConfigSyntax {
        case: case.into(),
        origin: ConfigOrigin::Default,
        message: e.to_string(),
    })?;
    if let Some((key, value, allowed)) = config.check_ranges() {
        let origin = origins.get(&key).cloned().unwrap_or(ConfigOrigin::Default);
        return Err(CaseError::ConfigValue {
            case: case.into(),
            key,
            value,
            allowed,
            origin: Box::new(origin),
        });
    }
    Ok(Loaded {
        config,
        origins,
        defaults_only,
    })
}

/// The configuration as TOML text (what `--print-config` shows and what a
/// checkpoint stores): the documented file when nothing was overridden.
pub fn to_text<C: CaseConfig>(case: &str, loaded: &Loaded<C>) -> CaseResult<String> {
    if loaded.defaults_only {
        return Ok(C::DOCUMENTED.to_string());
    }
    toml::to_string(&loaded.config).map_err(|e| CaseError::ConfigSyntax {
        case: case.into(),
        origin: ConfigOrigin::Default,
        message: format!("the configuration cannot be written as TOML: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::line_of;

    #[test]
    fn keys_are_found_on_their_line_in_their_section() {
        let text = "# comment\ncells = 8\n\n[flow]\ncells = 9\nspeed=2\n[other]\nspeed = 3\n";
        assert_eq!(line_of(text, "cells"), Some(2));
        assert_eq!(line_of(text, "flow.cells"), Some(5));
        assert_eq!(line_of(text, "flow.speed"), Some(6));
        assert_eq!(line_of(text, "other.speed"), Some(8));
        assert_eq!(line_of(text, "speed"), None);
        // A key that is a prefix of another is not confused with it.
        assert_eq!(line_of("cellsize = 1\ncells = 2\n", "cells"), Some(2));
    }
}
