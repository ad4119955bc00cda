//! The momentum stages of an incompressible flow on the patches of a
//! decomposed grid, and the velocity's time levels they keep (issue 51).
//!
//! A stage of [`IncompressibleFlow`](crate::IncompressibleFlow) is an
//! explicit part (every component's right-hand side and Shu-Osher update,
//! most of the kernels) and the projection (the divergence, the Poisson
//! solve, the correction, the reductions). Built with
//! [`IncompressibleFlowBuilder::patches`](crate::IncompressibleFlowBuilder::patches),
//! the explicit part runs here, one graph per patch this rank owns (a
//! [`PatchedGraphs`]).
//!
//! ## The state on the patches (the projection on the patches)
//!
//! Each patch's graph keeps the velocity's levels (`now`, the step's
//! `start`, and `next`, which receives the corrected velocity). A stage:
//!
//! 1. exchanges the seams and periodic images of `now` between the
//!    patches ([`PatchedGraphs::exchange`]): every ghost a stage reads
//!    then holds the whole domain's value there, and the patch's own
//!    velocity conditions at the stage's time fill its physical ghosts
//!    (over the whole allocated extent across each side, corners
//!    included), as the whole domain's graph fills them. Where the flow's
//!    own velocity was written since the patches last gave it theirs
//!    (initial values, a restart: [`ExpressionGraph::field_version`]
//!    tells), the patches take their windows of it instead, ghosts
//!    included;
//! 2. computes `u*` on each interior, with the same kernels: coordinates
//!    are global and the conditions apply only on the domain's sides, so
//!    every interior value has the bits of the whole domain's;
//! 3. the projection on the patches (`crate::flow_projection`) solves for
//!    `psi` and corrects `u*` in a graph per patch, whose result is copied
//!    into `next` here ([`FlowPatches::take_corrected`]); the levels then
//!    rotate in each patch's graph as in the whole domain's.
//!
//! After a step's last stage a graph per patch reduces the new velocity
//! (`crate::flow_reductions`). The interiors of `now` of every patch of
//! every rank are gathered in patch order
//! ([`RankLink::gather_in_rank_order`]) into the flow's own graph when
//! something reads the whole domain (dumps, checkpoints, a case's lines).
//!
//! ## The state on the whole domain (the projection replicated)
//!
//! With
//! [`IncompressibleFlowBuilder::replicated_projection`](crate::IncompressibleFlowBuilder::replicated_projection),
//! the flow's own graph holds the state and the whole projection: every
//! stage each patch graph receives its window of the whole domain's
//! levels, ghosts included, computes `u*`, and the interiors are gathered
//! into the flow's graph, where every rank solves the whole Poisson
//! problem with identical inputs and arithmetic, so the flow gives the
//! undecomposed flow's bits on any layout and any number of ranks (the
//! degenerate case of agglomerating the multigrid: no level decomposed).

use crate::error::{SolverError, SolverResult};
use crate::windows::{append_interior, copy_field, place_interior, take_window};
use std::cell::Cell;
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph, GraphError, GraphLocation, Tag};
use watershed_fields::ranks::RankLink;
use watershed_fields::{FieldLayout, IndexBox, Location, Patch, PatchLayout};
use watershed_fields::{FieldResult, on_face};
use watershed_operators::{Side, field, interior_sum};

/// Why a stage's momentum on the patches failed.
#[derive(Debug)]
pub(crate) enum MomentumFailure {
    /// A patch graph's execution failed; `offset` turns its cells global.
    Graph {
        error: Box<GraphError>,
        offset: [isize; 3],
    },
    /// Moving the fields between the whole domain and the patches failed.
    Solver(SolverError),
}

impl<E: Into<SolverError>> From<E> for MomentumFailure {
    fn from(error: E) -> Self {
        MomentumFailure::Solver(error.into())
    }
}

/// The momentum graphs of the patches one rank owns.
pub(crate) struct FlowPatches {
    layout: PatchLayout,
    link: Rc<dyn RankLink>,
    owned: Range<usize>,
    /// One per owned patch, in patch order.
    momentum: PatchedGraphs,
    active: Vec<usize>,
    /// Every patch of the layout, in patch order: its offset in the whole
    /// domain and the layout of each active component, what the gather
    /// places.
    parts: Vec<PatchPart>,
    /// The values each rank gives to the gather of each active component
    /// (in the order of `active`).
    counts: Vec<Vec<usize>>,
    /// Wall time spent copying windows and gathering.
    exchange_time: Cell<Duration>,
}

