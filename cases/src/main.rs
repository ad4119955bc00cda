//! The `watershed` command-line program: `list`, `info`, `run`, `inspect`,
//! `bench`. Exit status: 0 success, 1 a run failed (solver, I/O), 2 bad
//! usage or configuration (nothing written), 3 the case's check failed.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use watershed_cases::collective::is_follower;
use watershed_cases::driver::{DumpSchedule, OutputFiles, RunControl, Stop, restore, run, summary};
use watershed_cases::progress::ProgressMode;
use watershed_cases::registry::CaseOptions;
use watershed_cases::{CaseError, find_case, registered_cases};
use watershed_fields::ranks::RankLink;
use watershed_io::dumps::DumpSeries;

/// Watershed: PDE/CFD field computations on CPUs and GPUs.
#[derive(Debug, Parser)]
#[command(name = "watershed", version, about, long_version = long_version())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the `run` variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// List the cases this build can run.
    List,
    /// Print this build and the devices it can use.
    Info,
    /// Run a case: HDF5 dumps + XDMF (open CASE.xmf in ParaView), plots,
    /// checkpoints, an end-of-run summary and the case's check.
    Run(RunArgs),
    /// Show what an HDF5 file holds: dumps, fields, shapes, attributes, time.
    Inspect {
        /// The HDF5 file.
        file: PathBuf,
    },
    /// Thread scaling of the ExprLib and Wasatch scalability graphs:
    /// a Markdown table and PNG charts.
    Bench(BenchArgs),
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Where the Markdown table and PNG charts go.
    #[arg(long, default_value = "output/bench")]
    output: PathBuf,
    /// Equations per graph.
    #[arg(long, default_value_t = 30)]
    pdes: usize,
    /// Cells per side of each problem size (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec![16usize, 32])]
    sizes: Vec<usize>,
    /// Thread counts (comma-separated; default 1, 2, 4, ... up to the cores).
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Timed steps per measurement (the median is reported).
    #[arg(long, default_value_t = 9)]
    steps: usize,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The case (see `watershed list`).
    case: String,
    /// A TOML configuration (see `--print-config` for the keys).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Override one configuration key (repeatable), e.g. `--set re=400`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Threads per process, for graph execution and the work between
    /// graphs (default: WATERSHED_THREADS, else up to the cores, divided
    /// among the ranks on this machine under mpirun: each graph times 1
    /// thread against all and keeps the faster).
    #[arg(long)]
    threads: Option<usize>,
    /// Where to run: auto (a GPU if present, else the CPU), cpu, gpu, gpu:K.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Stop after this step (counted from the start of the run).
    #[arg(long, conflicts_with = "end_time")]
    steps: Option<u64>,
    /// Stop at this simulated time (default: the configuration's end time).
    #[arg(long, allow_negative_numbers = true)]
    end_time: Option<f64>,
    /// Output directory (default: output/CASE).
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Dump every N steps (default: at the start and the end only).
    #[arg(long, value_name = "N", conflicts_with = "dump_interval")]
    dump_every: Option<u64>,
    /// Dump each time the simulated time passes a multiple of T.
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    dump_interval: Option<f64>,
    /// Write a checkpoint every N steps (the newest two are kept).
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<u64>,
    /// Every rank writes the patches it owns into dump and checkpoint files
    /// of its own (CASE_<step>.rank<r>.h5, checkpoint_<step>.rank<r>.h5)
    /// instead of rank 0 gathering the whole domain; the XDMF shows each
    /// dump as one dataset of patches, and a checkpoint restarts on any
    /// number of ranks with the same patch layout. For the cases on
    /// patches (advection, heat, reacting-species, wasatch-scalability and
    /// the flows).
    #[arg(long)]
    per_rank_files: bool,
    /// Continue from a checkpoint (its configuration is the base; --set and
    /// --config may change what does not alter the state, e.g. end_time).
    #[arg(long, value_name = "FILE.h5")]
    restart: Option<PathBuf>,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of the whole run: every graph's nodes, and on patches the exchanges and a flow's Poisson solves on tracks of their own; under mpirun rank 0 writes every rank's, each track named with its rank
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
    /// Write the expression graphs in Graphviz DOT.
    #[arg(long, value_name = "FILE.dot")]
    dot: Option<PathBuf>,
    /// No progress output (the summary is still printed).
    #[arg(long)]
    quiet: bool,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// Print the generated source of every kernel of the case's graphs (c or
    /// cuda) and exit, without running.
    #[arg(long, value_name = "LANGUAGE", value_parser = ["c", "cuda"])]
    emit: Option<String>,
    /// Print the device plan of every graph of the case under a placement
    /// (gpu, heterogeneous or cost, on GPU 0; sync for one stream per
    /// device) and exit, without running: nodes per device, the copies
    /// per execution, streams and events. Needs no GPU.
    #[arg(long, value_name = "PLACEMENT", value_parser = ["gpu", "heterogeneous", "cost", "gpu-sync", "heterogeneous-sync"])]
    plan: Option<String>,
    /// (with --device gpu) Replay each graph's repeating steps as CUDA
    /// graphs: a step is recorded, keyed by all it enqueues, captured at
    /// its second sight and launched in one call after that. Refused,
    /// naming the node, for a graph that needs the host inside its step
    /// (a reduction, a solve).
    #[arg(long)]
    cuda_graphs: bool,
    /// (on a GPU) Where GPU nodes take the memory they need during a step
    /// (scratch fields, finiteness-check words): the engine's size-class
    /// pool, or the driver's stream-ordered allocator (cuMemAllocAsync /
    /// cuMemFreeAsync on each node's stream). Both give the same values;
    /// stream-ordered cannot be combined with --cuda-graphs.
    #[arg(long, value_name = "ALLOCATOR", value_parser = ["pool", "stream-ordered"], default_value = "pool")]
    gpu_scratch: String,
    /// Replace the results of an earlier run in the output directory.
    #[arg(long)]
    overwrite: bool,
    /// (heat) Run the convergence study over three grids instead.
    #[arg(long)]
    convergence: bool,
}

