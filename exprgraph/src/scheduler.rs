//! Executing a graph: serial, or on a pool of threads ordered by critical
//! path.
//!
//! ## Protocol
//!
//! Each node goes through three steps, kept apart so that GPU nodes fit
//! without a rewrite:
//! 1. **start** (under the scheduler lock): the node is taken from the ready
//!    queue and the memory budget is charged for its scratch outputs;
//! 2. **launch** (no lock): its scratch outputs are taken from the pool and
//!    the expression runs. A CPU node is complete when `launch` returns; a
//!    GPU node will enqueue its kernel on its stream and return the event
//!    that marks completion;
//! 3. **finish** (under the lock, once complete): its consumers' ready
//!    counters drop (a consumer whose counter reaches zero joins the ready
//!    queue), and scratch fields whose last user it was go back to the pool.
//!
//! ## Threads
//!
//! `Threaded(n)` runs in a rayon pool of `n` threads. At most `n` nodes run
//! at once; the ready node with the longest path to a sink goes first
//! (measured mean times once the graph has run, unit costs before). The
//! same pool runs the data-parallel loops inside each node (expressions get
//! [`watershed_operators::Parallelism::Rayon`]), so nested parallelism never
//! oversubscribes. Every mode computes the same values bit for bit: each
//! node does the same arithmetic whatever thread runs it.
//!
//! ## Plans with GPU nodes
//!
//! A GPU node's launch only enqueues its kernels, so it completes at once;
//! the stream protocol's steps around each node (`gpu/executor.rs`) order the
//! GPU work. Serially, or with a memory budget or step replay, one thread
//! walks the plan order. Otherwise, when the plan has CPU nodes, every node
//! is a task of `dispatch` as above, with its steps before and after it:
//! CPU nodes run beside each other, and GPU nodes are enqueued while they
//! run. Scratch fields are then kept until the execution's end (a kernel
//! may still read them), so no budget applies.
//!
//! ## Memory budget
//!
//! With a budget, nodes start strictly in plan order and a node waits until
//! its scratch outputs fit. Since the plan order's own peak fits (checked at
//! build), waiting always ends: once every earlier node has finished, live
//! memory is what the serial plan has at that point.

use crate::analyses::critical_path::{Ready, priorities};
use crate::error::{GraphError, GraphResult};
use crate::expression::EvaluationContext;
use crate::gpu::executor::DeviceRun;
use crate::graph::ExpressionGraph;
use crate::store::AnyField;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use watershed_fields::{FieldInit, IndexBox, Lifetime};
use watershed_operators::Parallelism;

mod split;

/// How to execute a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    /// One thread, the plan order.
    Serial,
    /// A pool of this many threads.
    Threaded(usize),
    /// Up to this many threads: the graph times its first executions on
    /// one thread and on this many, alternately, and keeps the faster
    /// ([`crate::adaptive`]; [`ExpressionGraph::adaptive_choice`] says
    /// which). The values do not depend on the choice.
    Adaptive(usize),
}

/// What one execution did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecutionReport {
    /// Wall time.
    pub elapsed: Duration,
    /// Scratch fields served from the pool's free lists.
    pub pool_hits: u64,
    /// Scratch fields that needed new memory.
    pub pool_misses: u64,
    /// Peak bytes of live scratch fields.
    pub peak_scratch_bytes: usize,
    /// Nodes run.
    pub nodes_run: usize,
}

/// Per-node start and end, for the timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceEvent {
    /// Node index.
    pub node: usize,
    /// Thread that ran it (0 for the caller's thread in serial mode).
    pub thread: usize,
    /// Start, from the execution's start.
    pub start: Duration,
    /// End, from the execution's start.
    pub end: Duration,
}

/// Timings gathered across executions.
#[derive(Debug)]
pub(crate) struct Statistics {
    pub calls: Vec<u64>,
    pub total: Vec<Duration>,
    pub trace: Vec<TraceEvent>,
    /// The GPU side of the last execution ([`crate::gpu::timeline`]).
    pub gpu_trace: Vec<crate::GpuSpan>,
    pub last: ExecutionReport,
    /// Every event since `start_recording`, timed from the recording's epoch.
    pub recording: Option<crate::trace::Recording>,
}

