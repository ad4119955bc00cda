//! The run loop every case (and a user's own program) uses: a
//! [`Simulation`] advanced step by step to a stop rule, with dumps,
//! checkpoints, progress, a per-step observer, a whole-run trace and an
//! end-of-run [`RunReport`].
//!
//! Design note. The loop owns the choice of `dt` (the simulation proposes
//! one, the loop shortens the last step to land on the end time) and
//! nothing else: all state that affects the next step lives in the
//! simulation and is in its checkpoint, so a run restarted from step k takes
//! exactly the steps an uninterrupted run takes, bit for bit.

use crate::checkpoint::{
    CheckpointHeader, RankCheckpoint, read_checkpoint, write_checkpoint, write_rank_checkpoint,
};
use crate::collective::{any_signal, gather_dump_reports, in_memory, is_follower, leader_decides};
use crate::error::{CaseError, CaseResult};
use crate::progress::{Progress, ProgressMode, StepInfo};
use crate::solver_state::{dump_own_flow_patches, load_own_flow_patches, save_own_flow_patches};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_exprgraph::{ExpressionGraph, ExpressionTiming, RecordedEvent};
use watershed_fields::ranks::RankLink;
use watershed_fields::{GpuCalls, Grid, MemoryPool, PatchLayout};
use watershed_io::csv::{SeriesFile, SeriesLayout};
use watershed_io::dumps::{DumpSeries, DumpedField};
use watershed_io::rank_dumps::write_rank_dump;
use watershed_solvers::{IncompressibleFlow, PatchedTransport, ProjectionTotals};

/// A check a case makes at the end of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseCheck {
    /// What is checked, e.g. "centreline velocities vs Ghia et al. (1982)".
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// The figure and its threshold, e.g. "max |u - u_Ghia| = 0.012 <= 0.02".
    pub figure: String,
    /// Files the case wrote (PNG, CSV).
    pub files: Vec<PathBuf>,
}

