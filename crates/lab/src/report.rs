//! The reproduction report: `report.md`, a self-contained `report.html` with the plots inline,
//! each plot as SVG and PNG files, every metric as CSV (`metrics.csv`, and `series.csv` for
//! the time series and latency distributions) and JSON (`results.json`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::experiment::{ExperimentResult, PhaseResult, VariantResult};
use crate::plot::{Figure, PlotError};

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output directory could not be created.
    #[error("cannot create {}: {source}", .dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file of the report could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The results did not serialize to JSON.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A figure could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// What the stack labels in every table and plot mean; the papers' claims keep the papers'
/// own words ("EXT4"), our variants say what they run.
const LABELS: &str = "Labels: OFS = the object file system on the object store with `semantic` \
placement, OFS-ONE = the same with every page in one update block, ext4-like = blockfs, an \
ext4-like file system with no journal, on the page-mapping FTL (real ext4 was the papers' \
baseline), FTL / DFTL = block requests straight on the page-mapping FTL.\n\n";

/// Writes everything into `dir` (created if missing): `report.md`, `report.html`,
/// `results.json`, `metrics.csv`, `series.csv` and each figure as `{experiment}-{i}.svg` and
/// `.png`; returns the path of `report.md`.
pub fn write(dir: &Path, results: &[ExperimentResult]) -> Result<PathBuf, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let put = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|source| ReportError::Write { path, source })
    };
    put("results.json", &serde_json::to_string_pretty(results)?)?;
    put("metrics.csv", &csv(results))?;
    put("series.csv", &series_csv(results))?;
    let mut md = String::from("# ossd reproduction report\n\n");
    md.push_str(LABELS);
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>ossd reproduction report</title>\
         <style>body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:\
         collapse}td,th{border:1px solid #999;padding:2px 6px;text-align:right}</style>\
         <h1>ossd reproduction report</h1>",
    );
    let _ = write!(html, "<p>{}</p>", esc(LABELS.trim()));
    for r in results {
        let _ = writeln!(
            md,
            "## {} ({})\n\n{} on `{}`, scale {}.\n",
            r.title, r.source, r.name, r.device, r.scale
        );
        let _ = write!(
            html,
            "<h2>{} ({})</h2><p>{} on <code>{}</code>, scale {}.</p>",
            esc(&r.title),
            esc(&r.source),
            esc(&r.name),
            esc(&r.device),
            r.scale
        );
        let verdicts = verdict_table(r);
        md.push_str(&verdicts);
        html.push_str(&md_table_to_html(&verdicts));
        for v in r.verdicts.iter().filter(|v| v.why.is_some()) {
            let why = v.why.as_deref().unwrap_or_default();
            let _ = writeln!(md, "*Why ossd disagrees* with \"{}\": {why}\n", v.claim);
            let _ = write!(
                html,
                "<p><i>Why ossd disagrees</i> with \"{}\": {}</p>",
                esc(&v.claim),
                esc(why)
            );
        }
        let table = metric_table(&r.variants);
        md.push_str(&table);
        html.push_str(&md_table_to_html(&table));
        for (i, figure) in figures(r).iter().enumerate() {
            let svg = figure.svg()?;
            put(&format!("{}-{i}.svg", r.name), &svg)?;
            let png = format!("{}-{i}.png", r.name);
            figure.png(&dir.join(&png))?;
            let _ = writeln!(md, "![{}]({png})\n", figure.title());
            html.push_str(&svg);
        }
        for v in &r.variants {
            if let Some(e) = &v.error {
                let _ = writeln!(md, "**{} failed**: {e}\n", v.label);
                let _ = write!(html, "<p><b>{} failed</b>: {}</p>", esc(&v.label), esc(e));
            }
            if !v.fsck_problems.is_empty() {
                let _ = writeln!(md, "**{} fsck**: {:?}\n", v.label, v.fsck_problems);
            }
        }
    }
    put("report.md", &md)?;
    put("report.html", &html)?;
    Ok(dir.join("report.md"))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn verdict_table(r: &ExperimentResult) -> String {
    if r.verdicts.is_empty() {
        return String::new();
    }
    let ranged = r.verdicts.iter().any(|v| v.in_paper_range.is_some());
    let mut s = if ranged {
        String::from(
            "| the paper says | ossd measured | agrees | within the paper's range |\n|---|---|---|---|\n",
        )
    } else {
        String::from("| the paper says | ossd measured | agrees |\n|---|---|---|\n")
    };
    for v in &r.verdicts {
        let a = match v.agrees {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        if ranged {
            let range = match v.in_paper_range {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "-",
            };
            let _ = writeln!(s, "| {} | {} | {a} | {range} |", v.claim, v.measured);
        } else {
            let _ = writeln!(s, "| {} | {} | {a} |", v.claim, v.measured);
        }
    }
    s.push('\n');
    s
}

fn metric_table(vs: &[VariantResult]) -> String {
    let mut s = String::from(
        "| variant | phase | virtual s | MiB/s | tx/s | GC page copies | pages programmed | \
         blocks erased | index pages written | metadata pages written | WA | write p99 us |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for v in vs {
        for p in &v.phases {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {:.2} | {:.0} |",
                v.label,
                p.phase,
                p.files.virtual_seconds,
                p.files.throughput_mib_s,
                p.files.transactions_per_s,
                p.gc_page_copies,
                p.flash_pages_programmed,
                p.flash_blocks_erased,
                p.index_pages_written,
                p.metadata_pages_written,
                p.write_amplification,
                p.files.write_latency.p99_us
            );
        }
    }
    s.push('\n');
    s
}

