//! Line plots (miss-ratio curves, reproduction figures) and grouped bar charts
//! as SVG or PNG (by the file's extension).

use std::path::Path;

use anyhow::{Context, Result, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a plot.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (cache size, miss ratio) points, sizes ascending.
    pub points: Vec<(f64, f64)>,
}

/// The y axis of a plot.
#[derive(Clone, Copy, Debug)]
pub struct YAxis<'a> {
    /// Axis title.
    pub label: &'a str,
    /// Whether y is a ratio in `[0, 1]` (the axis then stops at 1).
    pub ratio: bool,
}

/// Writes `series` to `path` (`.svg` or `.png`), x = cache size in `x_label`, y = miss ratio.
pub fn miss_ratio_curves(path: &Path, title: &str, x_label: &str, series: &[Series]) -> Result<()> {
    lines(
        path,
        title,
        x_label,
        YAxis {
            label: "miss ratio",
            ratio: true,
        },
        series,
    )
}

/// Checks that `path` names a plot format (`.svg` or `.png`), before any work.
pub fn check_path(path: &Path) -> Result<()> {
    Format::of(path).map(|_| ())
}

/// A plot file's format, from its name.
enum Format {
    Svg,
    Png,
}

impl Format {
    fn of(path: &Path) -> Result<Self> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("svg") => Ok(Self::Svg),
            Some("png") => Ok(Self::Png),
            _ => bail!(
                "--plot {}: the name must end in .svg or .png (other formats are not drawn)",
                path.display()
            ),
        }
    }
}

/// Calls `$draw(area, args…)` on an SVG or PNG drawing area of `$size` pixels
/// for `$path`, chosen by its extension (the drawing functions are generic over
/// the backend, so a closure cannot stand in for them).
macro_rules! render {
    ($path:expr, $size:expr, $draw:ident($($arg:expr),* $(,)?)) => {{
        let path: &Path = $path;
        let result = match Format::of(path)? {
            Format::Svg => $draw(&SVGBackend::new(path, $size).into_drawing_area(), $($arg),*),
            Format::Png => $draw(&BitMapBackend::new(path, $size).into_drawing_area(), $($arg),*),
        };
        result.with_context(|| format!("drawing plot {}", path.display()))
    }};
}

/// Writes `series` to `path` (`.svg` or `.png`) as lines with points.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y: YAxis<'_>,
    series: &[Series],
) -> Result<()> {
    render!(path, (1000, 640), draw(title, x_label, y, series))
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y: YAxis<'_>,
    series: &[Series],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let failed = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    area.fill(&WHITE).map_err(|e| failed(&e))?;
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    let y_max = if y.ratio {
        (y_max * 1.05).clamp(0.05, 1.0)
    } else {
        (y_max * 1.1).max(1.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y.label)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .x_label_formatter(&|x| human(*x))
        .y_label_formatter(&|v| {
            if y.ratio {
                format!("{v:.2}")
            } else {
                human(*v)
            }
        })
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(|e| failed(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if s.points.len() <= 32 {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| failed(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| failed(&e))?;
    area.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// Writes `series` to `path` (`.svg` or `.png`) with both axes logarithmic
/// (a rank-frequency curve); points with a coordinate ≤ 0 are left out.
pub fn log_log(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    render!(
        path,
        (1000, 640),
        draw_log_log(title, x_label, y_label, series)
    )
}

fn draw_log_log<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let failed = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    area.fill(&WHITE).map_err(|e| failed(&e))?;
    let positive = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
            .collect()
    };
    let all: Vec<(f64, f64)> = series.iter().flat_map(positive).collect();
    let x_max = all.iter().map(|p| p.0).fold(1.0_f64, f64::max) * 1.2;
    let y_max = all.iter().map(|p| p.1).fold(1.0_f64, f64::max) * 1.5;
    let y_min = all.iter().map(|p| p.1).fold(y_max, f64::min).min(1.0) * 0.7;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..x_max).log_scale(), (y_min..y_max).log_scale())
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .x_label_formatter(&|x| human(*x))
        .y_label_formatter(&|y| human(*y))
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(positive(s), style))
            .map_err(|e| failed(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| failed(&e))?;
    area.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// One colour of a grouped bar chart: its legend text and one value per category.
pub struct BarSeries {
    /// Legend text.
    pub name: String,
    /// One value per category, in the categories' order (missing: 0).
    pub values: Vec<f64>,
}

/// Writes a grouped bar chart to `path` (`.svg` or `.png`): one group per
/// category, one bar per series in each group.
pub fn bars(
    path: &Path,
    title: &str,
    categories: &[String],
    y_label: &str,
    series: &[BarSeries],
) -> Result<()> {
    render!(
        path,
        (1200, 640),
        draw_bars(title, categories, y_label, series)
    )
}

fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    categories: &[String],
    y_label: &str,
    series: &[BarSeries],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let failed = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    area.fill(&WHITE).map_err(|e| failed(&e))?;
    // Each group is `k` bars and one empty slot.
    let k = series.len().max(1);
    let slots = i32::try_from(categories.len().max(1) * (k + 1)).unwrap_or(i32::MAX);
    let y_max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let y_max = (y_max * 1.15).max(f64::MIN_POSITIVE);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((0..slots).into_segmented(), 0.0..y_max)
        .map_err(|e| failed(&e))?;
    let label_slot = (k - 1) / 2;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(usize::try_from(slots).unwrap_or(0))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(slot) | SegmentValue::Exact(slot) => {
                let slot = usize::try_from(*slot).unwrap_or(usize::MAX);
                if slot % (k + 1) == label_slot {
                    categories.get(slot / (k + 1)).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
            SegmentValue::Last => String::new(),
        })
        .y_desc(y_label)
        .y_label_formatter(&|v| human(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let bars = s.values.iter().enumerate().map(move |(c, &v)| {
            let slot = i32::try_from(c * (k + 1) + i).unwrap_or(i32::MAX);
            let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
            Rectangle::new(
                [
                    (SegmentValue::Exact(slot), 0.0),
                    (SegmentValue::Exact(slot + 1), v),
                ],
                color.filled(),
            )
        });
        chart
            .draw_series(bars)
            .map_err(|e| failed(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| failed(&e))?;
    area.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// `1500` → `1.5K`, `2_000_000` → `2M`: short axis labels.
pub fn human(x: f64) -> String {
    let (value, suffix) = match x.abs() {
        v if v >= 1e9 => (x / 1e9, "G"),
        v if v >= 1e6 => (x / 1e6, "M"),
        v if v >= 1e3 => (x / 1e3, "K"),
        _ => (x, ""),
    };
    let text = format!("{value:.1}");
    format!("{}{suffix}", text.trim_end_matches(".0"))
}