/// Something the run loop can advance: a case, or a user's own program.
pub trait Simulation {
    /// The case's name (names the output files).
    fn case(&self) -> &str;
    /// The grid (for the XDMF).
    fn grid(&self) -> &Grid;
    /// Simulated time.
    fn time(&self) -> f64;
    /// Steps taken.
    fn steps(&self) -> u64;
    /// Cell updates per step (cells times equations), for throughput.
    fn cell_updates_per_step(&self) -> u64;
    /// The `dt` the next step should take (before the end-time clip).
    fn next_dt(&self) -> CaseResult<f64>;
    /// Advances one step of `dt`.
    fn step(&mut self, dt: f64) -> CaseResult<()>;
    /// A reason to stop before the end (e.g. "steady state reached").
    fn stop_reason(&self) -> Option<String> {
        None
    }
    /// A short figure for the progress line.
    fn status(&self) -> String {
        String::new()
    }
    /// Writes the fields to show (interiors) into a dump.
    fn dump(&self, group: &hdf5::Group) -> CaseResult<Vec<DumpedField>>;
    /// The incompressible flow a flow case advances (`None` by default):
    /// with it the defaults below write and read a decomposed flow's
    /// files per rank.
    fn flow(&self) -> Option<&IncompressibleFlow> {
        None
    }
    /// [`Self::flow`], to restore it.
    fn flow_mut(&mut self) -> Option<&mut IncompressibleFlow> {
        None
    }
    /// For a dump per rank ([`OutputFiles::PerRank`]): writes the fields
    /// [`Self::dump`] shows, of each patch this rank owns, into a group of
    /// its own (`watershed_io::rank_dumps::create_patch_group`) of `root`,
    /// and returns what each patch holds. Only a case that holds its fields
    /// on patches can; the default serves a [`Self::flow`], and is an
    /// error saying so for the others.
    fn dump_own_patches(&self, root: &hdf5::Group) -> CaseResult<Vec<DumpedField>> {
        match self.flow() {
            Some(flow) => dump_own_flow_patches(flow, self.case(), root),
            None => Err(per_rank_refused(self.case())),
        }
    }
    /// For a checkpoint per rank ([`OutputFiles::PerRank`]): saves the
    /// state of each patch this rank owns (its fields with their ghosts)
    /// into a group of its own of `root`, this rank's file. The default
    /// serves a [`Self::flow`], and is an error saying the case cannot
    /// for the others.
    fn save_own_patches(&self, root: &hdf5::Group) -> CaseResult<()> {
        match self.flow() {
            Some(flow) => save_own_flow_patches(flow, self.case(), root),
            None => Err(per_rank_refused(self.case())),
        }
    }
    /// For a checkpoint per rank, on rank 0: the state that is not on
    /// patches (a conserved quantity's initial value, say), into the
    /// checkpoint file itself. Nothing by default.
    fn save_shared_state(&self, group: &hdf5::Group) -> CaseResult<()> {
        let _ = group;
        Ok(())
    }
    /// Restores what [`Self::save_shared_state`] saved. Nothing by
    /// default.
    fn load_shared_state(&mut self, group: &hdf5::Group) -> CaseResult<()> {
        let _ = group;
        Ok(())
    }
    /// Restores, on every rank, what [`Self::save_own_patches`] saved of
    /// the patches this rank owns (from whichever rank's file holds each)
    /// and [`Self::save_shared_state`] into `shared`, and the clock. The
    /// default serves a [`Self::flow`] (every rank reads every patch into
    /// the whole flow it holds), and is an error for the others.
    fn load_own_patches(
        &mut self,
        patches: &RankCheckpoint,
        shared: &hdf5::Group,
        time: f64,
        step: u64,
    ) -> CaseResult<()> {
        let case = self.case().to_string();
        let Some(flow) = self.flow_mut() else {
            return Err(per_rank_refused(&case));
        };
        load_own_flow_patches(flow, &case, patches, time, step)?;
        self.load_shared_state(shared)
    }
    /// Writes the full persistent state into a checkpoint.
    fn save_state(&self, group: &hdf5::Group) -> CaseResult<()>;
    /// Restores the state written by [`Self::save_state`] and the clock.
    fn load_state(&mut self, group: &hdf5::Group, time: f64, step: u64) -> CaseResult<()>;
    /// The expression graphs, named (for timings and traces).
    fn graphs(&self) -> Vec<(String, &ExpressionGraph)>;
    /// A decomposed case's transport on patches (`None`: the case runs on
    /// one patch of its own). The exchange time and the trace's exchange
    /// track come from it.
    fn patched(&self) -> Option<&PatchedTransport> {
        None
    }
    /// The layout of the patches a decomposed case runs on (`None`: one
    /// patch of its own); what files per rank ([`OutputFiles::PerRank`])
    /// split the domain by. A transport case's is its
    /// [`Self::patched`]'s, a flow's its [`Self::flow`]'s.
    fn patch_layout(&self) -> Option<&PatchLayout> {
        match self.patched() {
            Some(transport) => Some(transport.layout()),
            None => self.flow().and_then(IncompressibleFlow::patch_layout),
        }
    }
    /// The wall time this rank spent exchanging patch seams and combining
    /// reductions across patches (`None`: one patch, nothing exchanged).
    fn exchange_time(&self) -> Option<Duration> {
        self.patched()
            .filter(|t| t.layout().len() > 1)
            .map(PatchedTransport::exchange_time)
    }
    /// The interior work this rank ran while its exchanges were in
    /// flight (`None`: one patch, or not overlapped).
    fn interior_during_exchanges(&self) -> Option<Duration> {
        self.patched()
            .filter(|t| t.overlaps())
            .map(PatchedTransport::interior_during_exchanges)
    }
    /// A decomposed flow's Poisson solve on patches: the wall time this
    /// rank spent in it (outside the graphs), the levels in all and on
    /// patches (`None`: no such solve).
    fn poisson_on_patches(&self) -> Option<(Duration, usize, usize)> {
        None
    }
    /// Starts recording the case's timed work outside its graphs (a
    /// decomposed case's exchanges, a decomposed flow's Poisson solves)
    /// from `epoch`, for the trace.
    fn start_recording(&self, epoch: Instant) {
        if let Some(transport) = self.patched() {
            transport.start_recording(epoch);
        }
        if let Some(flow) = self.flow() {
            flow.start_recording(epoch);
        }
    }
    /// What [`Self::start_recording`] recorded since.
    fn take_recording(&self) -> Vec<RecordedEvent> {
        let mut events = self
            .patched()
            .map(PatchedTransport::take_recording)
            .unwrap_or_default();
        if let Some(flow) = self.flow() {
            events.extend(flow.take_recording());
        }
        events
    }
    /// The case's time series, written into the output directory as the
    /// run goes (`None`: the case has none): its file name and header.
    fn series(&self) -> Option<SeriesLayout> {
        None
    }
    /// The complete rows of the series from row `from` on (a row is
    /// complete when no later step changes it).
    fn series_rows(&self, _from: usize) -> Vec<Vec<f64>> {
        Vec::new()
    }
    /// Ends the run: writes the case's plots and tables into `output` (when
    /// given) and returns its check.
    fn finish(&mut self, output: Option<&Path>) -> CaseResult<CaseCheck>;
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this step (counted from the start of the run, so a restart
    /// continues to the same step).
    Steps(u64),
    /// At this simulated time.
    EndTime(f64),
}

/// When fields are dumped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DumpSchedule {
    /// Only at the start and the end.
    StartAndEnd,
    /// Every N steps (and at the start and the end).
    EverySteps(u64),
    /// Each time the simulated time passes a multiple of T (and at the
    /// start and the end).
    Interval(f64),
}

/// Whether dump times every `interval` can be told apart from `time` on:
/// `interval` a normal number and `time / interval` below 2^52.
pub fn interval_countable(time: f64, interval: f64) -> bool {
    let count = time / interval;
    interval.is_normal() && count.is_finite() && count < 2f64.powi(52)
}

