//! The reproduction report: `report.md`, a self-contained `report.html` with the plots inline,
//! each plot as an SVG file, every metric as CSV and JSON.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::experiment::{ExperimentResult, VariantResult};

/// Writes everything into `dir`; returns the report's path.
pub fn write(dir: &Path, results: &[ExperimentResult]) -> Result<std::path::PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let put = |name: &str, body: &str| {
        std::fs::write(dir.join(name), body)
            .map_err(|e| format!("cannot write {}: {e}", dir.join(name).display()))
    };
    put(
        "results.json",
        &serde_json::to_string_pretty(results).map_err(|e| e.to_string())?,
    )?;
    put("metrics.csv", &csv(results))?;
    let mut md = String::from("# ossd reproduction report\n\n");
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>ossd reproduction report</title>\
         <style>body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:\
         collapse}td,th{border:1px solid #999;padding:2px 6px;text-align:right}</style>\
         <h1>ossd reproduction report</h1>",
    );
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
        let table = metric_table(&r.variants);
        md.push_str(&table);
        html.push_str(&md_table_to_html(&table));
        for (i, (phase, metric)) in plotted(r).into_iter().enumerate() {
            let svg = bar_chart(r, &phase, &metric)?;
            let file = format!("{}-{i}.svg", r.name);
            put(&file, &svg)?;
            let _ = writeln!(md, "![{phase} {metric}]({file})\n");
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
         gc_page_copies,index_pages_written,index_pages_read,metadata_pages_written,\
         write_amplification,write_p99_us,read_p99_us\n",
    );
    for r in results {
        for v in &r.variants {
            for p in &v.phases {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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

/// The (phase, metric) pairs to plot: each claim's, and throughput in the claims' phases.
fn plotted(r: &ExperimentResult) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (p, m) in &r.claimed {
        for k in [
            (p.clone(), m.clone()),
            (p.clone(), "throughput_mib_s".to_string()),
        ] {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// Bars per variant for one metric of one phase, as an SVG document.
fn bar_chart(r: &ExperimentResult, phase: &str, metric: &str) -> Result<String, String> {
    let values: Vec<(String, f64)> = r
        .variants
        .iter()
        .map(|v| (v.label.clone(), v.metric(phase, metric).unwrap_or(0.0)))
        .collect();
    let top = values.iter().map(|v| v.1).fold(0.0, f64::max).max(1e-9) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (560, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{}: {phase}, {metric}", r.name), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d((0..values.len()).into_segmented(), 0.0..top)
            .map_err(|e| e.to_string())?;
        let labels: Vec<String> = values.iter().map(|v| v.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc(metric)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(values.iter().enumerate().map(|(i, (_, y))| {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *y),
                    ],
                    Palette99::pick(i).filled(),
                );
                bar.set_margin(0, 0, 12, 12);
                bar
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}