fn long_version() -> &'static str {
    Box::leak(
        watershed_cases::build_summary()
            .trim_start_matches("watershed ")
            .to_string()
            .into_boxed_str(),
    )
}

/// How a command ended.
enum Outcome {
    Done,
    CheckFailed,
    /// Ended by this signal after a step, with a checkpoint.
    Interrupted(i32),
}

/// Errors of the program: usage and configuration problems (exit 2) and
/// failed runs (exit 1).
enum Failure {
    Usage(Box<CaseError>),
    Run(Box<CaseError>),
    Io(std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Io(e)
    }
}

fn usage(e: CaseError) -> Failure {
    Failure::Usage(Box::new(e))
}

fn runtime(e: CaseError) -> Failure {
    Failure::Run(Box::new(e))
}

/// The thread count when `--threads` names none: `WATERSHED_THREADS`,
/// else the cores shared among the `local_ranks` ranks on this machine.
fn default_threads(local_ranks: usize) -> Result<usize, Failure> {
    match std::env::var("WATERSHED_THREADS") {
        Ok(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                usage(CaseError::Usage(format!(
                    "WATERSHED_THREADS = {text:?} is not a thread count (an integer >= 1)"
                )))
            }),
        Err(_) => Ok(watershed_cases::collective::threads_per_rank(
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            local_ranks,
        )),
    }
}

/// Gives rayon's global pool, which runs the work between graph executions
/// (a flow's Poisson solve on patches, the reductions and prepared
/// assignments of the solvers), `threads` threads, as the graphs get: by
/// default it would take every core, whatever `--threads` says, and under
/// mpirun every rank would.
fn set_global_threads(threads: usize) -> Result<(), Failure> {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("watershed-{i}"))
        .build_global();
    match built {
        Ok(()) => Ok(()),
        // Already set (a second run in this process) to the same count.
        Err(_) if rayon::current_num_threads() == threads => Ok(()),
        Err(e) => Err(runtime(CaseError::Usage(format!(
            "cannot give the work between graphs {threads} thread(s): {e}; rayon's global pool already has {}",
            rayon::current_num_threads()
        )))),
    }
}

