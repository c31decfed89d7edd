//! The reproduction report: `report.md`, a self-contained `report.html` with the plots inline,
//! each plot as SVG and PNG files, every metric as CSV (`metrics.csv`, and `series.csv` for
//! the time series and latency distributions) and JSON (`results.json`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::experiment::{num, ExperimentResult, Outcome, PhaseResult, VariantResult, Verdict};
use crate::plot::{Figure, PaperItem, PlotError};

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

/// Verdict counts over a set of claims: direction and magnitude apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Claims judged.
    pub claims: usize,
    /// Direction: agrees at every seed.
    pub direction_agrees: usize,
    /// Direction: disagrees at every seed.
    pub direction_disagrees: usize,
    /// Claims whose direction or magnitude verdict changes with the seed.
    pub unstable: usize,
    /// Claims a variant failed to measure.
    pub not_measured: usize,
    /// Claims with a paper number.
    pub magnitude_claims: usize,
    /// Of those, agreeing in magnitude at every seed.
    pub magnitude_agrees: usize,
    /// Of those, disagreeing in magnitude at every seed.
    pub magnitude_disagrees: usize,
}

impl Counts {
    /// The counts of `verdicts`.
    pub fn of<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> Counts {
        let mut c = Counts::default();
        for v in verdicts {
            c.claims += 1;
            match v.direction {
                Outcome::Agrees => c.direction_agrees += 1,
                Outcome::Disagrees => c.direction_disagrees += 1,
                Outcome::Unstable | Outcome::NotMeasured => {}
            }
            if v.direction == Outcome::NotMeasured {
                c.not_measured += 1;
            } else if v.direction == Outcome::Unstable || v.magnitude == Some(Outcome::Unstable) {
                c.unstable += 1;
            }
            if let Some(m) = v.magnitude {
                c.magnitude_claims += 1;
                match m {
                    Outcome::Agrees => c.magnitude_agrees += 1,
                    Outcome::Disagrees => c.magnitude_disagrees += 1,
                    Outcome::Unstable | Outcome::NotMeasured => {}
                }
            }
        }
        c
    }

