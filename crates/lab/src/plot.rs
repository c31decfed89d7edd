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
const SIZE: (u32, u32) = (820, 400);

/// One figure of the report.
#[derive(Clone, Debug)]
pub enum Figure {
    /// Bars grouped by configuration, the series (stacks) side by side in each group, as the
    /// papers draw them; optionally a second metric per bar as black marks on the right axis.
    Bars {
        /// The figure's title.
        title: String,
        /// The left y axis's label (the bars' metric and unit).
        y_desc: String,
        /// The groups' names, left to right (one unnamed group when the variants form no grid).
        groups: Vec<String>,
        /// The series' names, one colour each, in legend order.
        series: Vec<String>,
        /// `values[series][group]`: a bar's height, `None` where the variant does not exist.
        values: Vec<Vec<Option<f64>>>,
        /// The right axis's label and one value per bar (same shape as `values`), drawn as
        /// marks.
        marks: Option<(String, Vec<Vec<Option<f64>>>)>,
    },
    /// Ours beside the paper's number, one pair per claim: our bar at the first seed (the
    /// other seeds as dots), the paper's value (or range) as a grey bar with the tolerance as
    /// a whisker.
    Paper {
        /// The figure's title.
        title: String,
        /// The y axis's label (the quantity and unit).
        y_desc: String,
        /// One entry per claim, left to right.
        items: Vec<PaperItem>,
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

/// One claim of a [`Figure::Paper`].
#[derive(Clone, Debug)]
pub struct PaperItem {
    /// Its name under the bars (short: a number the caption explains).
    pub label: String,
    /// The measured quantity at each seed, the first seed first.
    pub ours: Vec<f64>,
    /// The paper's range (a value is a range of width 0).
    pub paper: [f64; 2],
    /// The tolerance either side of the paper's range.
    pub tolerance: f64,
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
            Figure::Bars { title, .. }
            | Figure::Lines { title, .. }
            | Figure::Paper { title, .. } => title,
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
                groups,
                series,
                values,
                marks,
            } => draw_bars(root, title, y_desc, groups, series, values, marks.as_ref()),
            Figure::Paper {
                title,
                y_desc,
                items,
            } => draw_paper(root, title, y_desc, items),
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

/// The x position of bar (`series` `si` of `ns`) in group `gi`: groups are one unit wide,
/// the bars share 80% of it.
fn bar_x(gi: usize, si: usize, ns: usize) -> (f64, f64) {
    let w = 0.8 / ns.max(1) as f64;
    let x0 = gi as f64 + 0.1 + si as f64 * w;
    (x0, x0 + w)
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[String],
    values: &[Vec<Option<f64>>],
    marks: Option<&(String, Vec<Vec<Option<f64>>>)>,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (plot, side) = split(root, title)?;
    let n = groups.len().max(1) as f64;
    let all =
        |v: &[Vec<Option<f64>>]| -> Vec<f64> { v.iter().flatten().flatten().copied().collect() };
    let named = groups.iter().any(|g| !g.is_empty());
    let mut chart = ChartBuilder::on(&plot)
        .margin(8)
        .x_label_area_size(if named { 28 } else { 10 })
        .y_label_area_size(70)
        .right_y_label_area_size(if marks.is_some() { 70 } else { 0 })
        .build_cartesian_2d(0.0..n, 0.0..top(all(values).into_iter()))
        .map_err(err)?
        .set_secondary_coord(0.0..n, 0.0..top(marks.iter().flat_map(|m| all(&m.1))));
    // Groups are named under the axis; series by colour, in the legend.
    let group_label = |x: &f64| {
        let i = x.floor() as usize;
        if (x - x.floor() - 0.5).abs() < 1e-6 {
            groups.get(i).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(if named { groups.len() * 2 + 1 } else { 0 })
        .x_label_formatter(&group_label)
        .y_label_formatter(&|y| crate::experiment::num(*y))
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let ns = series.len();
    let mut rects = Vec::new();
    for (si, row) in values.iter().enumerate() {
        for (gi, v) in row.iter().enumerate() {
            if let Some(y) = v {
                let (x0, x1) = bar_x(gi, si, ns);
                rects.push(Rectangle::new([(x0, 0.0), (x1, *y)], color(si).filled()));
            }
        }
    }
    chart.draw_series(rects).map_err(err)?;
    let mut entries: Vec<(String, RGBColor, bool)> = series
        .iter()
        .enumerate()
        .map(|(si, label)| {
            // One group: the legend gives each bar's value too.
            let label = match (groups.len(), values.get(si).and_then(|r| r.first())) {
                (1, Some(Some(y))) => format!("{label}: {}", crate::experiment::num(*y)),
                _ => label.clone(),
            };
            (label, color(si), false)
        })
        .collect();
    if let Some((desc, m)) = marks {
        chart
            .configure_secondary_axes()
            .y_label_formatter(&|y| crate::experiment::num(*y))
            .y_desc(desc)
            .draw()
            .map_err(err)?;
        let mut points = Vec::new();
        for (si, row) in m.iter().enumerate() {
            for (gi, v) in row.iter().enumerate() {
                if let Some(y) = v {
                    let (x0, x1) = bar_x(gi, si, ns);
                    points.push(((x0 + x1) / 2.0, *y));
                }
            }
        }
        chart
            .draw_secondary_series(
                points
                    .into_iter()
                    .map(|p| TriangleMarker::new(p, 5, BLACK.filled())),
            )
            .map_err(err)?;
        entries.push((format!("marks: {desc}"), BLACK, true));
    }
    side_legend(&side, &entries)
}

fn draw_paper<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    items: &[PaperItem],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (plot, side) = split(root, title)?;
    let n = items.len().max(1) as f64;
    let ys = items.iter().flat_map(|i| {
        i.ours
            .iter()
            .copied()
            .chain([i.paper[0] - i.tolerance, i.paper[1] + i.tolerance])
    });
    let (lo, hi) = ys.fold((0.0f64, 0.0f64), |(l, h), y| (l.min(y), h.max(y)));
    // All zero (the paper's "records zero", met): an axis of one unit, not of nothing.
    let hi = if hi - lo < 1e-9 { lo + 1.0 } else { hi };
    let pad = (hi - lo) * 0.12;
    let mut chart = ChartBuilder::on(&plot)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, (lo - if lo < 0.0 { pad } else { 0.0 })..(hi + pad))
        .map_err(err)?;
    let item_label = |x: &f64| {
        let i = x.floor() as usize;
        if (x - x.floor() - 0.5).abs() < 1e-6 {
            items.get(i).map(|it| it.label.clone()).unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(items.len() * 2 + 1)
        .x_label_formatter(&item_label)
        .y_label_formatter(&|y| crate::experiment::num(*y))
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let ours = color(0);
    let grey = RGBColor(170, 170, 170);
    for (i, it) in items.iter().enumerate() {
        let x = i as f64;
        if let Some(first) = it.ours.first() {
            chart
                .draw_series([Rectangle::new(
                    [(x + 0.1, 0.0), (x + 0.5, *first)],
                    ours.filled(),
                )])
                .map_err(err)?;
        }
        chart
            .draw_series(
                it.ours
                    .iter()
                    .skip(1)
                    .map(|y| Circle::new((x + 0.3, *y), 3, BLACK.filled())),
            )
            .map_err(err)?;
        let [plo, phi] = it.paper;
        chart
            .draw_series([Rectangle::new(
                [(x + 0.5, 0.0), (x + 0.9, phi)],
                grey.filled(),
            )])
            .map_err(err)?;
        if phi > plo {
            // The paper's range, darker on its bar.
            chart
                .draw_series([Rectangle::new(
                    [(x + 0.5, plo), (x + 0.9, phi)],
                    RGBColor(110, 110, 110).filled(),
                )])
                .map_err(err)?;
        }
        let (wlo, whi) = (plo - it.tolerance, phi + it.tolerance);
        let mid = x + 0.7;
        for seg in [
            vec![(mid, wlo), (mid, whi)],
            vec![(mid - 0.08, wlo), (mid + 0.08, wlo)],
            vec![(mid - 0.08, whi), (mid + 0.08, whi)],
        ] {
            chart
                .draw_series([PathElement::new(seg, BLACK.stroke_width(2))])
                .map_err(err)?;
        }
    }
    side_legend(
        &side,
        &[
            ("ossd (first seed)".to_string(), ours, false),
            ("ossd, other seeds".to_string(), BLACK, true),
            ("the paper (dark: its range)".to_string(), grey, false),
            ("the paper's number ± tolerance".to_string(), BLACK, true),
        ],
    )
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
            y_desc: "throughput (MiB/s)".into(),
            groups: vec!["25M/4t".into(), "50M/4t".into()],
            series: vec!["OFS".into(), "ext4-like".into()],
            values: vec![vec![Some(54.5), Some(76.7)], vec![Some(24.4), None]],
            marks: Some((
                "GC copies".into(),
                vec![vec![Some(75916.0), Some(342.0)], vec![Some(448350.0), None]],
            )),
        };
        let paper = Figure::Paper {
            title: "gain".into(),
            y_desc: "gain (%)".into(),
            items: vec![
                PaperItem {
                    label: "1".into(),
                    ours: vec![8.6, 7.0, 9.1],
                    paper: [15.1, 32.5],
                    tolerance: 2.0,
                },
                PaperItem {
                    label: "2".into(),
                    ours: vec![-3.0],
                    paper: [9.9, 9.9],
                    tolerance: 1.0,
                },
            ],
        };
        let lines = Figure::Lines {
            title: "cdf".into(),
            x_desc: "us".into(),
            y_desc: "fraction".into(),
            series: vec![("a".into(), vec![(10.0, 0.0), (100.0, 0.5), (5000.0, 1.0)])],
            log_x: true,
        };
        for (i, f) in [bars, paper, lines].iter().enumerate() {
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