/// Checks `--device` for `case`; returns a note for the summary and the
/// placement its graphs are built with. The ExprLib test takes the
/// thesis' heterogeneous rule; every other case puts its solvers' whole
/// step on the GPU (every node of them can run there, the flows' Poisson
/// solve included). `auto` picks the GPU only for the cases whose GPU
/// results have been compared with the CPU's on a GPU.
fn check_device(
    device: &str,
    case: &str,
    local_rank: usize,
) -> Result<(String, watershed_exprgraph::PlacementPolicy), Failure> {
    use watershed_exprgraph::PlacementPolicy;
    // One rank per GPU: the k-th rank on a machine takes GPU k mod count
    // when `gpu` or `auto` names none (0 for a run in one process).
    let first = match watershed_fields::gpu::gpu_count() {
        0 => 0,
        count => local_rank % count,
    };
    let heterogeneous = case == watershed_cases::cases::scalability::EXPRLIB;
    // The cases whose GPU results were compared with the CPU's on a GPU
    // (docs/benchmarks.md); `auto` picks the GPU only for these.
    let verified_on_gpu = heterogeneous
        || [
            watershed_cases::cases::heat::NAME,
            watershed_cases::cases::advection::NAME,
        ]
        .contains(&case);
    let gpu = |ordinal: usize| -> Result<(String, PlacementPolicy), Failure> {
        match watershed_fields::gpu::gpu_unavailable_reason(ordinal) {
            Some(reason) => Err(usage(CaseError::Device(format!(
                "--device {device}: GPU {ordinal} is not available ({reason}); use --device cpu or --device auto"
            )))),
            None if heterogeneous => Ok((
                format!("GPU {ordinal} (nodes that can run there; see --plan heterogeneous)"),
                PlacementPolicy::Heterogeneous(ordinal),
            )),
            None => Ok((
                format!("GPU {ordinal} (the whole step; see --plan gpu)"),
                PlacementPolicy::Gpu(ordinal),
            )),
        }
    };
    match device {
        "cpu" => Ok(("CPU".into(), PlacementPolicy::Cpu)),
        "auto" => match watershed_fields::gpu::gpu_unavailable_reason(0) {
            Some(reason) => Ok((
                format!("CPU (auto: no GPU, {reason})"),
                PlacementPolicy::Cpu,
            )),
            None if verified_on_gpu => gpu(first),
            None => Ok((
                format!(
                    "CPU (auto: the {case} case's GPU path has not yet been compared with the CPU on a GPU; --device gpu runs it there)"
                ),
                PlacementPolicy::Cpu,
            )),
        },
        "gpu" => gpu(first),
        other => match other.strip_prefix("gpu:").map(str::parse::<usize>) {
            Some(Ok(k)) => gpu(k),
            _ => Err(usage(CaseError::Usage(format!(
                "--device {other}: expected auto, cpu, gpu or gpu:K"
            )))),
        },
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    watershed_io::files::write_text_file_atomically(path, text).map_err(|e| runtime(e.into()))
}

/// Refuses a thread count above what a graph may use, naming `what`.
fn check_thread_count(n: usize, what: &str) -> Result<usize, Failure> {
    let most = watershed_exprgraph::scheduler::max_threads();
    if n == 0 {
        return Err(usage(CaseError::Usage(format!(
            "{what} must be at least 1"
        ))));
    }
    if n > most {
        return Err(usage(CaseError::Usage(format!(
            "{what} {n} is more threads than this machine's {} cores can use; give at most {most}",
            most / 8
        ))));
    }
    Ok(n)
}

/// The CPU back end the environment asks for, refusing a bad
/// `WATERSHED_BACKEND`, `WATERSHED_CFLAGS` or `WATERSHED_KERNEL_CACHE_MB`
/// before anything runs or is written.
fn check_backend() -> Result<(), Failure> {
    watershed_operators::codegen::Backend::process_default()
        .map(drop)
        .map_err(|e| usage(CaseError::Usage(e.to_string())))
}

/// Refuses, before the run, a file the run would write at its end but
/// could not: its folder must exist and take a new file, and the path
/// must not be a folder. `flag` names the option.
fn check_writable(path: &Path, flag: &str) -> Result<(), Failure> {
    let refuse = |reason: String| {
        usage(CaseError::Io(watershed_io::OutputError::output(
            path.to_path_buf(),
            format!("{reason} (given with {flag}); choose another path"),
        )))
    };
    if path.is_dir() {
        return Err(refuse("is a directory".into()));
    }
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !folder.is_dir() {
        return Err(refuse(format!(
            "its folder {} does not exist",
            folder.display()
        )));
    }
    let probe = folder.join(format!(".watershed-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| {
        refuse(format!(
            "its folder {} takes no new file: {e}",
            folder.display()
        ))
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The output folder of a run, with what was found there said on stderr.
fn create_output(
    directory: &Path,
    case: &str,
    grid: &watershed_fields::Grid,
    overwrite: bool,
    continues_from: Option<u64>,
) -> Result<DumpSeries, Failure> {
    let output = DumpSeries::create(directory, case, grid, overwrite, continues_from)
        .map_err(|e| usage(e.into()))?;
    let (stale, stale_bytes) = output.swept();
    if stale > 0 {
        eprintln!(
            "removed {stale} stale temporary file(s) ({:.1} MiB) that killed writers left in {}",
            stale_bytes as f64 / f64::from(1u32 << 20),
            directory.display()
        );
    }
    if !output.incomplete().is_empty() {
        eprintln!(
            "removed the files of the dump(s) per rank at step(s) {:?} in {}: a run killed while writing them left them incomplete, and the XDMF never named them",
            output.incomplete(),
            directory.display()
        );
    }
    let (old_dumps, old_checkpoints) = output.replaced();
    if old_dumps + old_checkpoints > 0 {
        eprintln!(
            "--overwrite: removed the earlier run's {old_dumps} dump(s) and {old_checkpoints} checkpoint(s) from {}",
            directory.display()
        );
    }
    Ok(output)
}

fn run_case(
    args: RunArgs,
    out: &mut impl Write,
    ranks: Option<Rc<dyn RankLink>>,
) -> Result<Outcome, Failure> {
    let info = find_case(&args.case).map_err(usage)?;
    if ranks.as_deref().is_some_and(|l| l.ranks() > 1) {
        check_spreadable(&args)?;
    }
    let follower = is_follower(ranks.as_deref());
    let local_ranks = match ranks.as_deref().filter(|l| l.ranks() > 1) {
        Some(_) => watershed_cases::collective::local_ranks().unwrap_or(1),
        None => 1,
    };
    let threads = match args.threads {
        Some(n) => check_thread_count(n, "--threads")?,
        None => check_thread_count(default_threads(local_ranks)?, "WATERSHED_THREADS")?,
    };
    set_global_threads(threads)?;
    check_backend()?;
    if let Some(path) = &args.dot {
        check_writable(path, "--dot")?;
    }
    if let Some(path) = &args.trace {
        check_writable(path, "--trace")?;
    }
    // No count named: up to the cores, one thread where timing says it is
    // faster (small grids).
    let adaptive_threads =
        args.threads.is_none() && std::env::var_os("WATERSHED_THREADS").is_none();
    let local_rank = match ranks.as_deref().filter(|l| l.ranks() > 1) {
        Some(_) => watershed_cases::collective::local_rank().unwrap_or(0),
        None => 0,
    };
    let (device, placement) = check_device(&args.device, info.name, local_rank)?;
    if args.convergence && info.name != watershed_cases::cases::heat::NAME {
        return Err(usage(CaseError::Usage(format!(
            "--convergence is an option of the heat case, not of {}",
            info.name
        ))));
    }
    let mut options = CaseOptions {
        config_file: args.config.clone(),
        sets: args.sets.clone(),
        checkpoint_config: None,
        threads,
        adaptive_threads,
        placement,
        ranks: ranks.clone(),
    };
    let mut restart_header = None;
    if let Some(path) = &args.restart {
        let (_, header) = watershed_cases::checkpoint::read_checkpoint(path).map_err(usage)?;
        if header.case != info.name {
            return Err(usage(CaseError::Restart {
                path: path.clone(),
                reason: format!(
                    "it was written by case `{}`, not `{}`; restart it with `watershed run {} --restart {}`",
                    header.case,
                    info.name,
                    header.case,
                    path.display()
                ),
            }));
        }
        options.checkpoint_config = Some(header.config.clone());
        restart_header = Some(header);
    }
    if args.print_config {
        let text = (info.config_text)(&options).map_err(usage)?;
        write!(out, "{text}")?;
        return Ok(Outcome::Done);
    }
    let directory = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("output").join(info.name));
    if args.convergence {
        // Validate everything before creating the directory.
        (info.config_text)(&options).map_err(usage)?;
        std::fs::create_dir_all(&directory).map_err(|e| {
            runtime(CaseError::Io(watershed_io::OutputError::output(
                directory.clone(),
                format!("cannot create the directory: {e}"),
            )))
        })?;
        let check = watershed_cases::cases::heat::convergence_study(&options, Some(&directory))
            .map_err(runtime)?;
        writeln!(
            out,
            "check: {} — {} ({})",
            check.name,
            if check.passed { "PASSED" } else { "FAILED" },
            check.figure
        )?;
        for file in &check.files {
            writeln!(out, "wrote {}", file.display())?;
        }
        return Ok(if check.passed {
            Outcome::Done
        } else {
            Outcome::CheckFailed
        });
    }
    let mut prepared = (info.prepare)(&options).map_err(usage)?;
    if args.cuda_graphs {
        for (name, graph) in prepared.simulation.graphs() {
            graph
                .set_step_replay(watershed_exprgraph::StepReplay::CudaGraph)
                .map_err(|e| {
                    usage(CaseError::Usage(format!(
                        "--cuda-graphs: graph `{name}` cannot replay its steps: {e}"
                    )))
                })?;
        }
    }
    if args.gpu_scratch == "stream-ordered" {
        for (name, graph) in prepared.simulation.graphs() {
            graph
                .set_gpu_scratch(watershed_exprgraph::GpuScratch::StreamOrdered)
                .map_err(|e| {
                    usage(CaseError::Usage(format!(
                        "--gpu-scratch stream-ordered: graph `{name}`: {e}"
                    )))
                })?;
        }
    }
    if let Some(language) = &args.emit {
        let dialect = match language.as_str() {
            "cuda" => watershed_operators::vmath::Dialect::Cuda,
            _ => watershed_operators::vmath::Dialect::C,
        };
        for (name, graph) in prepared.simulation.graphs() {
            let source = graph
                .generated_source(dialect)
                .map_err(|e| runtime(CaseError::from(e)))?;
            writeln!(out, "/* ===== graph `{name}` ===== */\n{source}")?;
        }
        return Ok(Outcome::Done);
    }
    if let Some(placement) = &args.plan {
        use watershed_exprgraph::{CostModel, PlacementPolicy, StreamMode};
        let (policy, streams) = match placement.as_str() {
            "gpu" => (PlacementPolicy::Gpu(0), StreamMode::default()),
            "gpu-sync" => (PlacementPolicy::Gpu(0), StreamMode::Synchronous),
            "heterogeneous-sync" => (PlacementPolicy::Heterogeneous(0), StreamMode::Synchronous),
            "cost" => (
                PlacementPolicy::CostModel {
                    device: 0,
                    model: CostModel::default(),
                },
                StreamMode::default(),
            ),
            _ => (PlacementPolicy::Heterogeneous(0), StreamMode::default()),
        };
        for (name, graph) in prepared.simulation.graphs() {
            writeln!(out, "graph `{name}`:")?;
            match graph.device_plan_for(policy.clone(), streams) {
                Ok(plan) => write!(out, "{}", plan.summary())?,
                Err(error) => writeln!(out, "  not placeable: {error}")?,
            }
        }
        return Ok(Outcome::Done);
    }
    if let Some(path) = &args.restart {
        restore(prepared.simulation.as_mut(), path).map_err(usage)?;
    }
    let stop = match (args.steps, args.end_time) {
        (Some(n), _) => Stop::Steps(n),
        (None, Some(t)) => Stop::EndTime(t),
        (None, None) => prepared.stop,
    };
    if let Some(header) = &restart_header {
        // Steps and times count from the start of the run: a stop the
        // checkpoint has already passed would "reach" it at once.
        let passed = match stop {
            Stop::Steps(n) => (n <= header.step).then(|| {
                format!(
                    "--steps {n}: the checkpoint is at step {}, and steps count from the start of the run; give a larger number (e.g. --steps {})",
                    header.step,
                    header.step + 10
                )
            }),
            Stop::EndTime(t) => (t <= header.time).then(|| {
                format!(
                    "the end time {t} is not after the checkpoint's time {}; give a later --end-time",
                    header.time
                )
            }),
        };
        if let Some(reason) = passed {
            return Err(usage(CaseError::Usage(reason)));
        }
    }
    if let Stop::EndTime(t) = stop
        && !(t.is_finite() && t >= prepared.simulation.time())
    {
        return Err(usage(CaseError::Usage(format!(
            "--end-time {t} must be finite and not before the current time {}",
            prepared.simulation.time()
        ))));
    }
    let dumps = match (args.dump_every, args.dump_interval) {
        (Some(0), _) => {
            return Err(usage(CaseError::Usage(
                "--dump-every must be at least 1".into(),
            )));
        }
        (Some(n), _) => DumpSchedule::EverySteps(n),
        (None, Some(t)) if !(t.is_finite() && t > 0.0) => {
            return Err(usage(CaseError::Usage(format!(
                "--dump-interval {t} must be finite and positive"
            ))));
        }
        (None, Some(t))
            if !watershed_cases::driver::interval_countable(prepared.simulation.time(), t) =>
        {
            return Err(usage(CaseError::Usage(format!(
                "--dump-interval {t:e} is too small for the simulated time {:e} (the dump times, multiples of it, cannot be told apart); use --dump-every 1 to dump every step",
                prepared.simulation.time()
            ))));
        }
        (None, Some(t)) => DumpSchedule::Interval(t),
        // A restart keeps the schedule of the run it continues, so that
        // the dumps after its step are written again.
        (None, None) => restart_header
            .as_ref()
            .and_then(|h| h.dump_schedule.as_deref())
            .and_then(DumpSchedule::from_text)
            .unwrap_or(DumpSchedule::StartAndEnd),
    };
    let checkpoint_every = args.checkpoint_every.or_else(|| {
        restart_header
            .as_ref()
            .and_then(|h| h.checkpoint_every)
            .filter(|&n| n > 0)
    });
    if args.checkpoint_every == Some(0) {
        return Err(usage(CaseError::Usage(
            "--checkpoint-every must be at least 1".into(),
        )));
    }
    if args.per_rank_files && prepared.simulation.patch_layout().is_none() {
        return Err(usage(watershed_cases::driver::per_rank_refused(info.name)));
    }
    // A restart continues its own run's folder. Into another run's
    // folder it would remove that run's dumps after the step: refused
    // without --overwrite, and with it that folder is replaced whole.
    let mut continues_here = restart_header.is_some();
    if let Some(checkpoint) = &args.restart {
        let own = checkpoint
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .and_then(|p| p.canonicalize().ok());
        let target = directory.canonicalize().ok();
        let holds_results = directory.join(format!("{}.xmf", info.name)).exists();
        if target.is_some() && own != target && holds_results {
            if !args.overwrite {
                return Err(usage(CaseError::Io(watershed_io::OutputError::output(
                    directory.clone(),
                    format!(
                        "holds another run's results, and --restart {} continues the run in {}: its dumps would be mixed with this restart's; continue in {}, choose an empty --output, or pass --overwrite to replace this folder",
                        checkpoint.display(),
                        own.as_deref().unwrap_or(Path::new("?")).display(),
                        own.as_deref().unwrap_or(Path::new("?")).display()
                    ),
                ))));
            }
            continues_here = false;
        }
    }
    // Only rank 0 of a run on several ranks writes files.
    let mut output = if follower {
        None
    } else {
        Some(create_output(
            &directory,
            info.name,
            prepared.simulation.grid(),
            args.overwrite,
            restart_header
                .as_ref()
                .filter(|_| continues_here)
                .map(|h| h.step),
        )?)
    };
    if let Some(path) = &args.dot {
        let mut text = String::new();
        for (name, graph) in prepared.simulation.graphs() {
            text.push_str(&format!("// graph `{name}`\n"));
            text.push_str(&graph.to_dot());
        }
        write_file(path, &text)?;
    }
    let control = RunControl {
        stop,
        dumps,
        checkpoint_every,
        config_text: prepared.config_text.clone(),
        progress: if args.quiet || follower {
            ProgressMode::Quiet
        } else {
            ProgressMode::Auto
        },
        record_trace: args.trace.is_some(),
        ranks: ranks.clone(),
        output_files: if args.per_rank_files {
            OutputFiles::PerRank {
                directory: directory.clone(),
            }
        } else {
            OutputFiles::Whole
        },
    };
    // SIGINT and SIGTERM end the run after its step, with a checkpoint.
    watershed_cases::interrupt::install();
    tracing::info!(case = info.name, threads, device = %device, "run starts");
    let simulation = prepared.simulation.as_mut();
    let report = run(simulation, &control, output.as_mut(), &mut |_| {}).map_err(runtime)?;
    let check = simulation
        .finish((!follower).then_some(directory.as_path()))
        .map_err(runtime)?;
    let per_rank = match ranks.as_deref().filter(|l| l.ranks() > 1) {
        Some(link) => Some(per_rank_times(link, &report, &options.placement)?),
        None => None,
    };
    // On several ranks rank 0 writes every rank's events into one trace.
    let trace = match ranks.as_deref().filter(|l| l.ranks() > 1) {
        Some(link) if args.trace.is_some() => {
            watershed_cases::rank_trace::gather_trace(link, &report.trace).map_err(runtime)?
        }
        _ => None,
    };
    let Some(output) = output else {
        // A follower: rank 0 reports for every rank.
        return Ok(outcome_of(&report, &check));
    };
    if let Some(path) = &args.trace {
        let events = trace.as_deref().unwrap_or(&report.trace);
        write_file(path, &watershed_exprgraph::chrome_trace_of(events))?;
        if report.trace_dropped > 0 {
            tracing::warn!(
                dropped = report.trace_dropped,
                "the trace kept the first events only"
            );
        }
    }
    write!(out, "{}", summary(info.name, &report, &check))?;
    if let Some(table) = &per_rank {
        write!(out, "{table}")?;
    }
    if args.cuda_graphs {
        for (name, graph) in simulation.graphs() {
            let replay = graph.replay_statistics();
            writeln!(
                out,
                "CUDA graphs of `{name}`: {} of {} executions replayed ({} of them after updating {} kernels' arguments), {} captured, {} run directly ({} kernels per step){}{}",
                replay.replays + replay.updated_replays,
                replay.recorded,
                replay.updated_replays,
                replay.kernels_updated,
                replay.captures,
                replay.direct,
                replay.launches_per_step,
                replay
                    .last_capture_error
                    .map(|e| format!("; {} capture(s) failed: {e}", replay.failed_captures))
                    .unwrap_or_default(),
                replay
                    .last_update_error
                    .map(|e| format!("; {} update(s) failed: {e}", replay.failed_updates))
                    .unwrap_or_default()
            )?;
        }
    }
    if args.gpu_scratch == "stream-ordered" {
        let allocations: u64 = watershed_fields::MemoryPool::global_stream_ordered_statistics()
            .iter()
            .map(|(_, statistics)| statistics.misses)
            .sum();
        writeln!(
            out,
            "GPU scratch in stream order: {allocations} allocation(s) over the run{}",
            if allocations == 0 {
                " (none: no node of these graphs writes a scratch field or checks finiteness on a GPU)"
            } else {
                ""
            }
        )?;
    }
    if adaptive_threads && threads > 1 {
        writeln!(
            out,
            "device: {device}; threads: up to {threads}, 1 or {threads} per graph by timing (--threads N fixes the count)"
        )?;
    } else {
        writeln!(out, "device: {device}; threads: {threads}")?;
    }
    let files = if args.per_rank_files {
        "one file per rank per dump, each holding its patches; ParaView shows each dump as one dataset of patches, drawn as their outlines until you pick Surface"
    } else {
        "one file per dump"
    };
    writeln!(
        out,
        "output: {} dump(s) in {} (HDF5, {files}); open {} in ParaView (File > Open, the default reader) to see the cell-centred fields over time",
        output.dumps().len(),
        directory.display(),
        output.xdmf_path().display()
    )?;
    let staggered: Vec<String> = output
        .xdmf_paths()
        .iter()
        .skip(1)
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if !staggered.is_empty() {
        writeln!(
            out,
            "        the staggered fields at their faces: {}",
            staggered.join(", ")
        )?;
    }
    if let Some(path) = &report.last_checkpoint {
        writeln!(
            out,
            "last checkpoint: {} (continue with --restart {})",
            path.display(),
            path.display()
        )?;
    }
    if let Some(signum) = report.interrupted {
        let checkpoint = report
            .last_checkpoint
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.display().to_string());
        writeln!(
            out,
            "interrupted by {} after step {} (t = {:e}); the check above is of the run so far. Checkpoint: {checkpoint}; continue with `watershed run {} --restart {checkpoint}` and the same --config / --set options",
            watershed_cases::interrupt::name(signum),
            report.step,
            report.time,
            info.name,
        )?;
        return Ok(Outcome::Interrupted(signum));
    }
    Ok(outcome_of(&report, &check))
}

/// How a run ended, for the exit status.
fn outcome_of(
    report: &watershed_cases::driver::RunReport,
    check: &watershed_cases::driver::CaseCheck,
) -> Outcome {
    match report.interrupted {
        Some(signum) => Outcome::Interrupted(signum),
        None if check.passed => Outcome::Done,
        None => Outcome::CheckFailed,
    }
}

/// A run on several ranks: only the options that work across ranks
/// (every case decomposes).
fn check_spreadable(args: &RunArgs) -> Result<(), Failure> {
    let single_process_only = [
        (args.convergence, "--convergence"),
        (args.emit.is_some(), "--emit"),
        (args.plan.is_some(), "--plan"),
        (args.dot.is_some(), "--dot"),
        (args.cuda_graphs, "--cuda-graphs"),
        (args.print_config, "--print-config"),
    ];
    if let Some((_, flag)) = single_process_only.iter().find(|(given, _)| *given) {
        return Err(usage(CaseError::Usage(format!(
            "{flag} works in one process only; run it without mpirun (the patch layout does not change what it shows)"
        ))));
    }
    Ok(())
}

/// Each rank's stepping wall time, its time in exchanges across patches,
/// its time blocked waiting for the other ranks and its GPU, gathered on
/// every rank (collective); the table rank 0 prints, with the run's
/// exposed message time (see [`exposed_message_time`]).
fn per_rank_times(
    link: &dyn RankLink,
    report: &watershed_cases::driver::RunReport,
    placement: &watershed_exprgraph::PlacementPolicy,
) -> Result<String, Failure> {
    use watershed_exprgraph::PlacementPolicy;
    const PER_RANK: usize = 5;
    let wall = report.wall.as_secs_f64();
    let exchange = report.exchange_time.unwrap_or_default().as_secs_f64();
    let waited = report.waited_for_ranks.unwrap_or_default().as_secs_f64();
    // Negative: the exchanges are not overlapped.
    let overlapped = report
        .interior_during_exchanges
        .map_or(-1.0, |t| t.as_secs_f64());
    let gpu = match *placement {
        PlacementPolicy::Gpu(k) | PlacementPolicy::Heterogeneous(k) => k as f64,
        _ => -1.0,
    };
    let ranks = link.ranks();
    let all = link
        .gather_in_rank_order(
            &[wall, exchange, gpu, overlapped, waited],
            &vec![PER_RANK; ranks],
        )
        .map_err(|e| runtime(e.into()))?;
    let mut table = format!(
        "ranks: {ranks} (MPI); per rank, the stepping's wall time, the exchanges across patches in it, and the time it was blocked waiting for other ranks (in exchanges, reductions and the run's collective checks):\n"
    );
    let mut waits = Vec::with_capacity(ranks);
    for (rank, times) in all.chunks(PER_RANK).enumerate() {
        let share = if times[0] > 0.0 {
            100.0 * times[1] / times[0]
        } else {
            0.0
        };
        let device = if times[2] >= 0.0 {
            format!(" on GPU {}", times[2] as usize)
        } else {
            String::new()
        };
        let overlap = if times[3] >= 0.0 {
            format!("; interior work during them {:.3} s", times[3])
        } else {
            "; not overlapped".to_string()
        };
        table.push_str(&format!(
            "  rank {rank}{device}: {:.3} s, exchanges {:.3} s ({share:.1}%{overlap}), waiting {:.3} s\n",
            times[0], times[1], times[4]
        ));
        waits.push(times[4]);
    }
    let (exposed, imbalance) = exposed_message_time(&waits);
    table.push_str(&format!(
        "  waiting: {exposed:.3} s on messages (the least any rank waited), {imbalance:.3} s more on average on slower ranks (imbalance, which no overlap hides)\n"
    ));
    Ok(table)
}

/// From each rank's time blocked waiting for the others over the same
/// stepping: the run's exposed message time and the mean wait beyond it.
/// A rank that computes longer than another makes it wait by the
/// difference whatever the messages cost (load imbalance, which no
/// overlap can hide); the rank that waited least was on the critical
/// path, so its wait is what the messages themselves cost the run.
fn exposed_message_time(waits: &[f64]) -> (f64, f64) {
    let Some(least) = waits.iter().copied().min_by(f64::total_cmp) else {
        return (0.0, 0.0);
    };
    let beyond: f64 = waits.iter().map(|waited| waited - least).sum();
    (least, beyond / waits.len() as f64)
}

/// Writes the command's output; I/O errors are returned, never a panic
/// (`println!` panics when stdout is a closed pipe, e.g. `| head -0`).
fn execute(
    command: Command,
    out: &mut impl Write,
    ranks: Option<Rc<dyn RankLink>>,
) -> Result<Outcome, Failure> {
    match command {
        Command::List => {
            for case in registered_cases() {
                writeln!(out, "{:<22} {}", case.name, case.description)?;
            }
        }
        Command::Info => writeln!(out, "{}", watershed_cases::build_summary())?,
        Command::Run(args) => return run_case(args, out, ranks),
        Command::Inspect { file } => {
            let text = watershed_cases::inspect::describe_file(&file).map_err(usage)?;
            write!(out, "{text}")?;
        }
        Command::Bench(args) => {
            let threads = args
                .threads
                .unwrap_or_else(watershed_cases::bench::default_thread_counts);
            for &n in &threads {
                check_thread_count(n, "--threads")?;
            }
            check_backend()?;
            let options = watershed_cases::bench::BenchOptions {
                output: args.output,
                pdes: args.pdes,
                sizes: args.sizes,
                threads,
                steps: args.steps,
            };
            options.validate().map_err(usage)?;
            let (rows, files) = watershed_cases::bench::scaling_study(&options).map_err(runtime)?;
            for row in rows {
                writeln!(
                    out,
                    "{:<8} {:<12} {:>4}^3 {:>3} threads {:>10.3} ms/step  speedup {:.2}",
                    row.study,
                    row.variant,
                    row.cells,
                    row.threads,
                    row.seconds_per_step * 1e3,
                    row.speedup
                )?;
            }
            for file in files {
                writeln!(out, "wrote {}", file.display())?;
            }
        }
    }
    out.flush()?;
    Ok(Outcome::Done)
}

/// True when `error`, or an error it was caused by, is a host allocation
/// refused for want of memory.
fn ran_out_of_memory(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(watershed_fields::FieldError::MemoryExhausted { .. }) =
            e.downcast_ref::<watershed_fields::FieldError>()
        {
            return true;
        }
        next = e.source();
    }
    false
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    // Under mpirun (built with the `mpi` feature): every rank runs this
    // program; `mpi` finalises MPI when dropped, after the run.
    #[cfg(feature = "mpi")]
    let (_mpi, ranks) = match watershed_cases::collective::join_mpi_run() {
        Ok(Some((universe, link))) => (Some(universe), Some(link)),
        Ok(None) => (None, None),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "watershed: {e}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(not(feature = "mpi"))]
    let ranks: Option<Rc<dyn RankLink>> = {
        if watershed_cases::collective::launched_by_mpirun() {
            tracing::warn!(
                "started by mpirun, but this watershed was built without the `mpi` feature: every rank runs the whole case alone (build with --features mpi)"
            );
        }
        None
    };
    let stdout = std::io::stdout();
    let result = execute(cli.command, &mut stdout.lock(), ranks.clone());
    let _ = stdout.lock().flush();
    let failed = result.is_err();
    let code = exit_code(result);
    // On several ranks a failing rank ends them all (the others would wait
    // for it in the next exchange); its message names it. An interrupted
    // run or a failed check ends on every rank together, normally.
    if let Some(link) = ranks.as_deref().filter(|l| l.ranks() > 1)
        && failed
    {
        let _ = writeln!(
            std::io::stderr(),
            "watershed: rank {} of {} failed; ending every rank",
            link.rank(),
            link.ranks()
        );
        link.abort(1);
    }
    code
}

/// The exit status of a command's result, its error said on stderr.
fn exit_code(result: Result<Outcome, Failure>) -> ExitCode {
    match result {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Interrupted(signum)) => ExitCode::from((128 + signum).clamp(0, 255) as u8),
        Ok(Outcome::CheckFailed) => {
            let _ = writeln!(std::io::stderr(), "watershed: the case's check FAILED");
            ExitCode::from(3)
        }
        Err(Failure::Usage(e)) => {
            let _ = writeln!(std::io::stderr(), "watershed: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            let _ = writeln!(std::io::stderr(), "watershed: {e}");
            if ran_out_of_memory(e.as_ref()) {
                let _ = writeln!(
                    std::io::stderr(),
                    "watershed: a case's size is its `cells` setting (`--set cells=N`; `--print-config` shows it), a benchmark's --sizes and --pdes: lower them"
                );
            }
            ExitCode::FAILURE
        }
        // The reader went away (`watershed list | head -1`): nothing to say.
        Err(Failure::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            let _ = writeln!(std::io::stderr(), "watershed: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exposed_message_time;

    #[test]
    fn the_least_wait_is_the_messages_and_the_rest_imbalance() {
        assert_eq!(exposed_message_time(&[]), (0.0, 0.0));
        assert_eq!(exposed_message_time(&[0.25]), (0.25, 0.0));
        // Ranks waiting 0.5, 0.125 and 0.25 s: 0.125 s for the messages,
        // then 0.375 and 0.125 s more, 0.5 / 3 s on average.
        let (exposed, imbalance) = exposed_message_time(&[0.5, 0.125, 0.25]);
        assert_eq!(exposed, 0.125);
        assert!((imbalance - 0.5 / 3.0).abs() < 1e-15);
    }
}
