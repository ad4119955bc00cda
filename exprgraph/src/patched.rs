//! Expression graphs on the patches of a decomposed grid (issue 51): one
//! graph per patch a rank owns, built by one recipe on its own
//! [`Patch`], the ghost points of chosen fields (cell-centred or on faces,
//! a staggered velocity's) exchanged across patch seams
//! ([`watershed_fields::halo`]), and fields over the whole domain
//! gathered from and put back into the patches. What
//! `watershed_solvers::PatchedTransport` does for transport solvers, for a
//! graph built by hand (the ExprLib test's, a user's own).
//!
//! Why a decomposed graph gives the whole domain's bits: each patch's
//! graph computes its interior from its ghost layers with the arithmetic
//! of the whole domain (coordinates are global), so once every ghost point
//! holds the value the whole domain holds there (the exchange copies the
//! owner's value, and periodic images across patches), every interior
//! value is the whole domain's. A graph's own conditions (modifiers) fill
//! what the exchange leaves: physical boundaries, and a periodic axis the
//! patch spans. The exchange also copies a patch's own periodic images, so
//! a graph without any condition is complete after it.
//!
//! Reductions: each patch's graph reduces its own interior; after an
//! execution every reduction's raw partial result is gathered from every
//! rank and combined in patch order ([`PatchedGraphs::execute`]), so the
//! parameter holds the whole domain's value, the same bits on any number
//! of ranks for one layout. A node that read the parameter during the
//! execution would have read one patch's part: such a recipe is refused.
//!
//! Collective calls ([`PatchedGraphs::exchange`], the gathers, and on
//! several patches an execution of a graph with reductions) must be
//! made by every rank in the same order; a rank that fails returns its
//! error, and the caller of a run on several ranks must end the job.

use crate::error::{GraphError, GraphResult};
use crate::graph::ExpressionGraph;
use crate::overlap::{OverlapPlan, stale_sides};
use crate::scheduler::ExecutionMode;
use crate::store::GraphLocation;
use crate::tag::Tag;
use std::cell::{Cell, OnceCell, RefCell};
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};
use watershed_fields::halo::{
    CopyRun, HaloBuffers, HaloFields, HaloPlan, HaloRoute, copy_runs_between, exchange_during,
};
use watershed_fields::ranks::RankLink;
use watershed_fields::{
    CellCentre, FieldError, FieldLayout, FieldResult, LocationKind, Patch, PatchLayout,
    SpatialField, XFace, YFace, ZFace,
};
use watershed_operators::gpu_points::PointBatch;

/// The graphs of the patches of `layout` one rank owns.
///
/// ```
/// use std::rc::Rc;
/// use watershed_exprgraph::patched::PatchedGraphs;
/// use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, Tag};
/// use watershed_fields::{CellCentre, GhostWidth, Grid, LocationKind, PatchLayout, ranks::SingleProcess};
/// use watershed_exprgraph::operators::{divergence, gradient};
/// use watershed_fields::XFace;
/// let grid = Grid::new([16, 1, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, false, false]);
/// let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1))?;
/// let (phi, next) = (Tag::none("phi"), Tag::none("next"));
/// let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
///     let mut factory = Factory::new();
///     factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
///     let p = phi.clone();
///     factory.register(LanguageExpression::new::<CellCentre>(next.clone(), move |s| {
///         s.field::<CellCentre>(&p) + 0.1 * divergence::<XFace>(gradient::<XFace>(s.field(&p)))
///     }))?;
///     let options = GraphOptions { persistent: vec![next.clone()], ..Default::default() };
///     ExpressionGraph::build(&factory, &[next.clone()], patch, &options)
/// })?;
/// graphs.set_field::<CellCentre>(&phi, |[x, _, _]| (6.283185307179586 * x).sin())?;
/// graphs.exchange(&[phi.clone()])?; // the seams and the periodic images
/// graphs.execute(ExecutionMode::Serial)?;
/// let whole = graphs.whole_field::<CellCentre>(&next)?;
/// assert_eq!(whole.layout().interior_extent(), [16, 1, 1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PatchedGraphs {
    layout: PatchLayout,
    link: Rc<dyn RankLink>,
    owned: Range<usize>,
    /// One per owned patch, in patch order.
    graphs: Vec<ExpressionGraph>,
    /// This rank's part of the layout's exchange, per location
    /// ([`location_index`]), worked out when first exchanged.
    routes: [OnceCell<HaloRoute>; 4],
    /// The exchange's scratch storage, reused.
    buffers: RefCell<HaloBuffers>,
    /// Wall time spent in exchanges and gathers (interior work run
    /// during an exchange excluded).
    exchange_time: Cell<Duration>,
    /// Wall time of the interior work run while exchanges were in flight.
    interior_during_exchanges: Cell<Duration>,
    /// Each owned graph's split around the exchange of the tags it was
    /// made for ([`Self::exchange_and_execute`]); `None` inside when a
    /// graph cannot be split.
    split: RefCell<Option<Split>>,
}

