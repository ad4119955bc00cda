//! `watershed bench`: thread scaling of the ExprLib (thesis 5.2) and
//! Wasatch (5.3) scalability graphs. Writes `scalability.md` (a Markdown
//! table) and one PNG chart of speedup against threads per study.

use crate::case::CaseOptions;
use crate::cases::scalability::exprlib_graph;
use crate::error::{CaseError, CaseResult};
use crate::setup::execution_mode;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Instant;
use watershed_fields::Grid;
use watershed_io::plot::{Mark, Series, line_chart};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Where the table and charts go.
    pub output: PathBuf,
    /// Equations per graph.
    pub pdes: usize,
    /// Cells per side of each problem size.
    pub sizes: Vec<usize>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Timed steps per measurement (the median is reported).
    pub steps: usize,
}

impl BenchOptions {
    /// Refuses, naming the setting, what the study cannot run: no size,
    /// thread count or step, a size below 4 cells, no equation, or more
    /// memory than the machine has available (estimated from the fields
    /// per equation of the graphs themselves, built on a tiny grid).
    pub fn validate(&self) -> CaseResult<()> {
        let usage = |text: String| Err(CaseError::Usage(text));
        if self.pdes == 0 {
            return usage("--pdes 0: the graphs need at least one equation".into());
        }
        if self.sizes.is_empty() {
            return usage("--sizes is empty: give at least one grid size (cells per side)".into());
        }
        if let Some(n) = self.sizes.iter().find(|&&n| n < 4) {
            return usage(format!(
                "--sizes {n}: a grid needs at least 4 cells per side"
            ));
        }
        if self.threads.is_empty() {
            return usage("--threads is empty: give at least one thread count".into());
        }
        if let Some(t) = self.threads.iter().find(|&&t| t == 0) {
            return usage(format!("--threads {t}: a thread count must be at least 1"));
        }
        if self.steps == 0 {
            return usage("--steps 0: at least one timed step is needed".into());
        }
        let largest = self.sizes.iter().copied().max().unwrap_or(4);
        let needed = self.memory_estimate(largest)?;
        if let Some(available) = watershed_fields::host_memory::available_bytes()
            && needed > available
        {
            return usage(format!(
                "--pdes {} with --sizes {largest} needs about {:.1} GiB for the graph's fields, more than the {:.1} GiB this machine has available; lower --pdes or --sizes",
                self.pdes,
                needed as f64 / f64::from(1u32 << 30),
                available as f64 / f64::from(1u32 << 30)
            ));
        }
        Ok(())
    }

    /// Bytes of the fields of the largest study graph with `self.pdes`
    /// equations on `cells`^3 (one ghost layer): the fields per equation
    /// are counted in the graphs with one and two equations.
    fn memory_estimate(&self, cells: usize) -> CaseResult<u64> {
        let tiny = Grid::new([4; 3], [1.0; 3], [0.0; 3])?
            .with_periodic([true; 3])
            .whole_domain(1);
        let mut per_equation = 0usize;
        let mut shared = 0usize;
        for variant in ["diffusion", "independent", "coupled"] {
            let one = exprlib_graph(&tiny, 1, variant, 1e-6, true)?.fields().len();
            let two = exprlib_graph(&tiny, 2, variant, 1e-6, true)?.fields().len();
            per_equation = per_equation.max(two.saturating_sub(one));
            shared = shared.max(one.saturating_sub(two.saturating_sub(one)));
        }
        let points = (cells as u64 + 2).pow(3);
        let fields = (per_equation as u64)
            .saturating_mul(self.pdes as u64)
            .saturating_add(shared as u64);
        Ok(fields.saturating_mul(points).saturating_mul(8))
    }
}

/// One measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// "exprlib" or "wasatch".
    pub study: &'static str,
    /// Variant.
    pub variant: String,
    /// Cells per side.
    pub cells: usize,
    /// Threads.
    pub threads: usize,
    /// Median seconds per step.
    pub seconds_per_step: f64,
    /// Speedup over one thread.
    pub speedup: f64,
}