    /// One line: "direction agrees 120 of 153, magnitude agrees 9 of 40, unstable 3".
    pub fn sentence(&self) -> String {
        let mut s = format!(
            "direction agrees {} of {} (disagrees {}), magnitude agrees {} of the {} with a paper number (disagrees {}), unstable {}",
            self.direction_agrees,
            self.claims,
            self.direction_disagrees,
            self.magnitude_agrees,
            self.magnitude_claims,
            self.magnitude_disagrees,
            self.unstable
        );
        if self.not_measured > 0 {
            let _ = write!(s, ", not measured {}", self.not_measured);
        }
        s
    }
}

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
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>ossd reproduction report</title>\
         <style>body{font-family:sans-serif;max-width:72em;margin:auto;padding:0 1em}\
         table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;\
         padding:2px 6px;text-align:right;vertical-align:top}td:first-child,th:first-child\
         {text-align:left}.ok{color:#070}.no{color:#b00}.un{color:#a60}svg{max-width:100%;\
         height:auto}</style><h1>ossd reproduction report</h1>",
    );
    summary(results, &mut md, &mut html);
    md.push_str(LABELS);
    let _ = write!(html, "<p>{}</p>", esc(LABELS.trim()));
    for r in results {
        let c = Counts::of(&r.verdicts);
        let _ = writeln!(
            md,
            "<a id=\"{}\"></a>\n## {} ({})\n\n{} on `{}`, scale {}, seeds {}: {}.\n",
            r.name,
            r.title,
            r.source,
            r.name,
            r.device,
            r.scale,
            seeds(r),
            c.sentence()
        );
        let _ = write!(
            html,
            "<h2 id=\"{}\">{} ({})</h2><p>{} on <code>{}</code>, scale {}, seeds {}: {}.</p>",
            esc(&r.name),
            esc(&r.title),
            esc(&r.source),
            esc(&r.name),
            esc(&r.device),
            r.scale,
            seeds(r),
            esc(&c.sentence())
        );
        let verdicts = verdict_table(r);
        md.push_str(&verdicts);
        html.push_str(&md_table_to_html(&verdicts));
        for v in r.verdicts.iter() {
            if let Some(p) = v.paper.as_ref() {
                let _ = writeln!(
                    md,
                    "*The paper's number* for \"{}\": {}; tolerance: {}\n",
                    v.claim,
                    p.describe(),
                    p.tolerance_why
                );
                let _ = write!(
                    html,
                    "<p><i>The paper's number</i> for \"{}\": {}; tolerance: {}</p>",
                    esc(&v.claim),
                    esc(&p.describe()),
                    esc(&p.tolerance_why)
                );
            }
        }
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
        for (i, (figure, caption)) in figures(r).iter().enumerate() {
            let svg = figure.svg()?;
            put(&format!("{}-{i}.svg", r.name), &svg)?;
            let png = format!("{}-{i}.png", r.name);
            figure.png(&dir.join(&png))?;
            let _ = writeln!(md, "![{}]({png})\n", figure.title());
            html.push_str(&svg);
            if !caption.is_empty() {
                let _ = writeln!(md, "{caption}\n");
                let _ = write!(html, "<p>{}</p>", esc(caption));
            }
        }
        let table = metric_table(&r.variants);
        md.push_str(&table);
        html.push_str(&md_table_to_html(&table));
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

fn seeds(r: &ExperimentResult) -> String {
    r.seeds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary on top: the overall counts, then one row per experiment with its counts and
/// a link to its section.
fn summary(results: &[ExperimentResult], md: &mut String, html: &mut String) {
    let all = Counts::of(results.iter().flat_map(|r| &r.verdicts));
    let _ = writeln!(
        md,
        "**{}.** A claim agrees in direction when the variant the paper finds better is better \
         (or alike, where the paper says alike) at every seed, and in magnitude when the \
         quantity the paper states lies within the stated tolerance at every seed; a verdict \
         that changes with the seed is unstable and counts as neither.\n",
        all.sentence()
    );
    let _ = write!(
        html,
        "<p><b>{}.</b> A claim agrees in direction when the variant the paper finds better is \
         better (or alike, where the paper says alike) at every seed, and in magnitude when the \
         quantity the paper states lies within the stated tolerance at every seed; a verdict \
         that changes with the seed is unstable and counts as neither.</p>",
        esc(&all.sentence())
    );
    let mut t = String::from(
        "| experiment | paper | claims | direction agrees | magnitude agrees | unstable |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    let mut h = String::from(
        "<table><tr><th>experiment</th><th>paper</th><th>claims</th><th>direction agrees</th>\
         <th>magnitude agrees</th><th>unstable</th></tr>",
    );
    for r in results {
        let c = Counts::of(&r.verdicts);
        let mag = if c.magnitude_claims == 0 {
            "-".to_string()
        } else {
            format!("{} of {}", c.magnitude_agrees, c.magnitude_claims)
        };
        let _ = writeln!(
            t,
            "| [{}](#{}) | {} | {} | {} | {mag} | {} |",
            r.name, r.name, r.source, c.claims, c.direction_agrees, c.unstable
        );
        let class = |good: bool| if good { "ok" } else { "no" };
        let _ = write!(
            h,
            "<tr><td><a href=\"#{n}\">{n}</a></td><td>{}</td><td>{}</td>\
             <td class=\"{}\">{}</td><td class=\"{}\">{}</td><td class=\"{}\">{}</td></tr>",
            esc(&r.source),
            c.claims,
            class(c.direction_agrees == c.claims),
            c.direction_agrees,
            class(c.magnitude_agrees == c.magnitude_claims),
            esc(&mag),
            if c.unstable == 0 { "ok" } else { "un" },
            c.unstable,
            n = esc(&r.name),
        );
    }
    t.push('\n');
    h.push_str("</table>");
    md.push_str(&t);
    html.push_str(&h);
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
    let mut s = String::from(
        "| the paper says | ossd measured | direction | magnitude |\n|---|---|---|---|\n",
    );
    let word = |o: Outcome| match o {
        Outcome::Agrees => "agrees".to_string(),
        o => format!("**{}**", o.label()),
    };
    for v in &r.verdicts {
        let m = v.magnitude.map_or("-".to_string(), word);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {m} |",
            cell(&v.claim),
            cell(&v.measured),
            word(v.direction)
        );
    }
    s.push('\n');
    s
}

fn cell(s: &str) -> String {
    s.replace('|', "/").replace('\n', " ")
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
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                v.label,
                p.phase,
                num(p.files.virtual_seconds),
                num(p.files.throughput_mib_s),
                num(p.files.transactions_per_s),
                num(p.gc_page_copies as f64),
                num(p.flash_pages_programmed as f64),
                num(p.flash_blocks_erased as f64),
                num(p.index_pages_written as f64),
                num(p.metadata_pages_written as f64),
                num(p.write_amplification),
                num(p.files.write_latency.p99_us)
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

/// A metric's axis label, with its unit.
pub fn axis(metric: &str) -> String {
    let (what, unit) = match metric {
        "throughput_mib_s" => ("throughput", "MiB/s"),
        "write_mib_s" => ("write throughput", "MiB/s"),
        "read_mib_s" => ("read throughput", "MiB/s"),
        "transactions_per_s" => ("transactions", "per s"),
        "min_transactions_per_s" => ("fewest transactions in a second", "per s"),
        "virtual_seconds" => ("run time", "virtual s"),
        "gc_page_copies" => ("GC valid-unit copies", "units"),
        "gc_bytes_copied" => ("GC bytes copied", "bytes"),
        "cleaning_seconds" => ("cleaning time", "virtual s"),
        "flash_pages_programmed" => ("flash pages programmed", "pages"),
        "flash_pages_read" => ("flash pages read", "pages"),
        "flash_page_ios" => ("flash pages read and programmed", "pages"),
        "flash_blocks_erased" => ("blocks erased", "blocks"),
        "index_pages_written" => ("index units written", "units"),
        "metadata_pages_written" => ("metadata units written", "units"),
        "write_amplification" => ("write amplification", "flash bytes / host bytes"),
        "pages_moved_per_erased_block" => ("pages moved per erased block", "pages"),
        m if m.ends_with("_us") => {
            return format!("{} (µs)", m.trim_end_matches("_us").replace('_', " "))
        }
        m => return m.replace('_', " "),
    };
    format!("{what} ({unit})")
}

/// The figures of one experiment, each with a caption (empty when it needs none): grouped bars
/// per claimed (phase, metric) and for throughput in the claims' phases (GC copies as marks
/// when GC ran), ours beside the paper's numbers where the claims state them, transactions per
/// second over time where the workload counts them, and latency CDFs where a claim is about
/// latency.
fn figures(r: &ExperimentResult) -> Vec<(Figure, String)> {
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
    let mut out: Vec<(Figure, String)> = pairs
        .iter()
        .map(|(p, m)| (bars(r, p, m), String::new()))
        .collect();
    out.extend(paper_figures(r));
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
            out.push((
                Figure::Lines {
                    title: format!("{}: {phase}, per second of virtual time", r.name),
                    x_desc: "virtual time (s)".into(),
                    y_desc: "transactions (frames, files) per second".into(),
                    series: over_time,
                    log_x: false,
                },
                String::new(),
            ));
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
                out.push((
                    Figure::Lines {
                        title: format!("{}: {phase}, {kind} latency CDF", r.name),
                        x_desc: format!("{kind} latency (µs, log scale)"),
                        y_desc: "fraction of requests".into(),
                        series,
                        log_x: true,
                    },
                    String::new(),
                ));
            }
        }
    }
    out
}