/// The exchanged tags a split was made for, and each owned graph's
/// [`OverlapPlan`] (`None` when a graph cannot be split).
type Split = (Vec<Tag>, Option<Vec<OverlapPlan>>);

impl std::fmt::Debug for PatchedGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchedGraphs")
            .field("patches", &self.layout.counts())
            .field("rank", &self.link.rank())
            .field("ranks", &self.link.ranks())
            .field("owned", &self.owned)
            .finish()
    }
}

impl PatchedGraphs {
    /// Builds the graph of each patch of `layout` the rank of `link` owns
    /// with `recipe` (the recipe a whole-domain run uses, given the patch
    /// instead of the whole domain). An error naming the patch when the
    /// recipe builds on another patch, or, on more than one patch, when
    /// its graph holds an iterative solve (it would solve on the patch
    /// alone) or a reduction that a node of the same graph reads (it
    /// would read the patch's partial result). Reductions read after an
    /// execution are combined across the patches
    /// ([`Self::execute`]).
    pub fn build<E: From<GraphError>>(
        layout: PatchLayout,
        link: Rc<dyn RankLink>,
        mut recipe: impl FnMut(&Patch) -> Result<ExpressionGraph, E>,
    ) -> Result<Self, E> {
        let field = |e: FieldError| E::from(GraphError::Field(e));
        let owned = layout.owned_by(link.rank(), link.ranks()).map_err(field)?;
        let mut graphs = Vec::with_capacity(owned.len());
        for index in owned.clone() {
            let patch = layout.patch(index).map_err(field)?;
            let graph = recipe(&patch)?;
            let built = graph.patch();
            if *built != patch {
                return Err(E::from(GraphError::Usage(format!(
                    "the recipe for patch {index} built a graph on cells {:?} at {:?} with {:?} ghosts, but the patch has {:?} at {:?} with {:?}; build on the patch the recipe is given",
                    built.cells(),
                    built.offset(),
                    built.ghosts(),
                    patch.cells(),
                    patch.offset(),
                    patch.ghosts()
                ))));
            }
            if layout.len() > 1 {
                refuse_whole_domain_nodes(&graph, index, layout.len()).map_err(E::from)?;
            }
            if let Some(first) = graphs.first() {
                same_reductions(first, &graph, owned.start, index).map_err(E::from)?;
            }
            graphs.push(graph);
        }
        Ok(PatchedGraphs {
            layout,
            link,
            owned,
            graphs,
            routes: Default::default(),
            buffers: RefCell::new(HaloBuffers::default()),
            exchange_time: Cell::new(Duration::ZERO),
            interior_during_exchanges: Cell::new(Duration::ZERO),
            split: RefCell::new(None),
        })
    }

    /// The patch layout.
    pub fn layout(&self) -> &PatchLayout {
        &self.layout
    }

    /// The patches this rank owns.
    pub fn owned(&self) -> Range<usize> {
        self.owned.clone()
    }

    /// The graphs of the owned patches, in patch order.
    pub fn graphs(&self) -> &[ExpressionGraph] {
        &self.graphs
    }

    /// The link between the ranks.
    pub fn link(&self) -> &dyn RankLink {
        self.link.as_ref()
    }

    /// Wall time this rank spent in exchanges and gathers.
    pub fn exchange_time(&self) -> Duration {
        self.exchange_time.get()
    }

