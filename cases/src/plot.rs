//! PNG line charts (plotters, bitmap back end) with an embedded DejaVu Sans
//! font, so that plots need no system fonts and render headless.

use crate::error::{CaseError, CaseResult};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use std::path::Path;
use std::sync::Once;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A line through the points.
    Line,
    /// Circles at the points (reference data).
    Points,
}

/// One series of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub mark: Mark,
}

static FONT: Once = Once::new();

fn register_embedded_font() {
    FONT.call_once(|| {
        // The embedded font is valid TrueType; failure would only mean
        // text-less charts, reported by the draw calls below.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(0, 0, 0),
];

/// Draws `series` into a 900 x 600 PNG at `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> CaseResult<()> {
    register_embedded_font();
    let fail = |e: &dyn std::fmt::Display| CaseError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let finite = |v: &f64| v.is_finite();
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(finite)
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(finite)
        .collect();
    if xs.is_empty() || ys.is_empty() {
        return Err(fail(&"no finite points to plot"));
    }
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5 * lo.abs().max(1.0)
        };
        (lo - pad)..(hi + pad)
    };
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(range(&xs), range(&ys))
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| fail(&e))?;
    for (index, s) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        match s.mark {
            Mark::Line => chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| fail(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                }),
            Mark::Points => chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, colour.stroke_width(2))),
                )
                .map_err(|e| fail(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.stroke_width(2))),
        };
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// Writes a CSV file: a header line and one line per row.
pub fn write_csv(path: &Path, header: &str, rows: &[Vec<f64>]) -> CaseResult<()> {
    use std::fmt::Write;
    let mut text = String::from(header);
    text.push('\n');
    for row in rows {
        let line: Vec<String> = row.iter().map(|v| format!("{v:.12e}")).collect();
        let _ = writeln!(text, "{}", line.join(","));
    }
    crate::output::write_text_file_atomically(path, &text)
}