/// Ours beside the paper's numbers: one figure per (quantity, metric) the claims state numbers
/// for, claims numbered under the bars and named in the caption.
fn paper_figures(r: &ExperimentResult) -> Vec<(Figure, String)> {
    let mut kinds: Vec<(crate::experiment::Quantity, String)> = Vec::new();
    for (v, (_, metric)) in r.verdicts.iter().zip(&r.claimed) {
        if let Some(p) = &v.paper {
            let k = (p.quantity, metric.clone());
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    kinds
        .into_iter()
        .map(|(q, metric)| {
            let mut items = Vec::new();
            let mut caption = Vec::new();
            for (v, (_, m)) in r.verdicts.iter().zip(&r.claimed) {
                let Some(p) = v.paper.as_ref().filter(|p| p.quantity == q && *m == metric) else {
                    continue;
                };
                let ours: Vec<f64> = v.seeds.iter().filter_map(|s| s.quantity).collect();
                let label = (items.len() + 1).to_string();
                caption.push(format!("{label}: {}", v.claim));
                items.push(PaperItem {
                    label,
                    ours,
                    paper: p.bounds(),
                    tolerance: p.tolerance,
                });
            }
            let y_desc = match q {
                crate::experiment::Quantity::GainPercent => {
                    format!(
                        "gain in {} (%)",
                        axis(&metric).split(" (").next().unwrap_or("")
                    )
                }
                crate::experiment::Quantity::Difference => {
                    format!("difference in {}", axis(&metric))
                }
                _ => axis(&metric),
            };
            (
                Figure::Paper {
                    title: format!("{}: ossd beside the paper's numbers", r.name),
                    y_desc,
                    items,
                },
                format!("Claims: {}.", caption.join("; ")),
            )
        })
        .collect()
}

/// A variant label as (series, group): "OFS 50M/4t" is series OFS in group 50M/4t, "SA(4)"
/// is SA in group 4, "p-OFTL(2)+GROUP" is p-OFTL+GROUP in group 2, a single word is its own
/// series in the unnamed group.
fn series_and_group(label: &str) -> (String, String) {
    if let (Some(open), Some(close)) = (label.find('('), label.find(')')) {
        let inner = &label[open + 1..close.max(open + 1)];
        if close > open && !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit()) {
            return (
                format!("{}{}", &label[..open], &label[close + 1..]),
                inner.to_string(),
            );
        }
    }
    match label.split_once(' ') {
        Some((series, group)) => (series.to_string(), group.to_string()),
        None => (label.to_string(), String::new()),
    }
}

/// The variants as a grid of groups and series when their labels form one (every pair
/// distinct, at least two of each, the grid at most half empty); otherwise one group with a
/// series per variant. Returns (groups, series, (series, group) of each variant).
fn grid(labels: &[String]) -> (Vec<String>, Vec<String>, Vec<(usize, usize)>) {
    let split: Vec<(String, String)> = labels.iter().map(|l| series_and_group(l)).collect();
    let mut groups: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for (s, g) in &split {
        if !groups.contains(g) {
            groups.push(g.clone());
        }
        if !series.contains(s) {
            series.push(s.clone());
        }
    }
    let mut distinct = split.clone();
    distinct.sort();
    distinct.dedup();
    let fits = groups.len() >= 2
        && series.len() >= 2
        && distinct.len() == split.len()
        && groups.len() * series.len() * 2 <= labels.len() * 3;
    if !fits {
        return (
            vec![String::new()],
            labels.to_vec(),
            (0..labels.len()).map(|i| (i, 0)).collect(),
        );
    }
    let at = split
        .iter()
        .map(|(s, g)| {
            (
                series.iter().position(|x| x == s).unwrap_or(0),
                groups.iter().position(|x| x == g).unwrap_or(0),
            )
        })
        .collect();
    // The unnamed group holds the experiment's unchanged workload.
    for g in groups.iter_mut().filter(|g| g.is_empty()) {
        *g = "base".into();
    }
    (groups, series, at)
}

/// Bars for one metric of one phase, grouped by configuration when the labels form a grid.
fn bars(r: &ExperimentResult, phase: &str, metric: &str) -> Figure {
    let labels: Vec<String> = r.variants.iter().map(|v| v.label.clone()).collect();
    let (groups, series, at) = grid(&labels);
    let shape = || vec![vec![None; groups.len()]; series.len()];
    let (mut values, mut copies) = (shape(), shape());
    for (v, &(si, gi)) in r.variants.iter().zip(&at) {
        values[si][gi] = Some(v.metric(phase, metric).unwrap_or(0.0));
        copies[si][gi] = v.metric(phase, "gc_page_copies");
    }
    let any_copies = copies.iter().flatten().flatten().any(|c| *c > 0.0);
    Figure::Bars {
        title: format!("{}: {phase}, {}", r.name, axis(metric)),
        y_desc: axis(metric),
        groups,
        series,
        values,
        marks: (is_throughput(metric) && any_copies).then(|| (axis("gc_page_copies"), copies)),
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

    /// The first Chromium on PATH (Debian's `chromium`), if any.
    fn chromium() -> Option<&'static str> {
        ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find(|c| {
                std::process::Command::new(c)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
    }

    /// A reader's check: a headless browser loads report.html, builds the summary table with
    /// its link into the experiment's section and the inline figures, and paints a page that
    /// is not blank. Skips, loudly, without Chromium (`.ci/run` installs it).
    #[test]
    fn a_headless_browser_renders_the_report() {
        let Some(browser) = chromium() else {
            eprintln!(
                "SKIPPED a_headless_browser_renders_the_report: no chromium on PATH \
                 (apt-get install -y chromium); report.html was not rendered"
            );
            return;
        };
        let r = crate::experiment::tests::hotcold_result();
        let dir = std::env::temp_dir().join(format!("ossd-report-browser-{}", std::process::id()));
        super::write(&dir, &[r]).unwrap();
        let url = format!("file://{}", dir.join("report.html").display());
        let headless = |extra: &[&str]| {
            let out = std::process::Command::new(browser)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                ])
                .args(extra)
                .arg(&url)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let dom = headless(&["--dump-dom"]);
        for part in [
            "<th>direction agrees</th>",
            "href=\"#hotcold\"",
            "id=\"hotcold\"",
            "<svg",
            "Hot/cold files",
        ] {
            assert!(dom.contains(part), "the rendered page has no {part}: {dom}");
        }
        let shot = dir.join("page.png");
        headless(&[
            "--window-size=1200,1600",
            &format!("--screenshot={}", shot.display()),
        ]);
        let png = std::fs::read(&shot).unwrap();
        // A blank page of that size compresses to a few KiB; tables, text and plots do not.
        assert!(
            png.len() > 20_000,
            "the page looks blank: {} bytes",
            png.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