    /// Executes every owned patch's graph in patch order, then sets each
    /// reduction's parameter to its value over the whole domain: every
    /// patch's partial result (of every rank, collective on more than one
    /// patch) combined in patch order, then finished
    /// ([`LanguageReduction::finishing_with`](crate::LanguageReduction::finishing_with))
    /// and checked where the reduction asks for it. A minimum or maximum
    /// is the whole domain's bit for bit; a sum adds the patches' sums in
    /// patch order, the same on any number of ranks for one layout (to
    /// rounding the whole domain's, which adds in another order). A
    /// patch's error is returned as it is (its points are the patch's
    /// own; add the patch's offset to place them in the grid).
    pub fn execute(&self, mode: ExecutionMode) -> GraphResult<()> {
        for graph in &self.graphs {
            graph.execute(mode)?;
        }
        self.combine_reductions()
    }

    /// Every owned graph's reductions' partial results gathered from every
    /// rank, combined in patch order and published in every owned graph
    /// (see [`Self::execute`]). Nothing with one patch, whose graph
    /// published the whole domain's values.
    fn combine_reductions(&self) -> GraphResult<()> {
        if self.layout.len() == 1 {
            return Ok(());
        }
        let reductions: Vec<Vec<&crate::LanguageReduction>> = self
            .graphs
            .iter()
            .map(ExpressionGraph::reductions)
            .collect();
        let Some(count) = reductions.first().map(Vec::len).filter(|&n| n > 0) else {
            return Ok(());
        };
        let mine: Vec<f64> = reductions
            .iter()
            .flat_map(|own| own.iter().map(|r| r.last_raw()))
            .collect();
        let ranks = self.link.ranks();
        let counts = (0..ranks)
            .map(|rank| Ok(self.layout.owned_by(rank, ranks)?.len() * count))
            .collect::<FieldResult<Vec<usize>>>()?;
        let started = Instant::now();
        let all = self.link.gather_in_rank_order(&mine, &counts);
        self.spent(started);
        let all = all?;
        for (k, reduction) in reductions[0].iter().enumerate() {
            let kind = reduction.reduction();
            let total = all
                .iter()
                .skip(k)
                .step_by(count)
                .copied()
                .reduce(|a, b| kind.merge(a, b))
                .unwrap_or_else(|| kind.identity());
            for own in &reductions {
                own[k].publish(total)?;
            }
        }
        Ok(())
    }

    /// Rotates the storage of `tags` in every owned patch's graph
    /// ([`ExpressionGraph::rotate_fields`]).
    pub fn rotate_fields(&self, tags: &[Tag]) -> GraphResult<()> {
        for graph in &self.graphs {
            graph.rotate_fields(tags)?;
        }
        Ok(())
    }

    /// Sets the field `tag` (at location `L`) of every owned patch,
    /// ghosts included, to `value` at each point's global coordinates: the
    /// values a graph over the whole domain gets at the same points.
    pub fn set_field<L: GraphLocation>(
        &self,
        tag: &Tag,
        value: impl Fn([f64; 3]) -> f64,
    ) -> GraphResult<()> {
        for graph in &self.graphs {
            graph.set_field::<L>(tag, &value)?;
        }
        Ok(())
    }

    /// Fills the ghost points of the fields `tags` of every owned patch
    /// from the patches that own those points (seams, and periodic
    /// images, a patch's own included), on this rank or another: the
    /// fields of one location travel together, in one message per pair of
    /// ranks. Collective. Returns how many points this rank wrote (0 with
    /// one patch, whose graph's own conditions fill its periodic images).
    /// An error naming the tag when a graph has no such field.
    pub fn exchange(&self, tags: &[Tag]) -> GraphResult<usize> {
        if self.layout.len() == 1 || tags.is_empty() {
            return Ok(0);
        }
        self.exchange_groups(self.by_location(tags)?)
    }

    /// The exchange of each location's tags in turn, nothing run during
    /// the messages; returns the points written.
    fn exchange_groups(&self, groups: Vec<(LocationKind, Vec<Tag>)>) -> GraphResult<usize> {
        let mut written = 0;
        for (kind, tags) in groups {
            written +=
                self.exchange_around(kind, &tags, &mut |_| Ok(()), &Cell::new(Duration::ZERO))?;
        }
        Ok(written)
    }