impl DumpSchedule {
    /// `start-and-end`, `every N` or `interval T` (stored in checkpoints).
    pub fn to_text(self) -> String {
        match self {
            DumpSchedule::StartAndEnd => "start-and-end".into(),
            DumpSchedule::EverySteps(n) => format!("every {n}"),
            DumpSchedule::Interval(t) => format!("interval {t:e}"),
        }
    }

    /// The schedule [`Self::to_text`] wrote; `None` for anything else.
    pub fn from_text(text: &str) -> Option<Self> {
        match text.split_once(' ') {
            None if text == "start-and-end" => Some(DumpSchedule::StartAndEnd),
            Some(("every", n)) => n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .map(DumpSchedule::EverySteps),
            Some(("interval", t)) => t
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite() && *t > 0.0)
                .map(DumpSchedule::Interval),
            _ => None,
        }
    }
}

/// How a run is driven.
#[derive(Debug, Clone)]
pub struct RunControl {
    /// When to stop.
    pub stop: Stop,
    /// When to dump (ignored without an output manager).
    pub dumps: DumpSchedule,
    /// Checkpoint every N steps (into the output directory).
    pub checkpoint_every: Option<u64>,
    /// The configuration text stored in checkpoints.
    pub config_text: String,
    /// Progress display.
    pub progress: ProgressMode,
    /// Record every node execution of the run for a Chrome trace.
    pub record_trace: bool,
    /// The ranks of a decomposed run (`None`: one process). Every rank
    /// runs the driver; only rank 0 is given an output and writes files,
    /// the others take part in each dump and checkpoint in memory
    /// ([`crate::collective`]), or write their own patches' dump files
    /// ([`OutputFiles::PerRank`]).
    pub ranks: Option<Rc<dyn RankLink>>,
    /// Who writes the dumps.
    pub output_files: OutputFiles,
}

impl RunControl {
    /// A quiet run in one process to `stop`, storing `config_text` in its
    /// checkpoints: dumps at the start and the end, no checkpoints, no
    /// trace, whole files. Set other fields with struct update syntax, so
    /// that a field added later keeps its default instead of breaking the
    /// literal:
    ///
    /// ```
    /// use watershed_cases::driver::{DumpSchedule, RunControl, Stop};
    /// let control = RunControl {
    ///     dumps: DumpSchedule::EverySteps(10),
    ///     checkpoint_every: Some(50),
    ///     ..RunControl::new(Stop::Steps(100), "")
    /// };
    /// assert!(control.ranks.is_none() && !control.record_trace);
    /// ```
    pub fn new(stop: Stop, config_text: &str) -> Self {
        RunControl {
            stop,
            dumps: DumpSchedule::StartAndEnd,
            checkpoint_every: None,
            config_text: config_text.to_string(),
            progress: ProgressMode::Quiet,
            record_trace: false,
            ranks: None,
            output_files: OutputFiles::Whole,
        }
    }
}

/// Who writes a run's dumps and checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OutputFiles {
    /// Rank 0 gathers every field over the whole domain and writes one
    /// file per dump and per checkpoint.
    #[default]
    Whole,
    /// Every rank writes the patches it owns into files of its own in
    /// `directory` (the output folder rank 0 holds): rank 0 records each
    /// dump as one dataset of patches in the XDMF
    /// (`watershed_io::rank_dumps`), and writes each checkpoint's own file
    /// last, naming the rank file that holds each patch
    /// ([`crate::checkpoint`]). No rank holds the whole domain. Needs a
    /// case on patches ([`Simulation::patched`]).
    PerRank {
        /// The output folder, the same on every rank.
        directory: std::path::PathBuf,
    },
}