/// A markdown table as an HTML table (the report's tables are simple: no escapes inside).
fn md_table_to_html(t: &str) -> String {
    let mut out = String::from("<table>");
    for (i, line) in t.lines().filter(|l| l.starts_with('|')).enumerate() {
        if i == 1 {
            continue;
        }
        let cell = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in line.trim_matches('|').split('|') {
            let _ = write!(out, "<{cell}>{}</{cell}>", esc(c.trim()).replace("**", ""));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

fn csv(results: &[ExperimentResult]) -> String {
    let mut s = String::from(
        "experiment,variant,phase,virtual_seconds,throughput_mib_s,transactions_per_s,\
         host_write_bytes,flash_pages_programmed,flash_pages_read,flash_blocks_erased,\
         gc_page_copies,gc_bytes_copied,cleaning_seconds,index_pages_written,index_pages_read,metadata_pages_written,\
         write_amplification,write_p99_us,read_p99_us\n",
    );
    for r in results {
        for v in &r.variants {
            for p in &v.phases {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    r.name,
                    v.label,
                    p.phase,
                    p.files.virtual_seconds,
                    p.files.throughput_mib_s,
                    p.files.transactions_per_s,
                    p.host_write_bytes,
                    p.flash_pages_programmed,
                    p.flash_pages_read,
                    p.flash_blocks_erased,
                    p.gc_page_copies,
                    p.gc_bytes_copied,
                    p.cleaning_seconds,
                    p.index_pages_written,
                    p.index_pages_read,
                    p.metadata_pages_written,
                    p.write_amplification,
                    p.files.write_latency.p99_us,
                    p.files.read_latency.p99_us
                );
            }
        }
    }
    s
}

/// A metric that is a rate of work done, plotted with GC valid-page copies on a second axis.
fn is_throughput(metric: &str) -> bool {
    matches!(
        metric,
        "throughput_mib_s" | "write_mib_s" | "read_mib_s" | "transactions_per_s"
    )
}

/// The figures of one experiment: a bar chart per claimed (phase, metric) and for throughput
/// in the claims' phases (with GC copies as a line when GC ran), frames or transactions per
/// second over time where the workload counts them, and latency CDFs where a claim is about
/// latency.
fn figures(r: &ExperimentResult) -> Vec<Figure> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (p, m) in &r.claimed {
        for k in [
            (p.clone(), m.clone()),
            (p.clone(), "throughput_mib_s".to_string()),
        ] {
            if !pairs.contains(&k) {
                pairs.push(k);
            }
        }
    }
    let mut out: Vec<Figure> = pairs.iter().map(|(p, m)| bars(r, p, m)).collect();
    let mut phases: Vec<&str> = Vec::new();
    for v in &r.variants {
        for p in &v.phases {
            if !phases.contains(&p.phase.as_str()) {
                phases.push(&p.phase);
            }
        }
    }
    for phase in &phases {
        let over_time = lines(r, phase, |p| {
            p.transactions_per_second
                .iter()
                .enumerate()
                .map(|(s, n)| (s as f64 + 0.5, *n as f64))
                .collect()
        });
        if !over_time.is_empty() {
            out.push(Figure::Lines {
                title: format!("{}: {phase}, per second of virtual time", r.name),
                x_desc: "virtual seconds".into(),
                y_desc: "transactions (frames, files) per second".into(),
                series: over_time,
                log_x: false,
            });
        }
    }
    for phase in &phases {
        let claimed = |prefix: &str| {
            pairs.iter().any(|(p, m)| {
                p == phase
                    && m.ends_with("_us")
                    && (m.starts_with(prefix) || m.starts_with("response"))
            })
        };
        for (kind, wanted) in [("read", claimed("read")), ("write", claimed("write"))] {
            if !wanted {
                continue;
            }
            let series = lines(r, phase, |p| {
                if kind == "read" {
                    p.read_latency_cdf.clone()
                } else {
                    p.write_latency_cdf.clone()
                }
            });
            if !series.is_empty() {
                out.push(Figure::Lines {
                    title: format!("{}: {phase}, {kind} latency CDF", r.name),
                    x_desc: format!("{kind} latency (us, log scale)"),
                    y_desc: "fraction of requests".into(),
                    series,
                    log_x: true,
                });
            }
        }
    }
    out
}

/// Bars per variant for one metric of one phase.
fn bars(r: &ExperimentResult, phase: &str, metric: &str) -> Figure {
    let value = |v: &VariantResult, m: &str| v.metric(phase, m).unwrap_or(0.0);
    let copies: Vec<f64> = r
        .variants
        .iter()
        .map(|v| value(v, "gc_page_copies"))
        .collect();
    let line = (is_throughput(metric) && copies.iter().any(|c| *c > 0.0))
        .then(|| ("GC valid-page copies".to_string(), copies));
    Figure::Bars {
        title: format!("{}: {phase}, {metric}", r.name),
        y_desc: metric.to_string(),
        bars: r
            .variants
            .iter()
            .map(|v| (v.label.clone(), value(v, metric)))
            .collect(),
        line,
    }
}

/// One series per variant that has points for `phase`.
fn lines(
    r: &ExperimentResult,
    phase: &str,
    points: impl Fn(&PhaseResult) -> Vec<(f64, f64)>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    r.variants
        .iter()
        .filter_map(|v| {
            let p = v.phases.iter().find(|p| p.phase == phase)?;
            let pts = points(p);
            (!pts.is_empty()).then(|| (v.label.clone(), pts))
        })
        .collect()
}

/// The time series and distributions behind the line figures, one row per point.
fn series_csv(results: &[ExperimentResult]) -> String {
    let mut s = String::from("experiment,variant,phase,series,x,y\n");
    for r in results {
        for v in &r.variants {
            for p in &v.phases {
                let rows = [
                    (
                        "transactions_per_second",
                        p.transactions_per_second
                            .iter()
                            .enumerate()
                            .map(|(i, n)| (i as f64, *n as f64))
                            .collect::<Vec<_>>(),
                    ),
                    ("read_latency_cdf_us", p.read_latency_cdf.clone()),
                    ("write_latency_cdf_us", p.write_latency_cdf.clone()),
                ];
                for (name, points) in rows {
                    for (x, y) in points {
                        let _ = writeln!(s, "{},{},{},{name},{x},{y}", r.name, v.label, p.phase);
                    }
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_report_has_tables_plots_and_csv() {
        let r = crate::experiment::tests::hotcold_result();
        let dir = std::env::temp_dir().join(format!("ossd-report-{}", std::process::id()));
        let md = super::write(&dir, &[r]).unwrap();
        let text = std::fs::read_to_string(&md).unwrap();
        assert!(text.contains("| the paper says |") && text.contains("hotcold-0.png"));
        assert!(
            text.contains("ext4-like = blockfs"),
            "the labels are explained"
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<svg") && html.contains("<table>"));
        assert!(dir.join("hotcold-0.svg").exists() && dir.join("hotcold-0.png").exists());
        let csv = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
        assert_eq!(csv.lines().count(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