    /// `tags` grouped by their location in the owned graphs, in the order
    /// of [`location_index`] (the same on every rank).
    fn by_location(&self, tags: &[Tag]) -> GraphResult<Vec<(LocationKind, Vec<Tag>)>> {
        let mut groups: [Vec<Tag>; 4] = Default::default();
        for tag in tags {
            let mut location = None;
            for (graph, index) in self.graphs.iter().zip(self.owned.clone()) {
                let Some(info) = graph.field_info(tag) else {
                    return Err(GraphError::Usage(format!(
                        "field {tag} is not a field of patch {index}'s graph: exchange fields the recipe's graphs hold"
                    )));
                };
                match location {
                    Some(kind) if kind != info.location => {
                        return Err(GraphError::Usage(format!(
                            "field {tag} lies at {kind:?} in one patch's graph and at {:?} in patch {index}'s: build every patch's graph with one recipe",
                            info.location
                        )));
                    }
                    _ => location = Some(info.location),
                }
            }
            let Some(kind) = location else {
                continue;
            };
            groups[location_index(kind)].push(tag.clone());
        }
        Ok(LOCATIONS
            .into_iter()
            .zip(groups)
            .filter(|(_, tags)| !tags.is_empty())
            .collect())
    }

    /// This rank's route through the exchange of fields at `kind`.
    fn route(&self, kind: LocationKind) -> GraphResult<&HaloRoute> {
        let cell = &self.routes[location_index(kind)];
        if let Some(route) = cell.get() {
            return Ok(route);
        }
        let plan = HaloPlan::new(&self.layout, kind)?;
        let route = HaloRoute::new(&plan, &self.layout, self.link.rank(), self.link.ranks())?;
        Ok(cell.get_or_init(|| route))
    }

    /// The exchange of `tags` (all at `kind`) with `work` run while the
    /// messages travel ([`exchange_during`]); `worked` holds the wall time
    /// `work` took, which counts as interior work, not as exchange time.
    fn exchange_around(
        &self,
        kind: LocationKind,
        tags: &[Tag],
        work: &mut watershed_fields::ranks::Work<'_>,
        worked: &Cell<Duration>,
    ) -> GraphResult<usize> {
        let route = self.route(kind)?;
        let started = Instant::now();
        let (exchanged, failure) = match kind {
            LocationKind::CellCentre => self.exchange_at::<CellCentre>(route, tags, work),
            LocationKind::XFace => self.exchange_at::<XFace>(route, tags, work),
            LocationKind::YFace => self.exchange_at::<YFace>(route, tags, work),
            LocationKind::ZFace => self.exchange_at::<ZFace>(route, tags, work),
        };
        let exposed = started.elapsed().saturating_sub(worked.get());
        self.exchange_time.set(self.exchange_time.get() + exposed);
        self.interior_during_exchanges
            .set(self.interior_during_exchanges.get() + worked.get());
        if let Some(failure) = failure {
            return Err(failure);
        }
        Ok(exchanged?)
    }

    /// [`exchange_during`] along `route` of the fields `tags` at `L`, and
    /// the graph error a field access kept, if any.
    fn exchange_at<L: GraphLocation>(
        &self,
        route: &HaloRoute,
        tags: &[Tag],
        work: &mut watershed_fields::ranks::Work<'_>,
    ) -> (FieldResult<usize>, Option<GraphError>) {
        let mut fields = GraphFields::<L> {
            first: self.owned.start,
            graphs: &self.graphs,
            tags,
            failure: RefCell::new(None),
            batch: RefCell::new(PointBatch::new()),
            residence: RefCell::new(Vec::new()),
            location: std::marker::PhantomData,
        };
        let exchanged = exchange_during(
            route,
            self.link.as_ref(),
            &mut fields,
            &mut self.buffers.borrow_mut(),
            work,
        );
        (exchanged, fields.failure.into_inner())
    }

