//! CSV files of numbers: a whole table written atomically ([`write_csv`]),
//! and a time series written as the run goes ([`SeriesFile`]): its header
//! and every complete row written when the run starts (a restart rewrites
//! the rows its checkpoint holds), then each new row appended and flushed
//! after the step that completes it, so that a run that diverges or is
//! interrupted keeps its history up to its last step.

use crate::error::{OutputError, OutputResult};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The header line and file name of a time series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesLayout {
    /// File name inside the output directory (e.g. `taylor-green_energy.csv`).
    pub file_name: String,
    /// The CSV header, comma-separated column names.
    pub header: String,
}

/// An open series file.
#[derive(Debug)]
pub struct SeriesFile {
    path: PathBuf,
    out: BufWriter<File>,
    written: usize,
}

fn failed(path: &Path, error: std::io::Error) -> OutputError {
    OutputError::Output {
        path: path.to_path_buf(),
        reason: format!("cannot write the time series: {error}"),
    }
}

/// One row as CSV text (12 significant digits, as [`write_csv`]).
fn line(row: &[f64]) -> String {
    let cells: Vec<String> = row.iter().map(|v| format!("{v:.12e}")).collect();
    cells.join(",")
}

impl SeriesFile {
    /// Creates (or replaces) `directory/layout.file_name` with the header
    /// and `rows`, flushed.
    pub fn create(
        directory: &Path,
        layout: &SeriesLayout,
        rows: &[Vec<f64>],
    ) -> OutputResult<Self> {
        let path = directory.join(&layout.file_name);
        let file = File::create(&path).map_err(|e| failed(&path, e))?;
        let mut series = SeriesFile {
            out: BufWriter::new(file),
            path,
            written: 0,
        };
        writeln!(series.out, "{}", layout.header).map_err(|e| failed(&series.path, e))?;
        series.append(rows)?;
        Ok(series)
    }

    /// Appends `rows` and flushes.
    pub fn append(&mut self, rows: &[Vec<f64>]) -> OutputResult<()> {
        for row in rows {
            writeln!(self.out, "{}", line(row)).map_err(|e| failed(&self.path, e))?;
        }
        self.out.flush().map_err(|e| failed(&self.path, e))?;
        self.written += rows.len();
        Ok(())
    }

    /// Rows written so far.
    pub fn rows_written(&self) -> usize {
        self.written
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes a CSV file: a header line and one line per row.
pub fn write_csv(path: &Path, header: &str, rows: &[Vec<f64>]) -> OutputResult<()> {
    let mut text = String::from(header);
    text.push('\n');
    for row in rows {
        text.push_str(&line(row));
        text.push('\n');
    }
    crate::files::write_text_file_atomically(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_on_disk_after_each_append() {
        let dir = tempfile::tempdir().unwrap();
        let layout = SeriesLayout {
            file_name: "s.csv".into(),
            header: "t,k".into(),
        };
        let mut series = SeriesFile::create(dir.path(), &layout, &[vec![0.0, 1.0]]).unwrap();
        series.append(&[vec![0.5, 0.25]]).unwrap();
        // Read while the writer is still open: nothing waits in a buffer.
        let text = std::fs::read_to_string(dir.path().join("s.csv")).unwrap();
        assert_eq!(
            text,
            "t,k\n0.000000000000e0,1.000000000000e0\n5.000000000000e-1,2.500000000000e-1\n"
        );
        assert_eq!(series.rows_written(), 2);
    }
}