impl Statistics {
    pub fn new(nodes: usize) -> Self {
        Statistics {
            calls: vec![0; nodes],
            total: vec![Duration::ZERO; nodes],
            trace: Vec::with_capacity(nodes),
            gpu_trace: Vec::new(),
            last: ExecutionReport::default(),
            recording: None,
        }
    }
}

/// Most threads a graph may use: eight per core (beyond that a pool only
/// adds contention and memory).
pub fn max_threads() -> usize {
    std::thread::available_parallelism().map_or(8, |n| n.get()) * 8
}

/// The thread count of `mode`, refusing 0 and counts far above the cores.
fn checked_threads(mode: ExecutionMode) -> GraphResult<usize> {
    let (name, n) = match mode {
        ExecutionMode::Serial => return Ok(1),
        ExecutionMode::Threaded(n) => ("Threaded", n),
        ExecutionMode::Adaptive(n) => ("Adaptive", n),
    };
    if n == 0 {
        return Err(GraphError::Usage(format!(
            "ExecutionMode::{name}(0) has no thread to run on; use {name}(n) with n >= 1, or Serial"
        )));
    }
    if n > max_threads() {
        return Err(GraphError::Usage(format!(
            "ExecutionMode::{name}({n}) asks for far more threads than this machine's {} cores; use at most {}",
            max_threads() / 8,
            max_threads()
        )));
    }
    Ok(n)
}

/// Thread pools kept alive for reuse; the least recently used goes first.
const POOLS_KEPT: usize = 4;

/// The thread pool for `threads` threads, shared by every graph. At most
/// [`POOLS_KEPT`] pools are kept, so programs that try many thread counts
/// do not accumulate threads (a dropped pool's threads exit once its last
/// execution ends).
fn thread_pool(threads: usize) -> GraphResult<Arc<rayon::ThreadPool>> {
    type Kept = Vec<(usize, Arc<rayon::ThreadPool>)>;
    static POOLS: OnceLock<Mutex<Kept>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(p) = pools.iter().position(|(n, _)| *n == threads) {
        let entry = pools.remove(p);
        let pool = entry.1.clone();
        pools.push(entry);
        return Ok(pool);
    }
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("watershed-graph-{threads}-{i}"))
            .build()
            .map_err(|e| GraphError::Usage(format!("cannot start {threads} threads: {e}")))?,
    );
    if pools.len() >= POOLS_KEPT {
        pools.remove(0);
    }
    pools.push((threads, pool.clone()));
    Ok(pool)
}

/// Scheduler state behind the lock.
struct RunState {
    pending: Vec<usize>,
    ready: BinaryHeap<Ready>,
    running: usize,
    next_in_plan: usize,
    finished: usize,
    live_bytes: usize,
    peak_bytes: usize,
    error: Option<GraphError>,
    trace: Vec<TraceEvent>,
    gpu_trace: Vec<crate::GpuSpan>,
}

impl RunState {
    /// Nothing run yet: `pending[node]`, the parents each node waits for;
    /// room for `nodes` trace events.
    fn new(pending: Vec<usize>, nodes: usize) -> Self {
        RunState {
            pending,
            ready: BinaryHeap::with_capacity(nodes),
            running: 0,
            next_in_plan: 0,
            finished: 0,
            live_bytes: 0,
            peak_bytes: 0,
            error: None,
            trace: Vec::with_capacity(nodes),
            gpu_trace: Vec::new(),
        }
    }
}

/// What one launch of a node computes.
#[derive(Clone, Copy)]
enum Pass<'p> {
    /// Its whole region (and everything else it does).
    Whole,
    /// These boxes of a language node's region ([`split`]); `rim`: the
    /// last half, which also runs its fused modifiers and writes into the
    /// outputs the first half allocated.
    Boxes { boxes: &'p [IndexBox], rim: bool },
}