/// One patch as the gather sees it.
struct PatchPart {
    offset: [isize; 3],
    /// The layout of each active velocity component on the patch.
    components: Vec<FieldLayout>,
}

impl FlowPatches {
    /// The graphs `graph_of` builds for the patches of `layout` the rank
    /// of `link` owns; `active`: the velocity components.
    pub(crate) fn build(
        layout: PatchLayout,
        link: Rc<dyn RankLink>,
        active: &[usize],
        mut graph_of: impl FnMut(&Patch) -> SolverResult<ExpressionGraph>,
    ) -> SolverResult<Self> {
        let owned = layout.owned_by(link.rank(), link.ranks())?;
        let momentum = PatchedGraphs::build(layout.clone(), link.clone(), &mut graph_of)?;
        let parts = (0..layout.len())
            .map(|index| {
                let patch = layout.patch(index)?;
                Ok(PatchPart {
                    offset: patch.offset().map(|o| o as isize),
                    components: active
                        .iter()
                        .map(|&axis| component_layout(&patch, axis))
                        .collect(),
                })
            })
            .collect::<FieldResult<Vec<_>>>()?;
        let ranks = link.ranks();
        let counts = (0..active.len())
            .map(|component| {
                (0..ranks)
                    .map(|rank| {
                        Ok(layout
                            .owned_by(rank, ranks)?
                            .map(|i| parts[i].components[component].interior_len())
                            .sum())
                    })
                    .collect::<FieldResult<Vec<usize>>>()
            })
            .collect::<FieldResult<Vec<_>>>()?;
        Ok(FlowPatches {
            layout,
            link,
            owned,
            momentum,
            active: active.to_vec(),
            parts,
            counts,
            exchange_time: Cell::new(Duration::ZERO),
        })
    }

    /// The layout of the patches.
    pub(crate) fn layout(&self) -> &PatchLayout {
        &self.layout
    }

    /// This rank and the number of ranks.
    pub(crate) fn rank(&self) -> (usize, usize) {
        (self.link.rank(), self.link.ranks())
    }

    /// The patches this rank owns.
    pub(crate) fn owned(&self) -> Range<usize> {
        self.owned.clone()
    }

    /// The graphs with their patch indices.
    pub(crate) fn graphs(&self) -> Vec<(usize, &ExpressionGraph)> {
        self.owned.clone().zip(self.momentum.graphs()).collect()
    }

    /// Wall time spent moving velocities between the whole domain and the
    /// patches, and exchanging the state's seams.
    pub(crate) fn exchange_time(&self) -> Duration {
        self.exchange_time.get() + self.momentum.exchange_time()
    }

    fn spent(&self, started: Instant) {
        self.exchange_time
            .set(self.exchange_time.get() + started.elapsed());
    }

    /// One stage's momentum: the windows of `now` (and of `start`, when
    /// the stage reads it) from `whole` into each patch graph, its
    /// execution, and the gather of every patch's `provisional` interior
    /// into `whole`'s field `gathered` (collective: every rank calls it).
    /// `levels`: `[now, provisional, gathered]`.
    pub(crate) fn run_momentum(
        &self,
        whole: &ExpressionGraph,
        levels: [&[Tag; 3]; 3],
        start: Option<&[Tag; 3]>,
        mode: ExecutionMode,
    ) -> Result<(), MomentumFailure> {
        let [now, provisional, gathered] = levels;
        self.take_windows(whole, now)?;
        if let Some(start) = start {
            self.take_windows(whole, start)?;
        }
        self.execute(mode)?;
        self.gather(provisional, whole, gathered)?;
        Ok(())
    }

