//! PNG line charts ([`line_chart`]) and colour images of a plane of a
//! field ([`field_image`]), drawn with plotters' bitmap back end and an
//! embedded DejaVu Sans font, so that plots need no system fonts and render
//! headless.

use crate::error::{OutputError, OutputResult};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use std::path::Path;
use std::sync::Once;
use watershed_fields::{FieldScalar, Location, SpatialField};

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
) -> OutputResult<()> {
    register_embedded_font();
    let fail = |e: &dyn std::fmt::Display| OutputError::Plot {
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

/// A plane of a field's interior points, for [`field_image`]: the index is
/// that of the interior point along the axis the plane is normal to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    /// The x-y plane through interior point `z` (a 2D case: `z = 0`).
    Xy {
        /// Interior index along z.
        z: usize,
    },
    /// The x-z plane through interior point `y`.
    Xz {
        /// Interior index along y.
        y: usize,
    },
    /// The y-z plane through interior point `x`.
    Yz {
        /// Interior index along x.
        x: usize,
    },
}

impl Plane {
    /// (horizontal axis, vertical axis, normal axis, index along the normal).
    fn axes(self) -> (usize, usize, usize, usize) {
        match self {
            Plane::Xy { z } => (0, 1, 2, z),
            Plane::Xz { y } => (0, 2, 1, y),
            Plane::Yz { x } => (1, 2, 0, x),
        }
    }
}

/// The colour of `value` on the viridis map from `low` to `high`.
fn viridis(value: f64, low: f64, high: f64) -> RGBColor {
    let t = if high > low {
        ((value - low) / (high - low)).clamp(0.0, 1.0)
    } else {
        0.5
    };
    ViridisRGB::get_color(t as f32)
}

/// Draws `plane` of `field`'s interior as a colour map (viridis, from the
/// plane's smallest to its largest value, with a colour bar) into a PNG at
/// `path`, under `title` (which names the field: a solver's field name
/// carries its tag context). Each point is a cell-sized rectangle at its true position (a face
/// field's points are half a cell off the centres), axes in the grid's
/// coordinates. The field must be valid on the CPU.
///
/// Refused, naming the field: a plane index outside the interior, and a
/// plane holding NaN or infinite values (where the first one is).
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_io::plot::{Plane, field_image};
/// let grid = Grid::new([16, 8, 1], [2.0, 1.0, 0.125], [0.0; 3])?;
/// let mut phi = SpatialField::<CellCentre>::new("phi", &grid.whole_domain(1), Device::Cpu)?;
/// let layout = phi.layout().clone();
/// let values = phi.values_mut()?;
/// for index in layout.interior().iter() {
///     let [x, y, _] = layout.coordinate(index);
///     values[layout.linear_index(index)] = x * y;
/// }
/// let folder = tempfile::tempdir()?;
/// field_image(&folder.path().join("phi.png"), "x y", &phi, Plane::Xy { z: 0 })?;
/// assert!(folder.path().join("phi.png").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn field_image<L: Location, T: FieldScalar>(
    path: &Path,
    title: &str,
    field: &SpatialField<L, T>,
    plane: Plane,
) -> OutputResult<()> {
    register_embedded_font();
    let fail = |reason: String| OutputError::Plot {
        path: path.to_path_buf(),
        reason,
    };
    let (across, up, normal, at) = plane.axes();
    let layout = field.layout();
    let interior = layout.interior();
    let extent = interior.extent();
    const AXES: [&str; 3] = ["x", "y", "z"];
    if at >= extent[normal] {
        return Err(fail(format!(
            "{plane:?} is outside field `{}`, which has {} interior points along {}",
            field.name(),
            extent[normal],
            AXES[normal]
        )));
    }
    let values = field.values()?;
    let spacing = layout.patch().grid().spacing();
    let mut points = Vec::with_capacity(extent[across] * extent[up]);
    for index in interior.iter() {
        if index[normal] - interior.lo[normal] != at as isize {
            continue;
        }
        let value = values[layout.linear_index(index)].to_f64();
        if !value.is_finite() {
            return Err(fail(format!(
                "field `{}` holds {value} at interior point {:?}; an image needs finite values",
                field.name(),
                [0, 1, 2].map(|a| index[a] - interior.lo[a])
            )));
        }
        let position = layout.coordinate(index);
        points.push((position[across], position[up], value));
    }
    let low = points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
    let high = points.iter().map(|p| p.2).fold(f64::NEG_INFINITY, f64::max);
    let half = [spacing[across] / 2.0, spacing[up] / 2.0];
    let bounds = |axis: usize, h: f64| {
        let lo = points
            .iter()
            .map(|p| if axis == 0 { p.0 } else { p.1 })
            .fold(f64::INFINITY, f64::min);
        let hi = points
            .iter()
            .map(|p| if axis == 0 { p.0 } else { p.1 })
            .fold(f64::NEG_INFINITY, f64::max);
        (lo - h)..(hi + h)
    };
    let (xs, ys) = (bounds(0, half[0]), bounds(1, half[1]));
    // The plot keeps the plane's aspect ratio within 1:4 either way.
    let aspect = ((ys.end - ys.start) / (xs.end - xs.start)).clamp(0.25, 4.0);
    let plot_width = 700u32;
    let plot_height = ((plot_width as f64) * aspect).round().clamp(175.0, 900.0) as u32;
    let (width, height) = (plot_width + 260, plot_height + 120);
    let draw = |e: &dyn std::fmt::Display| fail(e.to_string());
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let (left, right) = root.split_horizontally(width - 150);
    let mut chart = ChartBuilder::on(&left)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(xs, ys)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(AXES[across])
        .y_desc(AXES[up])
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| draw(&e))?;
    chart
        .draw_series(points.iter().map(|&(x, y, value)| {
            Rectangle::new(
                [(x - half[0], y - half[1]), (x + half[0], y + half[1])],
                viridis(value, low, high).filled(),
            )
        }))
        .map_err(|e| draw(&e))?;
    let (bar_low, bar_high) = if high > low {
        (low, high)
    } else {
        (
            low - 0.5 * low.abs().max(1.0),
            high + 0.5 * high.abs().max(1.0),
        )
    };
    let mut bar = ChartBuilder::on(&right)
        .margin_top(55)
        .margin_bottom(60)
        .margin_right(10)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..1.0, bar_low..bar_high)
        .map_err(|e| draw(&e))?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| draw(&e))?;
    const STEPS: usize = 128;
    let step = (bar_high - bar_low) / STEPS as f64;
    bar.draw_series((0..STEPS).map(|i| {
        let v = bar_low + step * i as f64;
        Rectangle::new(
            [(0.0, v), (1.0, v + step)],
            viridis(v + 0.5 * step, low, high).filled(),
        )
    }))
    .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