/// The error of files per rank asked of a case that cannot write them.
pub fn per_rank_refused(case: &str) -> CaseError {
    CaseError::per_rank_refused(case)
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Steps taken in this run (not counting those before a restart).
    pub steps_run: u64,
    /// Wall time of the stepping loop.
    pub wall: Duration,
    /// Of it, the run's first step (which also compiles the kernels and
    /// places the nodes); zero when no step ran.
    pub first_step: Duration,
    /// Cell updates per step.
    pub cell_updates_per_step: u64,
    /// Why the run stopped.
    pub stop_reason: String,
    /// Final time and step.
    pub time: f64,
    /// Final step.
    pub step: u64,
    /// The five slowest expressions over the whole run (graph / name).
    pub slowest: Vec<ExpressionTiming>,
    /// What each of the case's graphs is made of.
    pub graphs: Vec<GraphCensus>,
    /// Time spent in graph nodes over the whole run (all graphs, summed
    /// over threads).
    pub graph_time: Duration,
    /// Of a decomposed case, the time this rank spent in exchanges and
    /// reductions across patches during the stepping (waits for other
    /// ranks included).
    pub exchange_time: Option<Duration>,
    /// Of a decomposed case whose exchanges overlap interior work: the
    /// interior work this rank ran while they were in flight (not counted
    /// in `exchange_time`).
    pub interior_during_exchanges: Option<Duration>,
    /// Of a run on several ranks: the time this rank was blocked waiting
    /// for the others during the stepping (in the link: swaps' final waits
    /// and gathers; [`RankLink::waited`]). The rest of `exchange_time` is
    /// this rank's own work on its messages.
    pub waited_for_ranks: Option<Duration>,
    /// Of a flow whose Poisson solve runs on patches: the time this rank
    /// spent in it during the stepping (outside the graphs), and the
    /// solver's levels in all and on patches.
    pub poisson_on_patches: Option<(Duration, usize, usize)>,
    /// Of a flow: its Poisson solves during the stepping (their count and
    /// iterations), with the largest final relative residual since the
    /// flow was built.
    pub poisson_solves: Option<ProjectionTotals>,
    /// Peak resident memory of the process (bytes), when the OS says.
    pub cpu_memory_high_water: Option<u64>,
    /// Per GPU whose memory the run used (ordinal, bytes): the most the
    /// process-wide pool of that GPU held from the driver at once (fields,
    /// scratch and cached blocks; plus the peak of its stream-ordered pool
    /// when scratch memory was allocated in stream order). Empty when no
    /// GPU memory was used.
    pub gpu_memory_high_water: Vec<(usize, usize)>,
    /// The calls the run's steps made to GPUs (launches, copies, event
    /// records and waits, host waits...), summed over its steps; all zero
    /// for a run on the CPU. Dumps and checkpoints are not counted.
    pub gpu_calls: GpuCalls,
    /// The same, of the last step alone (the steady state: the first
    /// step also compiles and places).
    pub gpu_calls_last_step: GpuCalls,
    /// Recorded node executions (with `record_trace`).
    pub trace: Vec<RecordedEvent>,
    /// Events that did not fit in the recording.
    pub trace_dropped: u64,
    /// The last checkpoint written.
    pub last_checkpoint: Option<PathBuf>,
    /// The signal that ended the run after its last step
    /// ([`crate::interrupt`]), if one did.
    pub interrupted: Option<i32>,
}

/// The make-up of one graph: what could run on a GPU and how many kernels
/// an execution launches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphCensus {
    /// The case's name for the graph.
    pub name: String,
    /// Nodes after fusion (modifiers included).
    pub nodes: usize,
    /// Native (hand-written, CPU-only) nodes among them.
    pub native: usize,
    /// Language kernels per execution (a boundary modifier runs one per
    /// side and ghost layer).
    pub kernels: usize,
    /// The mode an adaptive graph kept after timing one thread against
    /// several (`None`: not adaptive, or still trying).
    pub adaptive_choice: Option<watershed_exprgraph::ExecutionMode>,
}

impl RunReport {
    /// The steps and wall time of the stepping itself: every step but the
    /// first (which compiles kernels and places nodes) when there are
    /// several, else the one step.
    fn stepping(&self) -> (u64, f64) {
        if self.steps_run > 1 {
            (
                self.steps_run - 1,
                self.wall.saturating_sub(self.first_step).as_secs_f64(),
            )
        } else {
            (self.steps_run, self.wall.as_secs_f64())
        }
    }

    /// Seconds per step of the stepping (the first step, with its kernel
    /// compilation, left out when there are others).
    pub fn seconds_per_step(&self) -> f64 {
        match self.stepping() {
            (0, _) => 0.0,
            (steps, seconds) => seconds / steps as f64,
        }
    }

    /// Cell updates per second of the stepping (as [`Self::seconds_per_step`]).
    pub fn cell_updates_per_second(&self) -> f64 {
        let (steps, seconds) = self.stepping();
        if seconds <= 0.0 {
            0.0
        } else {
            self.cell_updates_per_step as f64 * steps as f64 / seconds
        }
    }
}