    /// [`Self::exchange`] of `tags`, then [`Self::execute`], with the two
    /// overlapped: the values other ranks need are read and sent, this
    /// rank's own seams copied, then every owned graph computes the points
    /// that read no ghost of `tags` another rank sends
    /// ([`ExpressionGraph::execute_interior`], from the graph's
    /// [`OverlapPlan`] for the sides [`stale_sides`] names) while the
    /// messages travel, the received ghosts are written, and the rims and
    /// the nodes that could not be split run
    /// ([`ExpressionGraph::execute_rim`]). Each point is computed once,
    /// by the same kernel from the same inputs, so the bits are those of
    /// the two calls in turn. Where a graph cannot be split (it places
    /// nodes on a GPU, or runs under a memory budget) the two calls run in
    /// turn. With fields of several locations, the messages of the last
    /// location ([`LocationKind`] order) travel during the interior work,
    /// the others' before it. Collective; returns how many points this
    /// rank wrote.
    pub fn exchange_and_execute(&self, tags: &[Tag], mode: ExecutionMode) -> GraphResult<usize> {
        if self.layout.len() == 1 || tags.is_empty() {
            self.execute(mode)?;
            return Ok(0);
        }
        let mut split = self.split.borrow_mut();
        if split.as_ref().is_none_or(|(made_for, _)| made_for != tags) {
            let plans = self
                .graphs
                .iter()
                .zip(self.owned.clone())
                .map(|(graph, index)| {
                    graph
                        .overlap_plan_with_sides(
                            tags,
                            stale_sides(&self.layout, index, &self.owned),
                        )
                        .ok()
                })
                .collect::<Option<Vec<_>>>();
            *split = Some((tags.to_vec(), plans));
        }
        let Some(plans) = split.as_ref().and_then(|(_, plans)| plans.as_ref()) else {
            let exchanged = self.exchange(tags)?;
            self.execute(mode)?;
            return Ok(exchanged);
        };
        let failed: RefCell<Option<GraphError>> = RefCell::new(None);
        let worked = Cell::new(Duration::ZERO);
        let mut interiors = |progress: &mut dyn FnMut()| -> FieldResult<()> {
            let began = Instant::now();
            for (graph, plan) in self.graphs.iter().zip(plans) {
                if let Err(error) = graph.execute_interior_with(mode, plan, progress) {
                    let reason = error.to_string();
                    *failed.borrow_mut() = Some(error);
                    worked.set(worked.get() + began.elapsed());
                    return Err(FieldError::InvalidLayout { reason });
                }
            }
            worked.set(worked.get() + began.elapsed());
            Ok(())
        };
        // The fields of every location but the last exchanged first, the
        // interior work run during the last location's messages.
        let mut groups = self.by_location(tags)?;
        let Some((last_kind, last_tags)) = groups.pop() else {
            self.execute(mode)?;
            return Ok(0);
        };
        let before = self.exchange_groups(groups)?;
        let exchanged = self
            .exchange_around(last_kind, &last_tags, &mut interiors, &worked)
            .map(|written| written + before);
        // The interior work's own error first: the exchange then reports
        // only that the work failed.
        if let Some(failure) = failed.into_inner() {
            return Err(failure);
        }
        let exchanged = exchanged?;
        for (graph, plan) in self.graphs.iter().zip(plans) {
            graph.execute_rim(mode, plan)?;
        }
        self.combine_reductions()?;
        Ok(exchanged)
    }

    /// Wall time of the interior work run while exchanges were in flight
    /// ([`Self::exchange_and_execute`]; the work [`Self::exchange_time`]
    /// leaves out).
    pub fn interior_during_exchanges(&self) -> Duration {
        self.interior_during_exchanges.get()
    }

    /// The field `tag` (at location `L`) over the whole domain, with the
    /// layout's ghost layers, from every patch of every rank (collective;
    /// every rank gets it). After an exchange of `tag` it is what one graph
    /// over the whole domain holds, bit for bit.
    pub fn whole_field<L: GraphLocation>(&self, tag: &Tag) -> GraphResult<SpatialField<L>> {
        let (mine, counts) = self.allocated_values::<L>(tag)?;
        let started = Instant::now();
        let all = self.link.gather_in_rank_order(&mine, &counts);
        self.spent(started);
        Ok(self.layout.assemble::<L>(&tag.to_string(), &all?)?)
    }

    /// [`Self::whole_field`] on rank 0 only (`None` on the others), for
    /// writing: no other rank holds a copy of the whole domain.
    pub fn gather_field<L: GraphLocation>(
        &self,
        tag: &Tag,
    ) -> GraphResult<Option<SpatialField<L>>> {
        let (mine, counts) = self.allocated_values::<L>(tag)?;
        let started = Instant::now();
        let gathered = self.link.gather_to_root(&mine, &counts);
        self.spent(started);
        match gathered? {
            Some(all) => Ok(Some(self.layout.assemble::<L>(&tag.to_string(), &all)?)),
            None => Ok(None),
        }
    }