    /// The state level `now` of every owned patch ready for a stage of a
    /// flow whose state lives on the patches: its seams and periodic
    /// images exchanged between the patches (collective), after, when
    /// `whole`'s velocity was written since the patches last gave it
    /// theirs (`from_whole`: initial values, a restart), each patch took
    /// its window of it, ghosts included. Either way each ghost a stage
    /// reads holds the whole domain's value there, or is a physical ghost
    /// the patch's own conditions fill. The exchange runs in both cases,
    /// so that every rank makes the same collective calls even where only
    /// some ranks' velocity was written (it then rewrites the seams the
    /// windows brought with the same values).
    pub(crate) fn prepare_state(
        &self,
        whole: &ExpressionGraph,
        now: &[Tag; 3],
        from_whole: bool,
    ) -> Result<(), MomentumFailure> {
        if from_whole {
            self.take_windows(whole, now)?;
        }
        let tags: Vec<Tag> = self.active.iter().map(|&a| now[a].clone()).collect();
        self.momentum.exchange(&tags)?;
        Ok(())
    }

    /// Per active component (in the order of `active`), the sum of the
    /// squares of `now` over every patch's interior: each owned patch's
    /// sum, those of every rank gathered and added in patch order
    /// (collective), so the same bits on any number of ranks for one
    /// layout, and one patch's bits on one patch.
    pub(crate) fn sums_of_squares(&self, now: &[Tag; 3]) -> SolverResult<Vec<f64>> {
        let started = Instant::now();
        let components = self.active.len();
        let mut mine = Vec::with_capacity(self.owned.len() * components);
        for graph in self.momentum.graphs() {
            for &axis in &self.active {
                let sum = on_face!(axis, F => graph.with_field::<F, _>(&now[axis], |u| {
                    interior_sum(field(u) * field(u))
                })??);
                mine.push(sum);
            }
        }
        let all = self.gather_per_patch(&mine, components)?;
        let mut sums = vec![0.0; components];
        for patch in all.chunks(components) {
            for (sum, part) in sums.iter_mut().zip(patch) {
                *sum += part;
            }
        }
        self.spent(started);
        Ok(sums)
    }

    /// The sum of the velocity component normal to `side` over the
    /// domain's side (its last interior plane there): each owned patch
    /// that lies on the side sums its part, those of every rank gathered
    /// and added in patch order (collective), so the same bits on any
    /// number of ranks for one layout, and one patch's bits on one patch.
    pub(crate) fn side_sum(&self, now: &[Tag; 3], side: Side) -> SolverResult<f64> {
        let started = Instant::now();
        let axis = side.axis;
        let cells = self.layout.grid().cells()[axis];
        let mut mine = Vec::with_capacity(self.owned.len());
        for (graph, index) in self.momentum.graphs().iter().zip(self.owned.clone()) {
            let patch = self.layout.patch(index)?;
            let on_side = if side.plus {
                patch.offset()[axis] + patch.cells()[axis] == cells
            } else {
                patch.offset()[axis] == 0
            };
            let sum = if on_side {
                on_face!(axis, F => graph.with_field::<F, _>(&now[axis], |u| -> SolverResult<f64> {
                    Ok(plane_sum(u.layout(), u.values()?, side))
                })??)
            } else {
                0.0
            };
            mine.push(sum);
        }
        let all = self.gather_per_patch(&mine, 1)?;
        self.spent(started);
        Ok(all.iter().fold(0.0, |sum, part| sum + part))
    }

    /// `mine` (`per_patch` values for each owned patch, in patch order)
    /// and every other rank's, in patch order (collective).
    pub(crate) fn gather_per_patch(
        &self,
        mine: &[f64],
        per_patch: usize,
    ) -> SolverResult<Vec<f64>> {
        let ranks = self.link.ranks();
        let counts = (0..ranks)
            .map(|rank| Ok(self.layout.owned_by(rank, ranks)?.len() * per_patch))
            .collect::<FieldResult<Vec<usize>>>()?;
        Ok(self.link.gather_in_rank_order(mine, &counts)?)
    }

    /// Copies into every owned patch graph its window of `whole`'s
    /// velocity `now`, ghosts included (not collective): the patches then
    /// hold a velocity written into the whole domain (initial values, a
    /// restart) before their next stage takes it.
    pub(crate) fn take_state(&self, whole: &ExpressionGraph, now: &[Tag; 3]) -> SolverResult<()> {
        self.take_windows(whole, now)
            .map_err(|failure| match failure {
                MomentumFailure::Solver(error) => error,
                MomentumFailure::Graph { error, .. } => (*error).into(),
            })
    }