/// Peak resident set of this process (Linux `VmHWM`), in bytes.
pub fn process_memory_high_water() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Restores `sim` from the checkpoint at `path` (refusing one of another
/// case or grid); returns its header.
pub fn restore<S: Simulation + ?Sized>(sim: &mut S, path: &Path) -> CaseResult<CheckpointHeader> {
    let (file, header) = read_checkpoint(path)?;
    if header.case != sim.case() {
        return Err(CaseError::Restart {
            path: path.to_path_buf(),
            reason: format!(
                "it was written by case `{}`, not `{}`; restart it with `watershed run {} --restart {}`",
                header.case,
                sim.case(),
                header.case,
                path.display()
            ),
        });
    }
    let cells = sim.grid().cells().map(|c| c as u64);
    if header.grid_cells != cells {
        return Err(CaseError::Restart {
            path: path.to_path_buf(),
            reason: format!(
                "it holds a {:?}-cell grid, this run configures {:?} cells; use the checkpoint's own configuration (drop the --set / --config that changes the grid)",
                header.grid_cells, cells
            ),
        });
    }
    match RankCheckpoint::of(path, &header) {
        Some(patches) => sim.load_own_patches(&patches, &file, header.time, header.step)?,
        None => sim.load_state(&file, header.time, header.step)?,
    }
    Ok(header)
}

fn done(stop: Stop, time: f64, steps: u64) -> bool {
    match stop {
        Stop::Steps(n) => steps >= n,
        Stop::EndTime(end) => time >= end - 1e-12 * end.abs().max(1.0),
    }
}

/// Runs `sim` to `control.stop`, dumping into `output` (when given),
/// checkpointing into its directory, and calling `observer` after every
/// step. Returns the report; the simulation's `finish` is the caller's.
pub fn run<S: Simulation + ?Sized>(
    sim: &mut S,
    control: &RunControl,
    mut output: Option<&mut DumpSeries>,
    observer: &mut dyn FnMut(&S),
) -> CaseResult<RunReport> {
    if let Stop::EndTime(end) = control.stop
        && !(end.is_finite() && end >= sim.time())
    {
        return Err(CaseError::Usage(format!(
            "the end time {end} must be finite and not before the current time {}",
            sim.time()
        )));
    }
    match control.dumps {
        DumpSchedule::EverySteps(0) => {
            return Err(CaseError::Usage("--dump-every must be at least 1".into()));
        }
        DumpSchedule::Interval(t) if !(t.is_finite() && t > 0.0) => {
            return Err(CaseError::Usage(format!(
                "--dump-interval {t} must be finite and positive"
            )));
        }
        // The dump times are multiples of t: t must be a normal number and
        // the time / t count representable, or no dump time would come.
        DumpSchedule::Interval(t) if !interval_countable(sim.time(), t) => {
            return Err(CaseError::Usage(format!(
                "--dump-interval {t:e} is too small for the simulated time {:e} (the dump times, multiples of it, cannot be told apart); use --dump-every 1 to dump every step",
                sim.time()
            )));
        }
        _ => {}
    }
    if control.checkpoint_every == Some(0) {
        return Err(CaseError::Usage(
            "--checkpoint-every must be at least 1".into(),
        ));
    }
    let ranks = control.ranks.as_deref();
    let follower = is_follower(ranks);
    if control.checkpoint_every.is_some() && output.is_none() && !follower {
        return Err(CaseError::Usage(
            "checkpoints need an output directory".into(),
        ));
    }
    // On several ranks every rank starts its trace's clock after one
    // collective call, so that their timelines agree (to a message's
    // latency) when rank 0 puts them into one trace.
    if control.record_trace {
        leader_decides(ranks, true)?;
    }
    let epoch = Instant::now();
    if control.record_trace {
        for (_, graph) in sim.graphs() {
            graph.start_recording(epoch);
            // GPU nodes' kernels and copies on their streams too (a graph
            // without GPU nodes has none).
            graph.set_gpu_timeline(true);
        }
        sim.start_recording(epoch);
    }
    let mut progress = Progress::new(control.progress, sim.case());
    if control.output_files != OutputFiles::Whole && sim.patch_layout().is_none() {
        return Err(per_rank_refused(sim.case()));
    }
    if control.output_files != OutputFiles::Whole && output.is_none() && !follower {
        return Err(CaseError::Usage(
            "files per rank need an output directory on rank 0, which records them".into(),
        ));
    }
    // Every rank calls this at each dump: rank 0 with its output.
    let dump = |sim: &S, output: Option<&mut DumpSeries>| -> CaseResult<()> {
        match (&control.output_files, output) {
            (OutputFiles::Whole, Some(output)) => {
                let path = output.dump(sim.time(), sim.steps(), |group| sim.dump(group))?;
                tracing::info!(file = %path.display(), step = sim.steps(), time = sim.time(), "dump written");
            }
            (OutputFiles::Whole, None) => in_memory(|group| sim.dump(group).map(|_| ()))?,
            (OutputFiles::PerRank { directory }, output) => {
                let (rank, count) = ranks.map_or((0, 1), |link| (link.rank(), link.ranks()));
                let written = write_rank_dump(
                    directory,
                    sim.case(),
                    sim.time(),
                    sim.steps(),
                    rank,
                    count,
                    |root| sim.dump_own_patches(root),
                )?;
                // Recorded once every rank's file is complete, from what
                // each rank reports of it (rank 0 opens no other file).
                let reports = gather_dump_reports(ranks, written.report)?;
                if let Some(output) = output {
                    let layout = sim
                        .patch_layout()
                        .ok_or_else(|| per_rank_refused(sim.case()))?;
                    let path = output.record_rank_dump(
                        sim.time(),
                        sim.steps(),
                        layout,
                        &reports,
                        written.fields,
                    )?;
                    tracing::info!(file = %path.display(), ranks = count, step = sim.steps(), time = sim.time(), "dump written per rank");
                }
            }
        }
        Ok(())
    };
    // Every rank calls this at each checkpoint: rank 0 with its output,
    // and only rank 0 gets the path.
    let checkpoint = |sim: &S,
                      output: Option<&DumpSeries>,
                      mut header: CheckpointHeader|
     -> CaseResult<Option<PathBuf>> {
        match &control.output_files {
            OutputFiles::Whole => match output {
                Some(out) => Ok(Some(write_checkpoint(out.directory(), &header, |g| {
                    sim.save_state(g)
                })?)),
                None => in_memory(|group| sim.save_state(group)).map(|()| None),
            },
            OutputFiles::PerRank { directory } => {
                let (rank, count) = ranks.map_or((0, 1), |link| (link.rank(), link.ranks()));
                write_rank_checkpoint(directory, header.step, rank, count, |root| {
                    sim.save_own_patches(root)
                })?;
                // The checkpoint file comes last, once every rank's is
                // complete.
                leader_decides(ranks, true)?;
                let Some(out) = output else {
                    return Ok(None);
                };
                let layout = sim
                    .patch_layout()
                    .ok_or_else(|| per_rank_refused(sim.case()))?;
                let owners = (0..layout.len())
                    .map(|k| layout.owner(k, count).map(|r| r as u64))
                    .collect::<Result<Vec<_>, _>>()?;
                header.patch_ranks = Some(owners);
                Ok(Some(write_checkpoint(out.directory(), &header, |g| {
                    sim.save_shared_state(g)
                })?))
            }
        }
    };
    let first_dump = output
        .as_deref()
        .is_some_and(|out| !out.dumps().iter().any(|d| d.step == sim.steps()));
    if leader_decides(ranks, first_dump)? {
        dump(sim, output.as_deref_mut())?;
    }
    let mut series = match (output.as_deref(), sim.series()) {
        (Some(out), Some(layout)) => Some(SeriesFile::create(
            out.directory(),
            &layout,
            &sim.series_rows(0),
        )?),
        _ => None,
    };
    let first_step = sim.steps();
    let first_time = sim.time();
    let mut next_dump_time = match control.dumps {
        DumpSchedule::Interval(t) => ((sim.time() / t).floor() + 1.0) * t,
        _ => f64::INFINITY,
    };
    let mut last_checkpoint = None;
    // The step of the last checkpoint (every rank knows it; only rank 0
    // has its path).
    let mut checkpoint_step = None;
    let mut interrupted = None;
    let mut last_dt_taken = 0.0;
    let mut gpu_calls = GpuCalls::default();
    let mut gpu_calls_last_step = GpuCalls::default();
    let started = Instant::now();
    let exchange_before = sim.exchange_time();
    let waited_before = ranks.map(|link| link.waited());
    let overlapped_before = sim.interior_during_exchanges();
    let poisson_before = sim.poisson_on_patches();
    let solves_before = sim.flow().map(IncompressibleFlow::projection_totals);
    let mut first_step_time: Option<Duration> = None;
    let stop_reason = loop {
        if done(control.stop, sim.time(), sim.steps()) {
            break match control.stop {
                Stop::Steps(n) => format!("reached step {n}"),
                Stop::EndTime(t) => format!("reached the end time {t}"),
            };
        }
        if let Some(reason) = sim.stop_reason() {
            break reason;
        }
        if let Some(signum) = any_signal(ranks, crate::interrupt::received())? {
            interrupted = Some(signum);
            break format!("interrupted by {}", crate::interrupt::name(signum));
        }
        let mut dt = sim.next_dt()?;
        if let Stop::EndTime(end) = control.stop {
            dt = dt.min(end - sim.time());
        }
        let calls_before = watershed_fields::gpu_calls();
        sim.step(dt)?;
        if first_step_time.is_none() {
            first_step_time = Some(started.elapsed());
        }
        gpu_calls_last_step = watershed_fields::gpu_calls().since(&calls_before);
        gpu_calls = gpu_calls + gpu_calls_last_step;
        let last_dt = dt;
        last_dt_taken = dt;
        if let Some(file) = series.as_mut() {
            file.append(&sim.series_rows(file.rows_written()))?;
        }
        observer(sim);
        let steps = sim.steps();
        if output.is_some() || follower {
            let due = match control.dumps {
                DumpSchedule::EverySteps(n) => steps.is_multiple_of(n),
                DumpSchedule::Interval(t) => {
                    let due = sim.time() >= next_dump_time * (1.0 - 1e-12);
                    if due {
                        next_dump_time = ((sim.time() / t).floor() + 1.0) * t;
                    }
                    due
                }
                DumpSchedule::StartAndEnd => false,
            };
            if due {
                dump(sim, output.as_deref_mut())?;
            }
            if let Some(every) = control.checkpoint_every
                && steps.is_multiple_of(every)
            {
                let header = CheckpointHeader {
                    case: sim.case().to_string(),
                    time: sim.time(),
                    step: steps,
                    last_dt,
                    grid_cells: sim.grid().cells().map(|c| c as u64),
                    config: control.config_text.clone(),
                    dump_schedule: Some(control.dumps.to_text()),
                    checkpoint_every: Some(control.checkpoint_every.unwrap_or(0)),
                    patch_ranks: None,
                };
                if let Some(path) = checkpoint(sim, output.as_deref(), header)? {
                    tracing::info!(file = %path.display(), step = steps, "checkpoint written");
                    last_checkpoint = Some(path);
                }
                checkpoint_step = Some(steps);
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let fraction = match control.stop {
            Stop::Steps(n) => {
                (steps - first_step) as f64 / (n.saturating_sub(first_step)).max(1) as f64
            }
            Stop::EndTime(end) => {
                let span = end - first_time;
                if span > 0.0 {
                    (sim.time() - first_time) / span
                } else {
                    1.0
                }
            }
        };
        progress.update(&StepInfo {
            step: steps,
            time: sim.time(),
            dt,
            fraction,
            cells_per_second: if elapsed > 0.0 {
                sim.cell_updates_per_step() as f64 * (steps - first_step) as f64 / elapsed
            } else {
                0.0
            },
            status: sim.status(),
        });
    };
    let wall = started.elapsed();
    let exchange_time = sim
        .exchange_time()
        .map(|t| t.saturating_sub(exchange_before.unwrap_or_default()));
    let interior_during_exchanges = sim
        .interior_during_exchanges()
        .map(|t| t.saturating_sub(overlapped_before.unwrap_or_default()));
    let waited_for_ranks = ranks
        .zip(waited_before)
        .map(|(link, before)| link.waited().saturating_sub(before));
    let poisson_on_patches = sim.poisson_on_patches().map(|(t, levels, on_patches)| {
        let before = poisson_before.map_or(Duration::ZERO, |(b, _, _)| b);
        (t.saturating_sub(before), levels, on_patches)
    });
    let poisson_solves = sim.flow().map(|flow| {
        let (after, before) = (flow.projection_totals(), solves_before.unwrap_or_default());
        ProjectionTotals {
            solves: after.solves.saturating_sub(before.solves),
            iterations: after.iterations.saturating_sub(before.iterations),
            ..after
        }
    });
    progress.finish();
    if interrupted.is_some()
        && (output.is_some() || follower)
        && checkpoint_step != Some(sim.steps())
    {
        // Stopped by a signal: a checkpoint of the state reached, so that
        // the run can continue from it.
        let header = CheckpointHeader {
            case: sim.case().to_string(),
            time: sim.time(),
            step: sim.steps(),
            last_dt: last_dt_taken,
            grid_cells: sim.grid().cells().map(|c| c as u64),
            config: control.config_text.clone(),
            dump_schedule: Some(control.dumps.to_text()),
            checkpoint_every: Some(control.checkpoint_every.unwrap_or(0)),
            patch_ranks: None,
        };
        if let Some(path) = checkpoint(sim, output.as_deref(), header)? {
            last_checkpoint = Some(path);
        }
    }
    let last_dump = output
        .as_deref()
        .is_some_and(|out| !out.dumps().iter().any(|d| d.step == sim.steps()));
    if leader_decides(ranks, last_dump)? {
        dump(sim, output)?;
    }
    let mut slowest: Vec<ExpressionTiming> = Vec::new();
    let mut trace = Vec::new();
    let mut trace_dropped = 0;
    let mut graphs = Vec::new();
    for (name, graph) in sim.graphs() {
        graphs.push(GraphCensus {
            name: name.clone(),
            nodes: graph.node_count(),
            native: graph.native_node_count(),
            kernels: graph.kernel_count(),
            adaptive_choice: graph.adaptive_choice(),
        });
        for mut row in graph.timing_table().0 {
            row.name = format!("{name}/{}", row.name);
            slowest.push(row);
        }
        if control.record_trace {
            let (events, dropped) = graph.take_recording(&name);
            trace.extend(events);
            trace_dropped += dropped;
        }
    }
    if control.record_trace {
        trace.extend(sim.take_recording());
    }
    let graph_time = slowest.iter().map(|row| row.total).sum();
    slowest.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
    slowest.truncate(5);
    trace.sort_by_key(|e| e.start);
    Ok(RunReport {
        steps_run: sim.steps() - first_step,
        wall,
        first_step: first_step_time.unwrap_or_default(),
        cell_updates_per_step: sim.cell_updates_per_step(),
        stop_reason,
        time: sim.time(),
        step: sim.steps(),
        slowest,
        graphs,
        graph_time,
        exchange_time,
        interior_during_exchanges,
        waited_for_ranks,
        poisson_on_patches,
        poisson_solves,
        cpu_memory_high_water: process_memory_high_water(),
        gpu_memory_high_water: gpu_memory_high_water(),
        gpu_calls,
        gpu_calls_last_step,
        trace,
        trace_dropped,
        last_checkpoint,
        interrupted,
    })
}

/// Per GPU used, the bytes its process-wide pools held at most: the
/// size-class pool's peak plus the stream-ordered pool's (an upper bound
/// of the joint peak when a run used both).
fn gpu_memory_high_water() -> Vec<(usize, usize)> {
    let mut peaks: std::collections::BTreeMap<usize, usize> = Default::default();
    for (gpu, statistics) in MemoryPool::global_gpu_statistics()
        .into_iter()
        .chain(MemoryPool::global_stream_ordered_statistics())
    {
        *peaks.entry(gpu).or_default() += statistics.high_water_bytes_total;
    }
    peaks.into_iter().filter(|&(_, bytes)| bytes > 0).collect()
}

/// The end-of-run summary: wall time, time per step, throughput, memory,
/// slowest expressions and the case's check.
pub fn summary(case: &str, report: &RunReport, check: &CaseCheck) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let _ = writeln!(text, "== {case}: {} ==", report.stop_reason);
    let (stepping, _) = report.stepping();
    let _ = writeln!(
        text,
        "steps {} (now at step {}, t = {:.6e}); wall {:.3} s, of which the first step (kernel compilation, placement) {:.3} s; stepping: {:.3} ms/step; {:.3e} cell updates/s over {}",
        report.steps_run,
        report.step,
        report.time,
        report.wall.as_secs_f64(),
        report.first_step.as_secs_f64(),
        report.seconds_per_step() * 1e3,
        report.cell_updates_per_second(),
        if stepping == report.steps_run {
            format!("{stepping} step(s)")
        } else {
            format!("the {stepping} steps after the first")
        }
    );
    let memory = report
        .cpu_memory_high_water
        .map_or("unknown".into(), mebibytes);
    let gpu = if report.gpu_memory_high_water.is_empty() {
        "none used".to_string()
    } else {
        report
            .gpu_memory_high_water
            .iter()
            .map(|&(k, bytes)| format!("GPU {k} {}", mebibytes(bytes as u64)))
            .collect::<Vec<_>>()
            .join(", ")
            + " (pool peak held from the driver)"
    };
    let _ = writeln!(
        text,
        "memory high-water: CPU {memory} (process peak resident set); GPU: {gpu}"
    );
    if report.gpu_calls.total() > 0 {
        let _ = writeln!(
            text,
            "GPU calls: {} in the last step ({}; {} copied between devices); {:.1} per step over the run",
            report.gpu_calls_last_step.total(),
            report.gpu_calls_last_step,
            mebibytes(report.gpu_calls_last_step.copied_bytes),
            report.gpu_calls.total() as f64 / report.steps_run.max(1) as f64
        );
    }
    let wall = report.wall.as_secs_f64();
    if wall > 0.0 {
        let _ = writeln!(
            text,
            "time in graph nodes: {:.3} s ({:.1}% of the wall time; the rest is outside the graphs: time-step limits, output, progress, and on patches the exchanges and a flow's Poisson solve)",
            report.graph_time.as_secs_f64(),
            100.0 * report.graph_time.as_secs_f64() / wall
        );
        if let Some(solves) = report.poisson_solves.filter(|t| t.solves > 0) {
            let _ = writeln!(
                text,
                "Poisson solves: {} in the stepping, {:.1} CG iterations on average (at most {}); final relative residual at most {:.1e}",
                solves.solves,
                solves.iterations as f64 / solves.solves as f64,
                solves.most_iterations,
                solves.worst_relative_residual
            );
        }
        if let Some((solve, levels, on_patches)) = report.poisson_on_patches {
            let _ = writeln!(
                text,
                "Poisson solve on patches: {:.3} s ({:.1}% of the wall time, outside the graphs, its exchanges included; {levels} levels, {on_patches} on patches, the coarser gathered on every rank)",
                solve.as_secs_f64(),
                100.0 * solve.as_secs_f64() / wall
            );
        }
        if let Some(exchange) = report.exchange_time {
            let overlap = match report.interior_during_exchanges {
                Some(work) => format!(
                    "; {:.3} s of interior work ran while they were in flight, not counted in them",
                    work.as_secs_f64()
                ),
                None => "; run when each stage ends, not overlapped with interior work".into(),
            };
            let _ = writeln!(
                text,
                "exchanges and reductions across patches: {:.3} s ({:.1}% of the wall time, waits for other ranks included{overlap})",
                exchange.as_secs_f64(),
                100.0 * exchange.as_secs_f64() / wall
            );
        }
    }
    for graph in &report.graphs {
        let _ = writeln!(
            text,
            "graph {}: {} nodes after fusion ({} native), {} kernels per execution{}",
            graph.name,
            graph.nodes,
            graph.native,
            graph.kernels,
            match graph.adaptive_choice {
                Some(watershed_exprgraph::ExecutionMode::Threaded(n)) => {
                    format!("; ran on {n} threads (timed faster than 1)")
                }
                Some(_) => "; ran on 1 thread (timed faster than several)".to_string(),
                None => String::new(),
            }
        );
    }
    if !report.slowest.is_empty() {
        let _ = writeln!(text, "slowest expressions (total over the run):");
        for row in &report.slowest {
            let _ = writeln!(
                text,
                "  {:<44} {:>8} calls {:>10.2} ms total {:>10.2} us/call",
                row.name,
                row.calls,
                row.total.as_secs_f64() * 1e3,
                row.mean.as_secs_f64() * 1e6
            );
        }
    }
    let _ = writeln!(
        text,
        "check: {} — {} ({})",
        check.name,
        if check.passed { "PASSED" } else { "FAILED" },
        check.figure
    );
    for file in &check.files {
        let _ = writeln!(text, "wrote {}", file.display());
    }
    text
}

/// `bytes` in MiB with one decimal, e.g. `12.3 MiB`.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