/// Untimed executions before each measurement (pools, caches, threads).
const WARM_UP: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the study; returns the rows and the files written.
pub fn scaling_study(options: &BenchOptions) -> CaseResult<(Vec<BenchRow>, Vec<PathBuf>)> {
    options.validate()?;
    std::fs::create_dir_all(&options.output).map_err(|e| {
        CaseError::Io(watershed_io::OutputError::output(
            options.output.clone(),
            format!("cannot create the directory: {e}"),
        ))
    })?;
    let mut rows: Vec<BenchRow> = Vec::new();
    for &cells in &options.sizes {
        let grid = Grid::new([cells; 3], [1.0; 3], [0.0; 3])?.with_periodic([true; 3]);
        for variant in ["diffusion", "independent", "coupled"] {
            let graph = exprlib_graph(&grid.whole_domain(1), options.pdes, variant, 1e-6, true)?;
            let mut base = f64::NAN;
            for &threads in &options.threads {
                let mode = execution_mode(threads);
                for _ in 0..WARM_UP {
                    graph.execute(mode)?;
                }
                let times = (0..options.steps)
                    .map(|_| graph.execute(mode).map(|r| r.elapsed.as_secs_f64()))
                    .collect::<Result<Vec<_>, _>>()?;
                let t = median(times);
                if base.is_nan() {
                    base = t;
                }
                rows.push(BenchRow {
                    study: "exprlib",
                    variant: variant.into(),
                    cells,
                    threads,
                    seconds_per_step: t,
                    speedup: base / t,
                });
            }
        }
        let mut base = f64::NAN;
        for &threads in &options.threads {
            let sets = vec![format!("pdes={}", options.pdes), format!("cells={cells}")];
            let case_options = CaseOptions {
                sets,
                threads,
                ..Default::default()
            };
            let mut prepared = (crate::cases::scalability::WASATCH_INFO.prepare)(&case_options)?;
            let sim = prepared.simulation.as_mut();
            for _ in 0..WARM_UP {
                sim.step(1e-6)?;
            }
            let times = (0..options.steps)
                .map(|_| {
                    let start = Instant::now();
                    sim.step(1e-6).map(|_| start.elapsed().as_secs_f64())
                })
                .collect::<Result<Vec<_>, _>>()?;
            let t = median(times);
            if base.is_nan() {
                base = t;
            }
            rows.push(BenchRow {
                study: "wasatch",
                variant: "coupled".into(),
                cells,
                threads,
                seconds_per_step: t,
                speedup: base / t,
            });
        }
    }
    let mut files = Vec::new();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| study | variant | cells | threads | ms/step | speedup vs 1st thread count |\n| --- | --- | --- | --- | --- | --- |"
    );
    for r in &rows {
        let _ = writeln!(
            table,
            "| {} | {} | {}^3 | {} | {:.2} | {:.2} |",
            r.study,
            r.variant,
            r.cells,
            r.threads,
            r.seconds_per_step * 1e3,
            r.speedup
        );
    }
    let path = options.output.join("scalability.md");
    watershed_io::files::write_text_file_atomically(&path, &table)?;
    files.push(path);
    for study in ["exprlib", "wasatch"] {
        let mut series = Vec::new();
        for &cells in &options.sizes {
            for variant in ["diffusion", "independent", "coupled"] {
                let points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.study == study && r.cells == cells && r.variant == variant)
                    .map(|r| (r.threads as f64, r.speedup))
                    .collect();
                if !points.is_empty() {
                    series.push(Series {
                        label: format!("{variant}, {cells}^3"),
                        points,
                        mark: Mark::Line,
                    });
                }
            }
        }
        let png = options.output.join(format!("{study}_speedup.png"));
        line_chart(
            &png,
            &format!("{study} scalability test, {} PDEs", options.pdes),
            "threads",
            "speedup",
            &series,
        )?;
        files.push(png);
    }
    Ok((rows, files))
}

/// The default thread counts: 1, 2, 4, ... up to the cores (and the cores).
pub fn default_thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1];
    while counts.last().is_some_and(|&t| t * 2 <= cores) {
        counts.push(counts[counts.len() - 1] * 2);
    }
    if counts.last() != Some(&cores) {
        counts.push(cores);
    }
    counts
}