    /// Copies into every owned patch graph its window of `whole`'s fields
    /// `tags`, ghosts included.
    fn take_windows(
        &self,
        whole: &ExpressionGraph,
        tags: &[Tag; 3],
    ) -> Result<(), MomentumFailure> {
        let started = Instant::now();
        for (graph, index) in self.momentum.graphs().iter().zip(self.owned.clone()) {
            let offset = self.parts[index].offset;
            for &axis in &self.active {
                on_face!(axis, F => copy_window::<F>(whole, &tags[axis], graph, offset)?);
            }
        }
        self.spent(started);
        Ok(())
    }

    /// Executes every owned patch's momentum graph; an error keeps the
    /// patch's offset.
    pub(crate) fn execute(&self, mode: ExecutionMode) -> Result<(), MomentumFailure> {
        for (graph, index) in self.momentum.graphs().iter().zip(self.owned.clone()) {
            graph
                .execute(mode)
                .map_err(|error| MomentumFailure::Graph {
                    error: Box::new(error),
                    offset: self.parts[index].offset,
                })?;
        }
        Ok(())
    }

    /// Gathers the interior of every patch's field `from` (of every rank,
    /// in patch order) into `whole`'s field `into` (collective), one
    /// component at a time: what travels is held for one component, not
    /// for the whole velocity.
    pub(crate) fn gather(
        &self,
        from: &[Tag; 3],
        whole: &ExpressionGraph,
        into: &[Tag; 3],
    ) -> SolverResult<()> {
        self.gather_into(from, whole, into, false).map(|_| ())
    }

    /// [`Self::gather`] onto rank 0 alone (collective): rank 0 places every
    /// patch's interior into `whole`'s field `into` and returns `true`;
    /// the others send theirs, touch `whole` not at all (its fields are
    /// not even allocated there) and return `false`.
    pub(crate) fn gather_to_root(
        &self,
        from: &[Tag; 3],
        whole: &ExpressionGraph,
        into: &[Tag; 3],
    ) -> SolverResult<bool> {
        self.gather_into(from, whole, into, true)
    }

    /// [`Self::gather`] onto every rank, or onto rank 0 alone (`to_root`);
    /// whether this rank received the whole domain.
    fn gather_into(
        &self,
        from: &[Tag; 3],
        whole: &ExpressionGraph,
        into: &[Tag; 3],
        to_root: bool,
    ) -> SolverResult<bool> {
        let started = Instant::now();
        let mut received = false;
        for (component, &axis) in self.active.iter().enumerate() {
            let counts = &self.counts[component];
            let mut mine = Vec::with_capacity(counts[self.link.rank()]);
            for graph in self.momentum.graphs() {
                on_face!(axis, F => graph.with_field::<F, _>(&from[axis], |u| {
                    append_interior(u, &mut mine)
                })??);
            }
            let all = if to_root {
                self.link.gather_to_root(&mine, counts)?
            } else {
                Some(self.link.gather_in_rank_order(&mine, counts)?)
            };
            drop(mine);
            let Some(all) = all else {
                continue;
            };
            on_face!(axis, F => whole.with_field_mut::<F, _>(&into[axis], |u| -> SolverResult<()> {
                let mut at = 0;
                for part in &self.parts {
                    at = place_interior(&all, at, &part.components[component], part.offset, u)?;
                }
                Ok(())
            })??);
            received = true;
        }
        self.spent(started);
        Ok(received)
    }

