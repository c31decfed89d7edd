//! The report's figures, shaped like the papers': bars per variant (with a line on a second
//! axis, as OSSD-13 plots throughput against valid-page copies), lines over virtual time
//! (frames per second, OSSD-13 Fig. 7) and latency CDFs (OSSD-13 Fig. 8). Each figure is drawn
//! once as SVG, for the self-contained HTML report, and once as PNG.
//!
//! PNG text needs a font in the binary (a fresh machine may have none): DejaVu Sans, from the
//! `dejavu` crate, registered with plotters once.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Pixels of every figure.
const SIZE: (u32, u32) = (760, 360);

/// One figure of the report.
#[derive(Clone, Debug)]
pub enum Figure {
    /// One bar per variant; optionally a second metric per variant as a line on the right axis.
    Bars {
        /// The figure's title.
        title: String,
        /// The left y axis's label (the bars' metric and unit).
        y_desc: String,
        /// (variant label, value), one bar each, left to right.
        bars: Vec<(String, f64)>,
        /// The right axis's label and one value per bar, drawn as a line.
        line: Option<(String, Vec<f64>)>,
    },
    /// One line per variant over a shared x axis, `log_x` for latencies spanning decades.
    Lines {
        /// The figure's title.
        title: String,
        /// The x axis's label.
        x_desc: String,
        /// The y axis's label.
        y_desc: String,
        /// (variant label, (x, y) points), one line each.
        series: Vec<(String, Vec<(f64, f64)>)>,
        /// A logarithmic x axis.
        log_x: bool,
    },
}

fn font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TrueType font shipped by the crate; a failure would only lose
        // text, and drawing then reports it as an error.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Why a figure could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// plotters could not draw part of the figure (its `Debug` form, as plotters' `Display`
    /// says little).
    #[error("plot: {0:?}")]
    Draw(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The PNG file could not be written.
    #[error("cannot write {}: {source:?}", .path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// plotters' error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn err<E: std::error::Error + Send + Sync + 'static>(e: E) -> PlotError {
    PlotError::Draw(Box::new(e))
}

impl Figure {
    /// The figure's title.
    pub fn title(&self) -> &str {
        match self {
            Figure::Bars { title, .. } | Figure::Lines { title, .. } => title,
        }
    }

    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, PlotError> {
        font();
        let mut s = String::new();
        {
            let root = SVGBackend::with_string(&mut s, SIZE).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(err)?;
        }
        Ok(s)
    }

    /// The figure as a PNG file at `path`.
    pub fn png(&self, path: &Path) -> Result<(), PlotError> {
        font();
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        self.draw(&root)?;
        root.present().map_err(|e| PlotError::Write {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        match self {
            Figure::Bars {
                title,
                y_desc,
                bars,
                line,
            } => draw_bars(root, title, y_desc, bars, line.as_ref()),
            Figure::Lines {
                title,
                x_desc,
                y_desc,
                series,
                log_x,
            } => draw_lines(root, title, x_desc, y_desc, series, *log_x),
        }
    }
}

/// The top of an axis holding `values`: a little headroom, never an empty range.
fn top(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.fold(0.0, f64::max);
    if max > 0.0 {
        max * 1.15
    } else {
        1.0
    }
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    bars: &[(String, f64)],
    line: Option<&(String, Vec<f64>)>,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (plot, side) = split(root, title)?;
    let n = bars.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&plot)
        .margin(8)
        .x_label_area_size(10)
        .y_label_area_size(70)
        .right_y_label_area_size(if line.is_some() { 70 } else { 0 })
        .build_cartesian_2d(0.0..n, 0.0..top(bars.iter().map(|b| b.1)))
        .map_err(err)?
        .set_secondary_coord(
            0.0..n,
            0.0..top(line.iter().flat_map(|l| l.1.iter().copied())),
        );
    // Variants are told apart by colour and named in the legend: their labels are too long
    // to sit under the bars.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|y| short(*y))
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, y))| {
            let x = i as f64;
            Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *y)],
                Palette99::pick(i).filled(),
            )
        }))
        .map_err(err)?;
    let mut entries: Vec<(String, RGBColor, bool)> = bars
        .iter()
        .enumerate()
        .map(|(i, (label, y))| (format!("{label}: {}", short(*y)), color(i), false))
        .collect();
    if let Some((desc, values)) = line {
        chart
            .configure_secondary_axes()
            .y_desc(desc)
            .draw()
            .map_err(err)?;
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(i, y)| (i as f64 + 0.5, *y))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(points.clone(), BLACK.stroke_width(2)))
            .map_err(err)?;
        chart
            .draw_secondary_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, BLACK.filled())),
            )
            .map_err(err)?;
        entries.push((format!("line: {desc}"), BLACK, true));
    }
    side_legend(&side, &entries)
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (plot, side) = split(root, title)?;
    let xs = || series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let y_top = top(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    let builder = || {
        let mut b = ChartBuilder::on(&plot);
        b.margin(8).x_label_area_size(35).y_label_area_size(60);
        b
    };
    if log_x {
        let lo = match xs().filter(|x| *x > 0.0).fold(f64::MAX, f64::min) {
            f64::MAX => 1.0,
            m => m / 1.5,
        };
        let hi = xs().fold(lo * 10.0, f64::max) * 1.2;
        let chart = builder()
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..y_top)
            .map_err(err)?;
        // Points below the axis start (a zero latency) sit on it.
        draw_series(chart, x_desc, y_desc, series, lo)?;
    } else {
        let hi = top(xs()) / 1.15;
        let chart = builder()
            .build_cartesian_2d(0.0..hi.max(1.0), 0.0..y_top)
            .map_err(err)?;
        draw_series(chart, x_desc, y_desc, series, f64::MIN)?;
    }
    let entries: Vec<(String, RGBColor, bool)> = series
        .iter()
        .enumerate()
        .map(|(i, (label, _))| (label.clone(), color(i), true))
        .collect();
    side_legend(&side, &entries)
}