struct Shared<'g> {
    graph: &'g ExpressionGraph,
    state: Mutex<RunState>,
    remaining_users: Vec<AtomicUsize>,
    threads: usize,
    epoch: Instant,
}

impl ExpressionGraph {
    /// Runs every node once. Fields computed by expressions are up to date
    /// when it returns; scratch fields are back in the pool.
    ///
    /// Executions of one graph never overlap: a call from another thread
    /// waits for the running one. Calling it from inside
    /// [`ExpressionGraph::with_field`] on the same thread is an error (it
    /// would wait for itself), and so is reading a placeholder that was
    /// never bound, written or filled.
    pub fn execute(&self, mode: ExecutionMode) -> GraphResult<ExecutionReport> {
        if crate::graph::in_field_access(self) {
            return Err(GraphError::Usage(
                "execute was called inside with_field / with_field_mut of the same graph, which holds a field the execution must lock; copy what you need out of the closure and execute after it returns".into(),
            ));
        }
        let threads = checked_threads(mode)?;
        self.state.allocate_storage(&self.plan)?;
        let _serial = self
            .state
            .execution
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let ExecutionMode::Adaptive(up_to) = mode {
            let (chosen, timed) = self.adaptive_state().next_mode(up_to);
            let outcome = self.execute_locked(chosen, checked_threads(chosen)?);
            if let Ok(report) = &outcome {
                self.adaptive_state()
                    .record(up_to, chosen, timed, report.elapsed);
            }
            return outcome;
        }
        self.execute_locked(mode, threads)
    }

    /// The adaptive schedule's state, also after a panic elsewhere while it
    /// was locked (it holds only times).
    fn adaptive_state(&self) -> std::sync::MutexGuard<'_, crate::adaptive::AdaptiveState> {
        self.state
            .adaptive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The mode an [`ExecutionMode::Adaptive`] graph kept after its trials,
    /// or `None` before it chose (or when it never ran adaptively).
    pub fn adaptive_choice(&self) -> Option<ExecutionMode> {
        self.adaptive_state().choice()
    }

    /// [`Self::execute`] in `mode` (`Serial` or `Threaded`) on `threads`
    /// threads, with the execution lock held.
    fn execute_locked(&self, mode: ExecutionMode, threads: usize) -> GraphResult<ExecutionReport> {
        self.check_placeholders()?;
        // A split execution left half done: its scratch fields go back,
        // this execution computes everything.
        if self.state.split_pending.swap(false, Ordering::AcqRel) {
            self.release_all_scratch();
        }
        let on_devices = self.device_plan.gpu_nodes() > 0;
        if on_devices {
            self.check_devices()?;
        }
        let epoch = Instant::now();
        self.state.pool.reset_counters();
        let priority = self.measured_priorities();
        let remaining_users: Vec<AtomicUsize> = self
            .plan
            .users
            .iter()
            .map(|u| AtomicUsize::new(u.len()))
            .collect();
        let mut state = RunState::new(
            self.plan.parents.iter().map(Vec::len).collect(),
            self.plan.nodes.len(),
        );
        for (node, &p) in priority.iter().enumerate() {
            if state.pending[node] == 0 {
                state.ready.push(Ready { priority: p, node });
            }
        }
        let shared = Shared {
            graph: self,
            state: Mutex::new(state),
            remaining_users,
            threads,
            epoch,
        };
        match mode {
            ExecutionMode::Serial if on_devices => {
                self.run_on_devices(&shared, Parallelism::Serial, HostWalk::PlanOrder)
            }
            ExecutionMode::Threaded(_) | ExecutionMode::Adaptive(_) if on_devices => {
                let pool = thread_pool(threads)?;
                let walk = if self.runs_cpu_nodes_beside_gpu_nodes(threads) {
                    HostWalk::Concurrent(&priority)
                } else {
                    HostWalk::PlanOrder
                };
                pool.install(|| self.run_on_devices(&shared, Parallelism::Rayon, walk));
            }
            ExecutionMode::Serial => self.run_serial(&shared, &priority),
            ExecutionMode::Threaded(_) | ExecutionMode::Adaptive(_) => {
                let pool = thread_pool(threads)?;
                pool.install(|| rayon::scope(|scope| dispatch(&shared, scope, &priority, None)));
            }
        }
        let state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
        // Whatever ran (all of it, or part before an error) may have
        // written its outputs.
        for &slot in &self.plan.written {
            self.state.versions[slot].fetch_add(1, Ordering::AcqRel);
        }
        let statistics = self.state.pool.statistics();
        let report = ExecutionReport {
            elapsed: epoch.elapsed(),
            pool_hits: statistics.hits,
            pool_misses: statistics.misses,
            peak_scratch_bytes: state.peak_bytes,
            nodes_run: state.finished,
        };
        {
            let mut stats = self
                .state
                .statistics
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for event in &state.trace {
                stats.calls[event.node] += 1;
                stats.total[event.node] += event.end - event.start;
            }
            stats.trace.clear();
            stats.trace.extend_from_slice(&state.trace);
            stats.last = report;
            if let Some(recording) = stats.recording.as_mut() {
                recording.add(epoch, &state.trace);
                recording.add_gpu(epoch, &state.gpu_trace);
            }
            stats.gpu_trace = state.gpu_trace;
        }
        if let Some(error) = state.error {
            self.release_all_scratch();
            return Err(error);
        }
        if state.finished != self.plan.nodes.len() {
            self.release_all_scratch();
            return Err(GraphError::Native(format!(
                "the scheduler stopped after {} of {} nodes (memory budget {:?})",
                state.finished,
                self.plan.nodes.len(),
                self.plan.budget
            )));
        }
        Ok(report)
    }