    /// Sets the field `tag` (at location `L`) of every owned patch, ghosts
    /// included, from the same points of `whole` (a field over the whole
    /// domain with at least the layout's ghost layers, e.g. read from a
    /// checkpoint any layout wrote). An error naming the field when
    /// `whole` lies on another grid or holds too few ghost layers.
    pub fn set_whole_field<L: GraphLocation>(
        &self,
        tag: &Tag,
        whole: &SpatialField<L>,
    ) -> GraphResult<()> {
        let from = whole.layout();
        let source = whole.values()?;
        for graph in &self.graphs {
            graph.with_field_mut::<L, _>(tag, |field| -> GraphResult<()> {
                let to = field.layout().clone();
                let offset = [0, 1, 2].map(|a| {
                    to.patch().offset()[a] as isize - from.patch().offset()[a] as isize
                });
                let own = to.allocated();
                let corners = [own.lo, [0, 1, 2].map(|a| own.hi[a] - 1)];
                let fits = to.patch().grid() == from.patch().grid()
                    && corners.iter().all(|c| {
                        from.allocated()
                            .contains([0, 1, 2].map(|a| c[a] + offset[a]))
                    });
                if !fits {
                    return Err(GraphError::Field(FieldError::InvalidLayout {
                        reason: format!(
                            "field {tag}: the whole field given covers {:?} cells from {:?} of a {:?}-cell grid with {:?} ghost layers below and {:?} above; patch {:?} from {:?} of a {:?}-cell grid needs {:?} below and {:?} above: give a field over the same grid with at least the patches' ghost layers",
                            from.interior_extent(),
                            from.patch().offset(),
                            from.patch().grid().cells(),
                            from.ghosts().minus,
                            from.ghosts().plus,
                            to.interior_extent(),
                            to.patch().offset(),
                            to.patch().grid().cells(),
                            to.ghosts().minus,
                            to.ghosts().plus
                        ),
                    }));
                }
                let values = field.values_mut()?;
                for p in to.allocated().iter() {
                    let global = [0, 1, 2].map(|a| p[a] + offset[a]);
                    values[to.linear_index(p)] = source[from.linear_index(global)];
                }
                Ok(())
            })??;
        }
        Ok(())
    }

    /// Every allocated value of `tag` (at `L`) on each owned patch, in
    /// patch order, and how many values each rank gives (face fields hold
    /// one more plane on the patches along a non-periodic domain's `+`
    /// side).
    fn allocated_values<L: GraphLocation>(&self, tag: &Tag) -> GraphResult<(Vec<f64>, Vec<usize>)> {
        let mut mine = Vec::new();
        for graph in &self.graphs {
            graph.with_field::<L, _>(tag, |field| -> GraphResult<()> {
                mine.extend_from_slice(field.values()?);
                Ok(())
            })??;
        }
        let ranks = self.link.ranks();
        let counts = (0..ranks)
            .map(|rank| {
                self.layout
                    .owned_by(rank, ranks)?
                    .try_fold(0usize, |sum, index| {
                        let points =
                            FieldLayout::new(&self.layout.patch(index)?, L::KIND).allocated_len();
                        Ok(sum + points)
                    })
            })
            .collect::<FieldResult<Vec<_>>>()?;
        Ok((mine, counts))
    }

    fn spent(&self, started: Instant) {
        self.exchange_time
            .set(self.exchange_time.get() + started.elapsed());
    }
}

/// Refuses the graph of patch `index` (of `patches`) when it holds nodes
/// that need the whole domain: a reduction would reduce over the patch's
/// own cells and leave its parameter holding the last patch's value, and
/// an iterative solve would solve on the patch alone. Either would be a
/// wrong answer without an error.
fn refuse_whole_domain_nodes(
    graph: &ExpressionGraph,
    index: usize,
    patches: usize,
) -> GraphResult<()> {
    for reduction in graph.reductions() {
        let read_by = graph.parameter_readers(reduction.parameter().id());
        if !read_by.is_empty() {
            return Err(GraphError::Usage(format!(
                "the recipe's graph for patch {index} holds the reduction {}, whose parameter {} the node(s) {} of the same graph read: on {patches} patches they would read the patch's own partial result; read the parameter after the execution (PatchedGraphs combines the patches' results then), or split the recipe in two graphs",
                reduction.result(),
                reduction.parameter().name(),
                read_by.join(", ")
            )));
        }
    }
    let solves = graph.node_names_of_kind(crate::ExpressionKind::IterativeSolve);
    if !solves.is_empty() {
        return Err(GraphError::Usage(format!(
            "the recipe's graph for patch {index} holds the iterative solve(s) {}: on {patches} patches each would solve on its own patch alone; solve on the patches with a decomposed solver (watershed_solvers' PatchedMultigrid) between executions, or leave the solve out of the recipe",
            solves.join(", ")
        )));
    }
    Ok(())
}