    /// The values of `window`'s interior points (a box of the whole
    /// domain, `window` with no ghosts; a face field's interior as
    /// [`FieldLayout`] lays it out) of every patch's field, in patch order
    /// (collective): each owned patch gives the points of its own
    /// interior that lie in the window, read by `read` (its field in
    /// patch-local indices), and every rank assembles them into a new
    /// field of location `L` on `window`. What a case reads along a line
    /// or a few rows, without the whole domain.
    pub(crate) fn gather_window<L: Location>(
        &self,
        window: &Patch,
        read: impl Fn(usize, &mut dyn FnMut(&watershed_fields::SpatialField<L>)) -> SolverResult<()>,
    ) -> SolverResult<watershed_fields::SpatialField<L>> {
        let started = Instant::now();
        let target = FieldLayout::new(window, L::KIND);
        let shift_of = |patch: &Patch| patch.offset().map(|o| o as isize);
        let window_box = {
            let interior = target.interior();
            let at = shift_of(window);
            IndexBox::new(
                [0, 1, 2].map(|a| interior.lo[a] + at[a]),
                [0, 1, 2].map(|a| interior.hi[a] + at[a]),
            )
        };
        // Each patch's interior points in the window, in global indices.
        let parts = (0..self.layout.len())
            .map(|index| {
                let patch = self.layout.patch(index)?;
                let interior = FieldLayout::new(&patch, L::KIND).interior();
                let at = shift_of(&patch);
                let global = IndexBox::new(
                    [0, 1, 2].map(|a| interior.lo[a] + at[a]),
                    [0, 1, 2].map(|a| interior.hi[a] + at[a]),
                );
                Ok((at, global.intersect(&window_box)))
            })
            .collect::<SolverResult<Vec<_>>>()?;
        let ranks = self.link.ranks();
        let counts = (0..ranks)
            .map(|rank| {
                Ok(self
                    .layout
                    .owned_by(rank, ranks)?
                    .map(|index| parts[index].1.len())
                    .sum())
            })
            .collect::<FieldResult<Vec<usize>>>()?;
        let mut mine = Vec::with_capacity(counts[self.link.rank()]);
        for (position, index) in self.owned.clone().enumerate() {
            let (at, points) = parts[index];
            let mut failure = None;
            read(position, &mut |field| {
                let values = match field.values() {
                    Ok(values) => values,
                    Err(error) => {
                        failure = Some(error);
                        return;
                    }
                };
                let layout = field.layout();
                for point in points.iter() {
                    let local = [0, 1, 2].map(|a| point[a] - at[a]);
                    mine.push(values[layout.linear_index(local)]);
                }
            })?;
            if let Some(error) = failure {
                return Err(error.into());
            }
        }
        let all = self.link.gather_in_rank_order(&mine, &counts)?;
        let mut field = watershed_fields::SpatialField::<L>::new(
            "a window of the whole domain",
            window,
            watershed_fields::Device::Cpu,
        )?;
        let values = field.values_mut()?;
        let at = shift_of(window);
        let mut next = all.iter();
        for (_, points) in &parts {
            for point in points.iter() {
                let local = [0, 1, 2].map(|a| point[a] - at[a]);
                if let Some(&value) = next.next() {
                    values[target.linear_index(local)] = value;
                }
            }
        }
        self.spent(started);
        Ok(field)
    }

    /// Copies each owned patch's corrected velocity `next` from its graph
    /// in `corrected` (one per owned patch, in patch order) into the same
    /// level of its momentum graph, ghosts included.
    pub(crate) fn take_corrected(
        &self,
        corrected: &[ExpressionGraph],
        next: &[Tag; 3],
    ) -> SolverResult<()> {
        let started = Instant::now();
        for (from, to) in corrected.iter().zip(self.momentum.graphs()) {
            for &axis in &self.active {
                on_face!(axis, F => copy_field::<F>(from, &next[axis], to, &next[axis])?);
            }
        }
        self.spent(started);
        Ok(())
    }
}

/// The sum of `values` (laid out by `layout`) over the last interior
/// plane on `side`, in the layout's order.
pub(crate) fn plane_sum(layout: &FieldLayout, values: &[f64], side: Side) -> f64 {
    let axis = side.axis;
    let mut plane = layout.interior();
    let at = if side.plus {
        plane.hi[axis] - 1
    } else {
        plane.lo[axis]
    };
    plane.lo[axis] = at;
    plane.hi[axis] = at + 1;
    plane
        .iter()
        .map(|i| values[layout.linear_index(i)])
        .sum::<f64>()
}

/// The layout of velocity component `axis` (on the faces normal to it) on
/// `patch`.
fn component_layout(patch: &Patch, axis: usize) -> FieldLayout {
    let kind = on_face!(axis, F => <F as Location>::KIND);
    FieldLayout::new(patch, kind)
}

/// Copies the window of the whole domain's field `tag` that `part`'s
/// patch (at `offset`) covers, ghosts included, into `part`'s field `tag`.
fn copy_window<F: GraphLocation>(
    whole: &ExpressionGraph,
    tag: &Tag,
    part: &ExpressionGraph,
    offset: [isize; 3],
) -> SolverResult<()> {
    whole.with_field::<F, _>(tag, |from| {
        part.with_field_mut::<F, _>(tag, |to| take_window(from, to, offset, true))?
    })?
}