    /// Refuses to run when a placeholder a node reads was never bound,
    /// written or filled, naming it and its reader.
    fn check_placeholders(&self) -> GraphResult<()> {
        for (slot, info) in self.plan.fields.iter().enumerate() {
            if info.placeholder
                && !self.state.provided[slot].load(std::sync::atomic::Ordering::Acquire)
                && let Some(&reader) = self.plan.users[slot]
                    .iter()
                    .find(|&&u| !self.plan.nodes[u].outputs.contains(&slot))
            {
                return Err(GraphError::PlaceholderNotSet {
                    tag: info.tag.clone(),
                    reader: self.plan.nodes[reader].name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Refuses to run a plan with nodes on a GPU this machine cannot use,
    /// naming the first such node, the device, and why.
    fn check_devices(&self) -> GraphResult<()> {
        for &n in &self.plan.order {
            let crate::node::Target::Gpu(ordinal) = self.device_plan.targets[n] else {
                continue;
            };
            if let Some(reason) = watershed_fields::gpu::gpu_unavailable_reason(ordinal) {
                return Err(GraphError::DeviceUnavailable {
                    node: self.plan.nodes[n].name.clone(),
                    device: watershed_fields::Device::Gpu(ordinal),
                    reason: format!(
                        "{reason}; place the graph with PlacementPolicy::Cpu to run it on this machine"
                    ),
                });
            }
        }
        Ok(())
    }

    /// True when a plan with GPU nodes runs its nodes as tasks on the
    /// pool's `threads` threads ([`HostWalk::Concurrent`]) rather than in
    /// plan order on one: it has CPU nodes, more than one thread to run
    /// them on, no memory budget (which needs the plan order) and no step
    /// replay (which records the stream work of one thread).
    fn runs_cpu_nodes_beside_gpu_nodes(&self, threads: usize) -> bool {
        threads > 1
            && self.device_plan.gpu_nodes() < self.plan.nodes.len()
            && self.plan.budget.is_none()
            && self.step_replay() != crate::StepReplay::CudaGraph
    }

    /// Runs a plan with GPU nodes, carrying out the stream protocol (see
    /// `gpu/executor.rs`): the prologue, each node's steps before it, the node
    /// (a GPU node only enqueues its kernels; CPU nodes run with
    /// `parallelism`), its steps after it, and the epilogue. `walk` says
    /// whether one thread walks the nodes in plan order or the pool runs
    /// them as tasks as they become ready.
    fn run_on_devices(&self, shared: &Shared<'_>, parallelism: Parallelism, walk: HostWalk<'_>) {
        let plan = self.device_plan.streams();
        let replay = self.step_replay() == crate::StepReplay::CudaGraph;
        let mut timeline = None;
        let run = |timeline: &mut Option<crate::gpu::timeline::Timeline>| -> GraphResult<()> {
            // The timeline's origins go down first, on idle streams.
            if self.gpu_timeline() && !replay {
                *timeline = Some(crate::gpu::timeline::Timeline::start(
                    self,
                    &plan.streams_used(),
                    shared.epoch,
                )?);
            }
            let device_run = DeviceRun {
                events: Mutex::new(vec![None; plan.events]),
                timeline: timeline.as_ref(),
            };
            // With replay, the stream work up to the epilogue is recorded
            // and enqueued as one step (`gpu/replay.rs`); an error drops
            // the recording, which enqueues what it logged.
            let recording = if replay {
                let gpu = self.replay_obstacle()?;
                let origin = plan
                    .streams_used()
                    .into_iter()
                    .find(|id| id.device == gpu)
                    .ok_or_else(|| {
                        GraphError::Native(format!(
                            "the stream plan uses no stream of GPU {gpu} (a bug in the plan; please report it)"
                        ))
                    })?;
                Some(self.gpu_stream(origin)?.begin_recording()?)
            } else {
                None
            };
            self.run_steps(&plan.prologue, &device_run)?;
            match walk {
                HostWalk::PlanOrder => {
                    for &node in &self.plan.order {
                        {
                            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                            state.live_bytes += self.output_bytes(node);
                            state.peak_bytes = state.peak_bytes.max(state.live_bytes);
                        }
                        self.run_node_on_devices(node, parallelism, shared, 0, &device_run, None)?;
                        shared
                            .state
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .finished += 1;
                    }
                }
                HostWalk::Concurrent(priority) => {
                    let lane = Mutex::new(());
                    let on_devices = OnDevices {
                        run: &device_run,
                        lane: &lane,
                    };
                    rayon::scope(|scope| dispatch(shared, scope, priority, Some(on_devices)));
                    // A node's error is in the state; the walk stops there.
                    let failed = shared
                        .state
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .error
                        .take();
                    if let Some(error) = failed {
                        return Err(error);
                    }
                }
            }
            if let Some(recording) = recording {
                self.enqueue_recorded(recording.finish()?)?;
            }
            self.run_steps(&plan.epilogue, &device_run)?;
            // Every stream has finished: the kernels' finiteness checks
            // can be read.
            self.first_not_finite()
        };
        let outcome = run(&mut timeline);
        if outcome.is_err() {
            self.drain_streams();
            self.state.finite_watches.clear();
        }
        // Every stream has finished: the GPU's marks can be read.
        let spans = match (&outcome, timeline) {
            (Ok(()), Some(timeline)) => timeline.finish(),
            _ => Ok(Vec::new()),
        };
        let outcome = outcome.and_then(|()| {
            let spans = spans?;
            shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .gpu_trace = spans;
            Ok(())
        });
        // Every stream has finished (the epilogue synchronised them, or
        // `drain_streams` did): scratch memory can go back to the pools.
        self.release_all_scratch();
        if let Err(error) = outcome {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.error.get_or_insert(error);
        }
    }

    /// One node of a plan with GPU nodes: its steps before it, the node on
    /// its device, its steps after it. With `lane` (a concurrent walk),
    /// the stream work of a GPU node, and the steps after a CPU node, are
    /// enqueued under it, so that one node's waits, kernels and records
    /// reach a stream together; a CPU node's host waits and its own run
    /// are outside it, so GPU nodes keep being enqueued meanwhile.
    fn run_node_on_devices(
        &self,
        node: usize,
        parallelism: Parallelism,
        shared: &Shared<'_>,
        thread: usize,
        run: &DeviceRun<'_>,
        lane: Option<&Mutex<()>>,
    ) -> GraphResult<()> {
        let enqueue = || lane.map(|lane| lane.lock().unwrap_or_else(|p| p.into_inner()));
        let steps = &self.device_plan.streams().nodes[node];
        match steps.stream {
            Some(id) => {
                let _lane = enqueue();
                self.run_steps(&steps.before, run)?;
                let stream = self.gpu_stream(id)?;
                let launch = || {
                    self.launch_on(
                        node,
                        parallelism,
                        shared,
                        thread,
                        Some(&stream),
                        Pass::Whole,
                    )
                };
                match run.timeline {
                    None => launch()?,
                    Some(timeline) => timeline.span(
                        id,
                        &stream,
                        crate::GpuWork::Kernels,
                        || self.plan.nodes[node].name.clone(),
                        launch,
                    )?,
                }
                self.run_steps(&steps.after, run)
            }
            None => {
                self.run_steps(&steps.before, run)?;
                self.launch_on(node, parallelism, shared, thread, None, Pass::Whole)?;
                let _lane = enqueue();
                self.run_steps(&steps.after, run)
            }
        }
    }

    /// Critical-path priorities from measured mean times (unit costs until
    /// every node has run once).
    fn measured_priorities(&self) -> Vec<f64> {
        let stats = self
            .state
            .statistics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if stats.calls.contains(&0) {
            return self.plan.priority.clone();
        }
        let cost: Vec<f64> = stats
            .total
            .iter()
            .zip(&stats.calls)
            .map(|(t, &c)| t.as_secs_f64() / c as f64)
            .collect();
        priorities(&self.plan.children, &cost)
    }

    fn run_serial(&self, shared: &Shared<'_>, _priority: &[f64]) {
        for &node in &self.plan.order {
            {
                let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                let bytes = self.output_bytes(node);
                state.live_bytes += bytes;
                state.peak_bytes = state.peak_bytes.max(state.live_bytes);
                if let Some(budget) = self.plan.budget
                    && state.live_bytes > budget
                {
                    // Cannot happen when the build-time check holds; kept so
                    // that the budget is a guarantee in every mode.
                    state.error = Some(GraphError::BudgetTooSmall {
                        budget,
                        needed: state.live_bytes,
                        expression: self.plan.nodes[node].name.clone(),
                    });
                    return;
                }
            }
            let outcome = self.launch(node, Parallelism::Serial, shared, 0);
            let released = self.finish(node, &shared.remaining_users);
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.live_bytes -= released;
            state.finished += 1;
            if let Err(error) = outcome {
                state.error = Some(error);
                return;
            }
        }
    }

    /// Bytes of the scratch fields `node` produces.
    fn output_bytes(&self, node: usize) -> usize {
        self.plan.nodes[node]
            .outputs
            .iter()
            .filter(|&&s| !self.plan.fields[s].persistent && self.plan.producer[s] == Some(node))
            .map(|&s| self.plan.fields[s].bytes)
            .sum()
    }

    /// Step 2: allocates `node`'s scratch outputs and runs it.
    fn launch(
        &self,
        node: usize,
        parallelism: Parallelism,
        shared: &Shared<'_>,
        thread: usize,
    ) -> GraphResult<()> {
        self.launch_on(node, parallelism, shared, thread, None, Pass::Whole)
    }

    /// [`Self::launch`] for a plan with GPU nodes: with `gpu`, the node's
    /// stream, its scratch outputs are allocated on that GPU and its
    /// kernels enqueued there; without, it runs on the CPU. Either way its
    /// fields are first made current on its device.
    fn launch_on(
        &self,
        node: usize,
        parallelism: Parallelism,
        shared: &Shared<'_>,
        thread: usize,
        gpu: Option<&watershed_fields::GpuStream>,
        pass: Pass<'_>,
    ) -> GraphResult<()> {
        let start = shared.epoch.elapsed();
        // The rim of a split node writes the outputs its clean box was
        // computed into.
        let allocate = !matches!(pass, Pass::Boxes { rim: true, .. });
        let graph_node = &self.plan.nodes[node];
        if self.device_plan.gpu_nodes() > 0 {
            let device = gpu.map_or(watershed_fields::Device::Cpu, |s| s.device());
            self.place_fields(node, device, gpu)?;
        }
        for &slot in &graph_node.outputs {
            let info = &self.plan.fields[slot];
            if let Some(stream) = gpu
                && !info.persistent
                && self.plan.producer[slot] == Some(node)
            {
                let mut field = AnyField::new_on_gpu(
                    info.location,
                    &info.tag.name,
                    &self.plan.patch,
                    Lifetime::Scratch,
                    stream.device(),
                    &self.state.pool,
                    (self.gpu_scratch() == crate::GpuScratch::StreamOrdered).then_some(stream),
                )?;
                // Zeroed, as on the CPU below.
                field.zero_on(stream)?;
                self.state.store.put(slot, Some(field));
            } else if allocate && !info.persistent && self.plan.producer[slot] == Some(node) {
                // Zero-filled: a consumer's stencil may read ghost points
                // this expression cannot compute.
                let field = AnyField::new(
                    info.location,
                    &info.tag.name,
                    &self.plan.patch,
                    Lifetime::Scratch,
                    &self.state.pool,
                    FieldInit::Zero,
                )?;
                self.state.store.put(slot, Some(field));
            }
        }
        let inputs = graph_node
            .inputs
            .iter()
            .map(|&s| {
                (
                    &self.plan.fields[s].tag,
                    self.state.store.slots[s]
                        .read()
                        .unwrap_or_else(|p| p.into_inner()),
                )
            })
            .collect();
        let outputs = graph_node
            .outputs
            .iter()
            .map(|&s| {
                (
                    &self.plan.fields[s].tag,
                    self.state.store.slots[s]
                        .write()
                        .unwrap_or_else(|p| p.into_inner()),
                )
            })
            .collect();
        let mut context = EvaluationContext {
            expression: &graph_node.name,
            inputs,
            outputs,
            parallelism,
            region: graph_node.region,
        };
        // A panic in the expression's code (a user's native closure) is
        // this node's error, so that the execution ends as after any other:
        // streams drained, scratch returned, the pool's threads alive.
        let evaluated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match gpu {
            None => match (pass, graph_node.form.language()) {
                (Pass::Whole, _) => graph_node.form.expression().evaluate(&mut context),
                (Pass::Boxes { boxes, rim }, Some(language)) => {
                    language.evaluate_boxes(&mut context, boxes, rim)
                }
                (Pass::Boxes { .. }, None) => Err(GraphError::Usage(format!(
                    "{} is not a language node and cannot run on part of its region",
                    graph_node.name
                ))),
            },
            Some(stream) => crate::gpu::executor::evaluate_on_gpu(
                node,
                &graph_node.form,
                &mut context,
                stream,
                &self.state.finite_watches,
                self.gpu_scratch(),
            ),
        }))
        .unwrap_or_else(|payload| {
            Err(GraphError::Panicked {
                message: panic_message(payload.as_ref()),
            })
        });
        let outcome = evaluated.map_err(|source| GraphError::Expression {
            expression: graph_node.name.clone(),
            source: Box::new(source),
        });
        drop(context);
        let end = shared.epoch.elapsed();
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.trace.push(TraceEvent {
            node,
            thread,
            start,
            end,
        });
        outcome
    }

    /// Step 3 (memory part): returns the scratch fields `node` was the last
    /// user of; gives back the bytes released.
    fn finish(&self, node: usize, remaining_users: &[AtomicUsize]) -> usize {
        let graph_node = &self.plan.nodes[node];
        let used = graph_node
            .inputs
            .iter()
            .chain(graph_node.outputs.iter().filter(|_| graph_node.modifier));
        let mut released = 0;
        for &slot in used {
            if !self.plan.fields[slot].persistent
                && remaining_users[slot].fetch_sub(1, Ordering::AcqRel) == 1
            {
                released += self.plan.fields[slot].bytes;
                drop(self.state.store.put(slot, None));
            }
        }
        // Scratch outputs nobody reads or modifies (an unused output of a
        // multi-output expression): their producer is their last user, as
        // in the memory plan.
        for &slot in &graph_node.outputs {
            if !self.plan.fields[slot].persistent
                && self.plan.producer[slot] == Some(node)
                && self.plan.users[slot].is_empty()
            {
                released += self.plan.fields[slot].bytes;
                drop(self.state.store.put(slot, None));
            }
        }
        released
    }

    fn release_all_scratch(&self) {
        for (slot, info) in self.plan.fields.iter().enumerate() {
            if !info.persistent {
                drop(self.state.store.put(slot, None));
            }
        }
    }
}

/// The text of a panic's payload (`panic!` with a literal or a format).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// How the host goes through a plan with GPU nodes.
#[derive(Clone, Copy)]
enum HostWalk<'p> {
    /// One thread, node after node in plan order (the only walk that step
    /// replay and memory budgets allow).
    PlanOrder,
    /// Nodes as tasks on the pool as they become ready, the most critical
    /// first (these priorities): CPU nodes run beside each other and beside
    /// the enqueueing of GPU nodes.
    Concurrent(&'p [f64]),
}

/// What a concurrent walk of a plan with GPU nodes shares between its
/// tasks: the events recorded so far, and the lane that keeps one node's
/// stream work together.
#[derive(Clone, Copy)]
struct OnDevices<'a> {
    run: &'a DeviceRun<'a>,
    lane: &'a Mutex<()>,
}

/// Starts every node that may start now; each completion calls it again.
/// With `on_devices`, each node carries out its steps of the stream
/// protocol around its run, and keeps its scratch fields until the
/// execution's end (GPU kernels may still read them).
fn dispatch<'s>(
    shared: &'s Shared<'s>,
    scope: &rayon::Scope<'s>,
    priority: &'s [f64],
    on_devices: Option<OnDevices<'s>>,
) {
    let graph = shared.graph;
    loop {
        let node = {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.error.is_some() || state.running >= shared.threads {
                return;
            }
            let chosen = match graph.plan.budget {
                Some(budget) => {
                    // Strict plan order under a budget (see the module docs).
                    let Some(&next) = graph.plan.order.get(state.next_in_plan) else {
                        return;
                    };
                    if state.pending[next] != 0
                        || state.live_bytes + graph.output_bytes(next) > budget
                    {
                        return;
                    }
                    state.next_in_plan += 1;
                    next
                }
                None => match state.ready.pop() {
                    Some(Ready { node, .. }) => node,
                    None => return,
                },
            };
            state.running += 1;
            state.live_bytes += graph.output_bytes(chosen);
            state.peak_bytes = state.peak_bytes.max(state.live_bytes);
            chosen
        };
        scope.spawn(move |scope| {
            let thread = rayon::current_thread_index().unwrap_or(0);
            let (outcome, released) = match on_devices {
                None => (
                    graph.launch(node, Parallelism::Rayon, shared, thread),
                    graph.finish(node, &shared.remaining_users),
                ),
                Some(on) => (
                    graph.run_node_on_devices(
                        node,
                        Parallelism::Rayon,
                        shared,
                        thread,
                        on.run,
                        Some(on.lane),
                    ),
                    0,
                ),
            };
            {
                let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                state.running -= 1;
                state.finished += 1;
                state.live_bytes -= released;
                match outcome {
                    Err(error) => {
                        state.error.get_or_insert(error);
                    }
                    Ok(()) => {
                        for &child in &graph.plan.children[node] {
                            state.pending[child] -= 1;
                            if state.pending[child] == 0 && graph.plan.budget.is_none() {
                                state.ready.push(Ready {
                                    priority: priority[child],
                                    node: child,
                                });
                            }
                        }
                    }
                }
            }
            dispatch(shared, scope, priority, on_devices);
        });
    }
}