/// An error naming patch `index` when its graph's reductions (their
/// results, in plan order) are not those of patch `first`'s graph: the
/// patches' partial results are combined by position.
fn same_reductions(
    first: &ExpressionGraph,
    graph: &ExpressionGraph,
    first_index: usize,
    index: usize,
) -> GraphResult<()> {
    let names = |g: &ExpressionGraph| -> Vec<String> {
        g.reductions()
            .iter()
            .map(|r| format!("{} ({:?})", r.result(), r.reduction()))
            .collect()
    };
    let (expected, found) = (names(first), names(graph));
    if expected != found {
        return Err(GraphError::Usage(format!(
            "the recipe's graph for patch {index} holds the reductions [{}], patch {first_index}'s [{}]: build every patch's graph with one recipe",
            found.join(", "),
            expected.join(", ")
        )));
    }
    Ok(())
}

/// The locations in exchange order; [`location_index`] numbers them.
const LOCATIONS: [LocationKind; 4] = [
    LocationKind::CellCentre,
    LocationKind::XFace,
    LocationKind::YFace,
    LocationKind::ZFace,
];

/// `kind`'s place in [`LOCATIONS`].
fn location_index(kind: LocationKind) -> usize {
    match kind {
        LocationKind::CellCentre => 0,
        LocationKind::XFace => 1,
        LocationKind::YFace => 2,
        LocationKind::ZFace => 3,
    }
}

/// The fields `tags` (at `L`) of the graphs of patches `first..`, as the
/// exchange reads and writes them (one value per tag at each point). A
/// graph's error is kept whole in `failure` (the exchange carries field
/// errors only).
struct GraphFields<'a, L> {
    first: usize,
    graphs: &'a [ExpressionGraph],
    tags: &'a [Tag],
    failure: RefCell<Option<GraphError>>,
    /// The point writes and copies enqueued on GPUs, waited for when the
    /// exchange settles.
    batch: RefCell<PointBatch>,
    /// Per owned patch (from `first`), whether its fields live on a GPU,
    /// once asked.
    residence: RefCell<Vec<Option<bool>>>,
    location: std::marker::PhantomData<L>,
}

impl<L> GraphFields<'_, L> {
    fn graph(&self, patch: usize) -> FieldResult<&ExpressionGraph> {
        patch
            .checked_sub(self.first)
            .and_then(|k| self.graphs.get(k))
            .ok_or_else(|| FieldError::InvalidLayout {
                reason: format!(
                    "patch {patch} is not among this rank's patches {}..{}",
                    self.first,
                    self.first + self.graphs.len()
                ),
            })
    }

    /// Whether any of the tags' fields of `patch` lives on a GPU (asked
    /// once per exchange: the exchange's writes leave the fields where
    /// they are).
    fn on_gpu(&self, patch: usize) -> FieldResult<bool> {
        let graph = self.graph(patch)?;
        let k = patch - self.first;
        if let Some(&Some(known)) = self.residence.borrow().get(k) {
            return Ok(known);
        }
        let mut on_gpu = false;
        for tag in self.tags {
            if self.keep(graph.field_lives_on_gpu(tag).map(Ok))? {
                on_gpu = true;
                break;
            }
        }
        let mut residence = self.residence.borrow_mut();
        if residence.len() <= k {
            residence.resize(k + 1, None);
        }
        residence[k] = Some(on_gpu);
        Ok(on_gpu)
    }

    /// `result`'s field error, or its graph error kept in `failure`.
    fn keep<T>(&self, result: GraphResult<FieldResult<T>>) -> FieldResult<T> {
        match result {
            Ok(inner) => inner,
            Err(GraphError::Field(error)) => Err(error),
            Err(error) => {
                let reason = error.to_string();
                *self.failure.borrow_mut() = Some(error);
                Err(FieldError::InvalidLayout { reason })
            }
        }
    }
}