/// The mesh and one line per series, x values below `x_min` raised to it.
fn draw_series<DB, X>(
    mut chart: ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    x_min: f64,
) -> Result<(), PlotError>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (_, points)) in series.iter().enumerate() {
        let pts = points.iter().map(|&(x, y)| (x.max(x_min), y));
        chart
            .draw_series(LineSeries::new(pts, color(i).stroke_width(2)))
            .map_err(err)?;
    }
    Ok(())
}

fn color(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// A value as a legend shows it: a few significant digits.
fn short(v: f64) -> String {
    if v != 0.0 && v.abs() < 10.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

/// The title on top, the plot on the left and a legend column on the right.
type Panes<DB> = (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>);

fn split<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
) -> Result<Panes<DB>, PlotError>
where
    DB::ErrorType: 'static,
{
    let body = root.titled(title, ("sans-serif", 15)).map_err(err)?;
    let (w, _) = body.dim_in_pixel();
    Ok(body.split_horizontally(w * 68 / 100))
}

/// Legend entries, one per line (long labels wrapped): a filled square for a bar, a stroke for
/// a line.
fn side_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, bool)],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let style = ("sans-serif", 12).into_font().color(&BLACK);
    let mut y = 14;
    for (label, c, stroke) in entries {
        if *stroke {
            area.draw(&PathElement::new(
                [(4, y + 6), (20, y + 6)],
                c.stroke_width(3),
            ))
            .map_err(err)?;
        } else {
            area.draw(&Rectangle::new([(6, y), (18, y + 12)], c.filled()))
                .map_err(err)?;
        }
        for (k, part) in wrap(label, 26).iter().enumerate() {
            area.draw(&Text::new(
                part.clone(),
                (26, y + 14 * k as i32),
                style.clone(),
            ))
            .map_err(err)?;
        }
        y += 14 * wrap(label, 26).len() as i32 + 6;
    }
    Ok(())
}

/// Splits `s` at spaces into lines of at most `width` characters (longer words stay whole).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in s.split(' ') {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + word.len() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_render_as_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("ossd-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bars = Figure::Bars {
            title: "t".into(),
            y_desc: "MiB/s".into(),
            bars: vec![("OFS".into(), 54.5), ("ext4-like".into(), 24.4)],
            line: Some(("GC copies".into(), vec![75916.0, 448350.0])),
        };
        let lines = Figure::Lines {
            title: "cdf".into(),
            x_desc: "us".into(),
            y_desc: "fraction".into(),
            series: vec![("a".into(), vec![(10.0, 0.0), (100.0, 0.5), (5000.0, 1.0)])],
            log_x: true,
        };
        for (i, f) in [bars, lines].iter().enumerate() {
            let svg = f.svg().unwrap();
            assert!(svg.contains("<svg") && svg.contains("<text"), "{svg}");
            let png = dir.join(format!("{i}.png"));
            f.png(&png).unwrap();
            let bytes = std::fs::read(&png).unwrap();
            assert_eq!(&bytes[1..4], b"PNG");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