impl<L: GraphLocation> HaloFields for GraphFields<'_, L> {
    fn width(&self) -> usize {
        self.tags.len()
    }

    /// Each tag's runs copied as slices from one graph's field into
    /// another's, or within one field (a patch's own periodic images).
    /// Fields on a GPU are copied point by point on it
    /// ([`ExpressionGraph::copy_points_from`]): nothing crosses to the
    /// host when both live on one GPU.
    fn copy_runs(
        &mut self,
        source: usize,
        destination: usize,
        runs: &[CopyRun],
    ) -> FieldResult<()> {
        if self.on_gpu(source)? || self.on_gpu(destination)? {
            // Point by point where the fields live: on their GPU when
            // both are on one, else through the host.
            let from: Vec<usize> = runs.iter().flat_map(|r| r.from..r.from + r.len).collect();
            let to: Vec<usize> = runs.iter().flat_map(|r| r.to..r.to + r.len).collect();
            let (read, written) = (self.graph(source)?, self.graph(destination)?);
            let copied = written.copy_points_from::<L>(
                &mut self.batch.borrow_mut(),
                self.tags,
                &to,
                read,
                &from,
            );
            return self.keep(copied.map(Ok));
        }
        if source == destination {
            let graph = self.graph(source)?;
            for tag in self.tags {
                let copied = graph.with_field_mut::<L, _>(tag, |field| {
                    field
                        .values_mut()
                        .map(|values| copy_runs_between(None, values, runs))
                });
                self.keep(copied)?;
            }
            return Ok(());
        }
        let (from, to) = (self.graph(source)?, self.graph(destination)?);
        for tag in self.tags {
            let copied = to.with_field_mut::<L, _>(tag, |written| {
                let read = from.with_field::<L, _>(tag, |read| -> FieldResult<()> {
                    copy_runs_between(Some(read.values()?), written.values_mut()?, runs);
                    Ok(())
                });
                self.keep(read)
            });
            self.keep(copied)?;
        }
        Ok(())
    }

    /// Each tag's values at `at`, where its field lives
    /// ([`ExpressionGraph::read_points`]: fields on a GPU give only these
    /// points, their host copies untouched).
    fn read(&self, patch: usize, at: &[usize], out: &mut Vec<f64>) -> FieldResult<()> {
        let graph = self.graph(patch)?;
        let width = self.tags.len();
        let start = out.len();
        out.resize(start + at.len() * width, 0.0);
        if width == 1 {
            let read = graph.read_points::<L>(
                &mut self.batch.borrow_mut(),
                self.tags,
                at,
                &mut out[start..],
            );
            return self.keep(read.map(Ok));
        }
        // Field after field, then point-major as the messages carry them.
        let mut fields = vec![0.0; at.len() * width];
        let read = graph.read_points::<L>(&mut self.batch.borrow_mut(), self.tags, at, &mut fields);
        self.keep(read.map(Ok))?;
        for (t, field) in fields.chunks(at.len().max(1)).enumerate() {
            for (slot, &v) in out[start + t..].iter_mut().step_by(width).zip(field) {
                *slot = v;
            }
        }
        Ok(())
    }

    /// Each tag's values written at `at`, where its field lives
    /// ([`ExpressionGraph::write_points`]: fields on a GPU stay there).
    fn write(&mut self, patch: usize, at: &[usize], values: &[f64]) -> FieldResult<()> {
        let graph = self.graph(patch)?;
        let width = self.tags.len();
        if width == 1 {
            let written =
                graph.write_points::<L>(&mut self.batch.borrow_mut(), self.tags, at, values);
            return self.keep(written.map(Ok));
        }
        let mut fields = Vec::with_capacity(values.len());
        for t in 0..width {
            fields.extend(values[t..].iter().step_by(width));
        }
        let written = graph.write_points::<L>(&mut self.batch.borrow_mut(), self.tags, at, &fields);
        self.keep(written.map(Ok))
    }

    /// Waits for the point writes and copies enqueued on GPUs.
    fn settle(&mut self) -> FieldResult<()> {
        let settled = self.batch.get_mut().finish();
        self.keep(settled.map_err(GraphError::from).map(Ok))
    }
}
