//! Halo exchange between the patches of one process: every ghost point of
//! every patch that lies inside the domain (after wrapping periodic axes)
//! takes the value the patch owning that point holds there. Values are
//! copied, never computed, so the ghosts of a decomposed field equal what
//! the whole domain holds at those points, bit for bit: its interior
//! values, or their periodic images.
//!
//! Who owns a point: along each axis, the patch whose interior holds it. A
//! face normal to an axis on a patch seam belongs to the patch on its plus
//! side (a patch's interior faces are its minus face and those inside it);
//! the face on a physical plus boundary belongs to the last patch, whose
//! interior has that one more face. Ghost points outside the domain on a
//! non-periodic axis are left alone: they are a boundary condition's.
//!
//! One algorithm serves one process and many ([`exchange_with`]): each
//! rank reads every value its patches give, copies those its own patches
//! need and sends the rest, one buffer per pair of ranks, through a
//! [`RankLink`] ([`SingleProcess`] here, MPI in `halo_mpi`). What a rank
//! reads, sends and receives is worked out once ([`HaloRoute`]); several
//! fields of one location (every equation's solution) travel together.

use crate::decomposition::PatchLayout;
use crate::error::{FieldError, FieldResult};
use crate::field::SpatialField;
use crate::layout::FieldLayout;
use crate::location::{Location, LocationKind};
use crate::ranks::{RankLink, SingleProcess, Work};
use std::ops::Range;

/// Fills the ghost points of `fields` (one per patch of `layout`, in patch
/// order, all valid on the CPU) from the patches owning them (see the
/// module docs); returns how many points were copied. An error, naming
/// the field, when their number or a patch differs from the layout's.
///
/// ```
/// use watershed_fields::halo::exchange_ghosts;
/// use watershed_fields::{CellCentre, Device, GhostWidth, Grid, PatchLayout, SpatialField};
/// let grid = Grid::new([8, 1, 1], [1.0; 3], [0.0; 3])?.with_periodic([true, false, false]);
/// let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1))?;
/// let mut fields = Vec::new();
/// for p in 0..layout.len() {
///     let mut u = SpatialField::<CellCentre>::new(&format!("u{p}"), &layout.patch(p)?, Device::Cpu)?;
///     u.fill(p as f64)?;
///     fields.push(u);
/// }
/// assert_eq!(exchange_ghosts(&layout, &mut fields)?, 4);
/// // Patch 0's ghosts on either side hold patch 1's values (x is periodic).
/// let first = fields[0].values()?;
/// assert_eq!((first[0], first[5]), (1.0, 1.0));
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
pub fn exchange_ghosts<L: Location>(
    layout: &PatchLayout,
    fields: &mut [SpatialField<L, f64>],
) -> FieldResult<usize> {
    if fields.len() != layout.len() {
        return Err(FieldError::InvalidLayout {
            reason: format!(
                "{} field(s) given for the {} patches of layout {:?}; give one per patch, in patch order",
                fields.len(),
                layout.len(),
                layout.counts()
            ),
        });
    }
    let plan = HaloPlan::new(layout, L::KIND)?;
    let route = HaloRoute::new(&plan, layout, 0, 1)?;
    let mut owned = PatchFields::new(layout, 0, fields)?;
    exchange_with(&route, &SingleProcess, &mut owned)
}

/// The fields of the patches one rank holds, as an exchange reads and
/// writes them: by patch index and linear index, so that a solver keeping
/// each patch's field inside its own graph can take part. `width` fields
/// of one location may travel together (e.g. every equation's solution):
/// each point then carries `width` values, one per field, point-major.
pub trait HaloFields {
    /// Fields exchanged together (1 by default).
    fn width(&self) -> usize {
        1
    }

    /// Appends to `out` the values at linear indices `at` of patch
    /// `patch`'s fields: for each point, one value per field.
    fn read(&self, patch: usize, at: &[usize], out: &mut Vec<f64>) -> FieldResult<()>;

    /// Writes `values` (for each point of `at`, one value per field) at
    /// linear indices `at` of patch `patch`'s fields.
    fn write(&mut self, patch: usize, at: &[usize], values: &[f64]) -> FieldResult<()>;

    /// Copies, for each run, `len` consecutive points from linear index
    /// `from` of patch `source`'s fields to linear index `to` of patch
    /// `destination`'s (every field). The points read are never among
    /// those written. By default through [`Self::read`] and
    /// [`Self::write`]; a holder with direct access to its storage copies
    /// the runs as slices.
    fn copy_runs(
        &mut self,
        source: usize,
        destination: usize,
        runs: &[CopyRun],
    ) -> FieldResult<()> {
        copy_runs_by_points(self, source, destination, runs)
    }

    /// Waits until the writes made so far hold (a holder that enqueues
    /// them on a device, as fields on a GPU do, waits here; by default
    /// they already hold). An exchange calls it once its rank's patches
    /// have given each other their ghosts, before work that may read
    /// them, and before it returns.
    fn settle(&mut self) -> FieldResult<()> {
        Ok(())
    }
}

/// [`HaloFields::copy_runs`] through [`HaloFields::read`] and
/// [`HaloFields::write`], point by point: the default, and the fallback of
/// holders whose direct copy does not apply.
pub fn copy_runs_by_points<F: HaloFields + ?Sized>(
    fields: &mut F,
    source: usize,
    destination: usize,
    runs: &[CopyRun],
) -> FieldResult<()> {
    let from: Vec<usize> = runs.iter().flat_map(|r| r.from..r.from + r.len).collect();
    let to: Vec<usize> = runs.iter().flat_map(|r| r.to..r.to + r.len).collect();
    let mut values = Vec::with_capacity(from.len() * fields.width());
    fields.read(source, &from, &mut values)?;
    fields.write(destination, &to, &values)
}

/// A run of consecutive points one patch gives another of the same rank
/// ([`HaloFields::copy_runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRun {
    /// The first point's linear index in the source's fields.
    pub from: usize,
    /// Its linear index in the destination's fields.
    pub to: usize,
    /// How many consecutive points.
    pub len: usize,
}

/// The holders at `source` and `destination` among `items`: the source
/// apart (`None` when both are the same holder, whose runs then copy
/// within its own storage) and the destination to write.
pub fn source_and_destination<T>(
    items: &mut [T],
    source: usize,
    destination: usize,
) -> (Option<&T>, &mut T) {
    if source == destination {
        return (None, &mut items[destination]);
    }
    let (low, high) = items.split_at_mut(source.max(destination));
    if source < destination {
        (Some(&low[source]), &mut high[0])
    } else {
        (Some(&high[0]), &mut low[destination])
    }
}

/// Copies `runs` within one field's storage, or from `source` into
/// `destination` storage: what [`HaloFields::copy_runs`] does for slices.
pub fn copy_runs_between(source: Option<&[f64]>, destination: &mut [f64], runs: &[CopyRun]) {
    for run in runs {
        match (source, run.len) {
            // Columns across an x seam are runs of one point: no memmove.
            (Some(source), 1) => destination[run.to] = source[run.from],
            (None, 1) => destination[run.to] = destination[run.from],
            (Some(source), len) => {
                destination[run.to..run.to + len].copy_from_slice(&source[run.from..run.from + len])
            }
            (None, len) => destination.copy_within(run.from..run.from + len, run.to),
        }
    }
}

/// A slice of fields, one per patch of a contiguous run starting at
/// patch `first`, as [`HaloFields`].
#[derive(Debug)]
pub struct PatchFields<'a, L: Location> {
    first: usize,
    fields: &'a mut [SpatialField<L, f64>],
}

impl<'a, L: Location> PatchFields<'a, L> {
    /// `fields` for patches `first..first + fields.len()` of `layout`;
    /// an error, naming the field, when one is on another patch.
    pub fn new(
        layout: &PatchLayout,
        first: usize,
        fields: &'a mut [SpatialField<L, f64>],
    ) -> FieldResult<Self> {
        for (k, field) in fields.iter().enumerate() {
            check_patch(layout, first + k, field)?;
        }
        Ok(PatchFields { first, fields })
    }

    fn field(&self, patch: usize) -> FieldResult<&SpatialField<L, f64>> {
        Ok(&self.fields[self.position(patch)?])
    }

    fn position(&self, patch: usize) -> FieldResult<usize> {
        patch
            .checked_sub(self.first)
            .filter(|&k| k < self.fields.len())
            .ok_or_else(|| self.missing(patch))
    }

    fn missing(&self, patch: usize) -> FieldError {
        FieldError::InvalidLayout {
            reason: format!(
                "patch {patch} is not among the patches {}..{} these fields hold",
                self.first,
                self.first + self.fields.len()
            ),
        }
    }
}

impl<L: Location> HaloFields for PatchFields<'_, L> {
    fn copy_runs(
        &mut self,
        source: usize,
        destination: usize,
        runs: &[CopyRun],
    ) -> FieldResult<()> {
        let (s, d) = (self.position(source)?, self.position(destination)?);
        let (from, to) = source_and_destination(self.fields, s, d);
        let from = from.map(SpatialField::values).transpose()?;
        copy_runs_between(from, to.values_mut()?, runs);
        Ok(())
    }

    fn read(&self, patch: usize, at: &[usize], out: &mut Vec<f64>) -> FieldResult<()> {
        let values = self.field(patch)?.values()?;
        out.extend(at.iter().map(|&i| values[i]));
        Ok(())
    }

    fn write(&mut self, patch: usize, at: &[usize], values: &[f64]) -> FieldResult<()> {
        let missing = self.missing(patch);
        let field = patch
            .checked_sub(self.first)
            .and_then(|k| self.fields.get_mut(k))
            .ok_or(missing)?;
        let data = field.values_mut()?;
        for (&i, &v) in at.iter().zip(values) {
            data[i] = v;
        }
        Ok(())
    }
}

/// Where a value a destination point receives comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The `n`-th value this rank reads (over its source patches in order).
    Read(usize),
    /// The `n`-th value of the message from rank `from`.
    Received { from: usize, n: usize },
}

/// One rank's part of a [`HaloPlan`], worked out once: what it reads from
/// each patch it owns, what it sends each other rank, how many values it
/// receives from each, and where every ghost point of its patches takes
/// its value from. Both ends of a message list its values in plan order
/// (destination patch, then its ghost points in storage order), so a
/// message carries values only.
///
/// It keeps runs of consecutive points, not the points one by one: its
/// size follows the rows of the patches' surfaces, not their points.
#[derive(Debug, Clone, PartialEq)]
pub struct HaloRoute {
    rank: usize,
    ranks: usize,
    owned: Range<usize>,
    /// Per rank, how many values it sends this rank.
    receives: Vec<usize>,
    /// How many ghost points of its patches this rank writes.
    points_written: usize,
    /// What an exchange runs ([`RawRoute::compile`]).
    compiled: CompiledRoute,
}

/// A [`HaloRoute`] as it is worked out, point by point, before it is
/// compiled into runs.
struct RawRoute {
    rank: usize,
    ranks: usize,
    owned: Range<usize>,
    /// Per owned source patch, the linear indices read, in plan order.
    reads: Vec<Vec<usize>>,
    /// Per rank, the values sent it (indices into the values read).
    sends: Vec<Vec<usize>>,
    /// Per rank, how many values it sends this rank.
    receives: Vec<usize>,
    /// Per owned destination patch, its ghost points' linear indices and
    /// where each one's value comes from.
    writes: Vec<(Vec<usize>, Vec<Slot>)>,
}

/// Consecutive linear indices `start..start + len` of one patch's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PointRun {
    start: usize,
    len: usize,
}

/// Appends point `point` to `runs`, extending the last run when it
/// follows it.
fn push_point(runs: &mut Vec<PointRun>, point: usize) {
    match runs.last_mut() {
        Some(run) if run.start + run.len == point => run.len += 1,
        _ => runs.push(PointRun {
            start: point,
            len: 1,
        }),
    }
}

/// The points of `runs`, in turn, into `points` (cleared first).
fn expand(runs: &[PointRun], points: &mut Vec<usize>) {
    points.clear();
    append_points(runs, points);
}

/// The points of `runs`, in turn, appended to `points`.
fn append_points(runs: &[PointRun], points: &mut Vec<usize>) {
    for run in runs {
        points.extend(run.start..run.start + run.len);
    }
}

/// How many points `runs` hold.
fn run_points(runs: &[PointRun]) -> usize {
    runs.iter().map(|r| r.len).sum()
}

/// A route as an exchange runs it: each message read straight from the
/// fields into its buffer, the points this rank's patches give each other
/// copied in runs, and each received message written straight from its
/// buffer into the ghosts.
#[derive(Debug, Clone, PartialEq, Default)]
struct CompiledRoute {
    /// Per rank, the message sent it as pieces read in turn: (owned source
    /// patch, the runs of linear indices read there).
    sends: Vec<Vec<(usize, Vec<PointRun>)>>,
    /// (source, destination) owned patch indices and their runs.
    local: Vec<(usize, usize, Vec<CopyRun>)>,
    /// Per owned destination patch, the pieces of messages it receives.
    received: Vec<Vec<ReceivedPiece>>,
}

/// A piece of a message a patch receives: consecutive values of one
/// rank's message, written into ghost points in turn.
#[derive(Debug, Clone, PartialEq)]
struct ReceivedPiece {
    /// The rank that sent it.
    from: usize,
    /// Its first value's position in the message.
    first: usize,
    /// How many values.
    count: usize,
    /// The ghost points written, in runs.
    runs: Vec<PointRun>,
}

impl HaloRoute {
    /// The route of rank `rank` of `ranks` through `plan` (made for
    /// `layout`).
    pub fn new(
        plan: &HaloPlan,
        layout: &PatchLayout,
        rank: usize,
        ranks: usize,
    ) -> FieldResult<Self> {
        Ok(RawRoute::new(plan, layout, rank, ranks)?.compile())
    }

    /// [`Self::new`] without the points a patch takes from itself (its
    /// own periodic images, along an axis it spans), for fields whose
    /// periodic conditions already fill those: a transport solver's, whose
    /// conditions run with every update.
    pub fn new_without_own_images(
        plan: &HaloPlan,
        layout: &PatchLayout,
        rank: usize,
        ranks: usize,
    ) -> FieldResult<Self> {
        Ok(RawRoute::new(plan, layout, rank, ranks)?
            .without_own_images()
            .compile())
    }

    /// How many ghost points of its patches this rank writes.
    pub fn points_written(&self) -> usize {
        self.points_written
    }
}

impl RawRoute {
    /// See [`HaloRoute::new`].
    fn new(plan: &HaloPlan, layout: &PatchLayout, rank: usize, ranks: usize) -> FieldResult<Self> {
        let owned = layout.owned_by(rank, ranks)?;
        if plan.copies.len() != layout.len() {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "the halo plan has {} patch(es), layout {:?} has {}; make the plan from this layout",
                    plan.copies.len(),
                    layout.counts(),
                    layout.len()
                ),
            });
        }
        let owners = (0..layout.len())
            .map(|patch| layout.owner(patch, ranks))
            .collect::<FieldResult<Vec<_>>>()?;
        // The values read: per source patch in plan order, numbered over
        // the sources in patch order.
        let mut reads: Vec<Vec<usize>> = vec![Vec::new(); owned.len()];
        for copies in &plan.copies {
            for copy in copies.iter().filter(|c| owners[c.source] == rank) {
                reads[copy.source - owned.start].push(copy.from);
            }
        }
        let mut first_of = Vec::with_capacity(reads.len());
        let mut total = 0;
        for r in &reads {
            first_of.push(total);
            total += r.len();
        }
        let mut cursors = vec![0usize; owned.len()];
        let mut sends: Vec<Vec<usize>> = vec![Vec::new(); ranks];
        let mut receives = vec![0usize; ranks];
        let mut writes: Vec<(Vec<usize>, Vec<Slot>)> = vec![(Vec::new(), Vec::new()); owned.len()];
        for (destination, copies) in plan.copies.iter().enumerate() {
            let to = owners[destination];
            for copy in copies {
                let from = owners[copy.source];
                let slot = if from == rank {
                    let k = copy.source - owned.start;
                    let n = first_of[k] + cursors[k];
                    cursors[k] += 1;
                    if to != rank {
                        sends[to].push(n);
                        continue;
                    }
                    Slot::Read(n)
                } else if to == rank {
                    receives[from] += 1;
                    Slot::Received {
                        from,
                        n: receives[from] - 1,
                    }
                } else {
                    continue;
                };
                let (at, slots) = &mut writes[destination - owned.start];
                at.push(copy.to);
                slots.push(slot);
            }
        }
        Ok(RawRoute {
            rank,
            ranks,
            owned,
            reads,
            sends,
            receives,
            writes,
        })
    }

    /// The route with what an exchange runs worked out: the local copies
    /// grouped by pair of patches in runs of consecutive points, each
    /// message cut into pieces read from one patch, each destination's
    /// received points into pieces of one message (consecutive values of
    /// a message go to consecutive points of the plan).
    fn compile(self) -> HaloRoute {
        // Where each value read comes from: (source owned index, point).
        let origin: Vec<(usize, usize)> = self
            .reads
            .iter()
            .enumerate()
            .flat_map(|(k, reads)| reads.iter().map(move |&point| (k, point)))
            .collect();
        let mut local: Vec<(usize, usize, Vec<CopyRun>)> = Vec::new();
        let mut received = Vec::with_capacity(self.writes.len());
        for (destination, (at, slots)) in self.writes.iter().enumerate() {
            let mut pieces: Vec<ReceivedPiece> = Vec::new();
            for (&to, slot) in at.iter().zip(slots) {
                match *slot {
                    Slot::Read(n) => {
                        let (source, from) = origin[n];
                        let pair = match local
                            .iter()
                            .position(|(s, d, _)| (*s, *d) == (source, destination))
                        {
                            Some(p) => p,
                            None => {
                                local.push((source, destination, Vec::new()));
                                local.len() - 1
                            }
                        };
                        let runs = &mut local[pair].2;
                        match runs.last_mut() {
                            Some(run) if run.from + run.len == from && run.to + run.len == to => {
                                run.len += 1;
                            }
                            _ => runs.push(CopyRun { from, to, len: 1 }),
                        }
                    }
                    Slot::Received { from, n } => match pieces.last_mut() {
                        Some(piece) if piece.from == from && piece.first + piece.count == n => {
                            piece.count += 1;
                            push_point(&mut piece.runs, to);
                        }
                        _ => pieces.push(ReceivedPiece {
                            from,
                            first: n,
                            count: 1,
                            runs: vec![PointRun { start: to, len: 1 }],
                        }),
                    },
                }
            }
            received.push(pieces);
        }
        let sends = self
            .sends
            .iter()
            .map(|send| {
                let mut pieces: Vec<(usize, Vec<PointRun>)> = Vec::new();
                for &n in send {
                    let (k, point) = origin[n];
                    match pieces.last_mut() {
                        Some((source, runs)) if *source == k => push_point(runs, point),
                        _ => pieces.push((
                            k,
                            vec![PointRun {
                                start: point,
                                len: 1,
                            }],
                        )),
                    }
                }
                pieces
            })
            .collect();
        HaloRoute {
            rank: self.rank,
            ranks: self.ranks,
            owned: self.owned,
            points_written: self.writes.iter().map(|(at, _)| at.len()).sum(),
            receives: self.receives,
            compiled: CompiledRoute {
                sends,
                local,
                received,
            },
        }
    }

    /// The same route without the points a patch takes from itself (see
    /// [`HaloRoute::new_without_own_images`]).
    fn without_own_images(mut self) -> Self {
        // The owned patch (its index among the owned ones) each value
        // read comes from.
        let source_of: Vec<usize> = self
            .reads
            .iter()
            .enumerate()
            .flat_map(|(k, reads)| std::iter::repeat_n(k, reads.len()))
            .collect();
        for (k, (at, slots)) in self.writes.iter_mut().enumerate() {
            let kept: (Vec<usize>, Vec<Slot>) = at
                .iter()
                .zip(slots.iter())
                .filter(|(_, slot)| !matches!(slot, Slot::Read(n) if source_of[*n] == k))
                .map(|(&point, &slot)| (point, slot))
                .unzip();
            (*at, *slots) = kept;
        }
        // Read only what is still sent or written, renumbered.
        let total = source_of.len();
        let mut used = vec![false; total];
        for n in self.sends.iter().flatten() {
            used[*n] = true;
        }
        for (_, slots) in &self.writes {
            for slot in slots {
                if let Slot::Read(n) = slot {
                    used[*n] = true;
                }
            }
        }
        let mut renumbered = vec![usize::MAX; total];
        let mut next = 0;
        let mut n = 0;
        for reads in &mut self.reads {
            let mut kept = Vec::with_capacity(reads.len());
            for &point in reads.iter() {
                if used[n] {
                    renumbered[n] = next;
                    next += 1;
                    kept.push(point);
                }
                n += 1;
            }
            *reads = kept;
        }
        for n in self.sends.iter_mut().flatten() {
            *n = renumbered[*n];
        }
        for (_, slots) in &mut self.writes {
            for slot in slots.iter_mut() {
                if let Slot::Read(n) = slot {
                    *n = renumbered[*n];
                }
            }
        }
        self
    }
}

/// Scratch storage an exchange reuses from call to call (the messages
/// sent), so that a stepping loop allocates no send buffers per exchange.
#[derive(Debug, Default)]
pub struct HaloBuffers {
    outgoing: Vec<Vec<f64>>,
    /// The messages received, one per rank (sized by the route).
    incoming: Vec<Vec<f64>>,
    /// The points of one patch's pieces, their runs expanded.
    points: Vec<usize>,
    /// The values of one patch's pieces, before they take their places.
    values: Vec<f64>,
}

/// The exchange of the rank `link` names along `route` (made for that
/// rank): fills the ghost points of the patches it owns from the patches
/// owning those points, on this rank or another. Every source value is
/// read before any ghost is written; values for other ranks travel in one
/// buffer per pair of ranks, every field of `fields` together. Returns
/// how many points this rank wrote. Every rank must call it with routes
/// of the same plan and fields of the same width.
pub fn exchange_with(
    route: &HaloRoute,
    link: &dyn RankLink,
    fields: &mut dyn HaloFields,
) -> FieldResult<usize> {
    exchange_reusing(route, link, fields, &mut HaloBuffers::default())
}

/// [`exchange_with`], reusing `buffers` from earlier calls.
pub fn exchange_reusing(
    route: &HaloRoute,
    link: &dyn RankLink,
    fields: &mut dyn HaloFields,
    buffers: &mut HaloBuffers,
) -> FieldResult<usize> {
    exchange_during(route, link, fields, buffers, &mut |_| Ok(()))
}

/// [`exchange_reusing`] with `work` run while the values travel between
/// ranks ([`RankLink::swap_during`]): the values sent are read first, the
/// ghosts the rank's own patches give each other copied, the messages
/// posted, then `work` runs, then the ghosts from other ranks are written.
/// `work` must not write the points sent nor read the ghosts other ranks
/// send (an interior computation that reads no such ghost: see
/// `watershed_exprgraph::overlap`), and should make the progress call it
/// is given between its pieces. Its error is returned once the exchange
/// completed on this rank.
pub fn exchange_during(
    route: &HaloRoute,
    link: &dyn RankLink,
    fields: &mut dyn HaloFields,
    buffers: &mut HaloBuffers,
    work: &mut Work<'_>,
) -> FieldResult<usize> {
    let (rank, ranks) = (link.rank(), link.ranks());
    if (rank, ranks) != (route.rank, route.ranks) {
        return Err(FieldError::InvalidLayout {
            reason: format!(
                "a halo route of rank {} of {} was given to rank {rank} of {ranks}; make the route for this rank",
                route.rank, route.ranks
            ),
        });
    }
    let width = fields.width();
    let compiled = &route.compiled;
    // Every value sent is read before any ghost is written (ghosts are
    // never read: the points read are interior points of their owners),
    // straight into its message.
    let HaloBuffers {
        outgoing,
        incoming,
        points,
        values,
    } = buffers;
    outgoing.resize_with(compiled.sends.len(), Vec::new);
    for (message, pieces) in outgoing.iter_mut().zip(&compiled.sends) {
        read_message(
            route.owned.start,
            pieces,
            width,
            &mut *fields,
            points,
            values,
            message,
        )?;
    }
    incoming.resize_with(route.receives.len(), Vec::new);
    for (buffer, &count) in incoming.iter_mut().zip(&route.receives) {
        buffer.resize(count * width, 0.0);
    }
    // The ghosts this rank's own patches give each other are written
    // before the messages travel: work run during the swap may read them.
    // (A failure is returned after the swap, which every rank joins.)
    let mut written = 0;
    let mut copy_locally = || -> FieldResult<()> {
        for (source, destination, runs) in &compiled.local {
            written += runs.iter().map(|r| r.len).sum::<usize>();
            fields.copy_runs(
                route.owned.start + source,
                route.owned.start + destination,
                runs,
            )?;
        }
        Ok(())
    };
    let copied = copy_locally().and_then(|()| fields.settle());
    link.swap_during(outgoing, incoming, work)?;
    copied?;
    // Each patch's pieces from their messages (sized by the route; the
    // link checks what arrived), in one write per patch: a holder on a device moves them
    // in one copy.
    for (k, pieces) in compiled.received.iter().enumerate() {
        points.clear();
        values.clear();
        for piece in pieces {
            written += piece.count;
            append_points(&piece.runs, points);
            values.extend_from_slice(
                &incoming[piece.from][piece.first * width..(piece.first + piece.count) * width],
            );
        }
        if !points.is_empty() {
            fields.write(route.owned.start + k, points, values)?;
        }
    }
    fields.settle()?;
    Ok(written)
}

/// Fills `message` (cleared first) with the values of `pieces` in turn
/// (each an owned source patch, counted from `first`, and the runs read
/// there), reading each source patch once: its pieces' points together,
/// then each piece's values moved to its place. A holder on a device then
/// moves one patch's values in one copy, not a piece's.
fn read_message(
    first: usize,
    pieces: &[(usize, Vec<PointRun>)],
    width: usize,
    fields: &mut dyn HaloFields,
    points: &mut Vec<usize>,
    values: &mut Vec<f64>,
    message: &mut Vec<f64>,
) -> FieldResult<()> {
    message.clear();
    if let [(k, runs)] = pieces {
        expand(runs, points);
        return fields.read(first + k, points, message);
    }
    let total: usize = pieces.iter().map(|(_, runs)| run_points(runs)).sum();
    message.resize(total * width, 0.0);
    let mut done: Vec<usize> = Vec::new();
    for (k, _) in pieces {
        if done.contains(k) {
            continue;
        }
        done.push(*k);
        points.clear();
        for (source, runs) in pieces {
            if source == k {
                append_points(runs, points);
            }
        }
        values.clear();
        fields.read(first + k, points, values)?;
        if values.len() != points.len() * width {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "patch {} gave {} value(s) for {} point(s) of {width} field(s); a halo holder must give one value per point and field",
                    first + k,
                    values.len(),
                    points.len()
                ),
            });
        }
        // Each of this patch's pieces to its place in the message.
        let (mut at, mut taken) = (0, 0);
        for (source, runs) in pieces {
            let len = run_points(runs) * width;
            if source == k {
                message[at..at + len].copy_from_slice(&values[taken..taken + len]);
                taken += len;
            }
            at += len;
        }
    }
    Ok(())
}

/// Checks that `field` is on patch `index` of `layout`, naming it if not.
pub(crate) fn check_patch<L: Location>(
    layout: &PatchLayout,
    index: usize,
    field: &SpatialField<L, f64>,
) -> FieldResult<()> {
    let patch = layout.patch(index)?;
    if *field.layout().patch() == patch {
        return Ok(());
    }
    Err(FieldError::InvalidLayout {
        reason: format!(
            "field '{}' is on a patch at {:?} of {:?} cells with {:?} ghosts, but patch {index} of the layout is at {:?} of {:?} cells with {:?} ghosts",
            field.name(),
            field.layout().patch().offset(),
            field.layout().patch().cells(),
            field.layout().patch().ghosts(),
            patch.offset(),
            patch.cells(),
            patch.ghosts()
        ),
    })
}

/// One ghost point to fill: from point `from` (a linear index) of patch
/// `source`'s field into point `to` of the destination's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaloCopy {
    /// The patch owning the point.
    pub source: usize,
    /// Its linear index in the source's field.
    pub from: usize,
    /// The ghost point's linear index in the destination's field.
    pub to: usize,
}

/// Every ghost point of every patch of a layout for one location, with
/// the patch it comes from: what an exchange copies, in an order both
/// ends of a message know (destination patch, then its ghost points in
/// storage order). Every patch has the same layout, so the linear indices
/// hold for every field of that location.
#[derive(Debug, Clone, PartialEq)]
pub struct HaloPlan {
    /// Per destination patch, its copies in order.
    pub copies: Vec<Vec<HaloCopy>>,
}

impl HaloPlan {
    /// The plan of `layout` for fields at `kind`.
    pub fn new(layout: &PatchLayout, kind: LocationKind) -> FieldResult<Self> {
        let owners = Owners::new(layout, kind);
        let layouts = (0..layout.len())
            .map(|index| Ok(FieldLayout::new(&layout.patch(index)?, kind)))
            .collect::<FieldResult<Vec<_>>>()?;
        let mut copies = Vec::with_capacity(layout.len());
        for field_layout in &layouts {
            let offset = field_layout.patch().offset();
            let interior = field_layout.interior();
            let mut mine = Vec::new();
            for local in field_layout.allocated().iter() {
                if interior.contains(local) {
                    continue;
                }
                let global = [0, 1, 2].map(|a| offset[a] as isize + local[a]);
                let Some((source, source_local)) = owners.of(global) else {
                    continue;
                };
                mine.push(HaloCopy {
                    source,
                    from: layouts[source].linear_index(source_local),
                    to: field_layout.linear_index(local),
                });
            }
            copies.push(mine);
        }
        Ok(HaloPlan { copies })
    }
}

/// Which patch owns each global point of one location.
struct Owners {
    counts: [usize; 3],
    patch_cells: [usize; 3],
    /// Global points along each axis (cells, or cells + 1 for faces
    /// normal to a non-periodic axis).
    points: [isize; 3],
    periodic: [bool; 3],
    active: [bool; 3],
    index_of: Box<dyn Fn([usize; 3]) -> usize>,
}

impl Owners {
    fn new(layout: &PatchLayout, kind: LocationKind) -> Self {
        let grid = layout.grid();
        let cells = grid.cells();
        let active = grid.active_dimensions();
        let periodic = [0, 1, 2].map(|a| grid.periodic()[a] && active[a]);
        let normal = match kind {
            LocationKind::CellCentre => None,
            LocationKind::XFace => Some(0),
            LocationKind::YFace => Some(1),
            LocationKind::ZFace => Some(2),
        };
        let points = [0, 1, 2].map(|a| {
            let extra = normal == Some(a) && active[a] && !periodic[a];
            (cells[a] + usize::from(extra)) as isize
        });
        let counts = layout.counts();
        Owners {
            counts,
            patch_cells: layout.patch_cells(),
            points,
            periodic,
            active,
            index_of: Box::new(move |p: [usize; 3]| p[0] + counts[0] * (p[1] + counts[1] * p[2])),
        }
    }

    /// The patch owning global point `global` and the point's index there;
    /// `None` outside the domain on a non-periodic axis.
    fn of(&self, global: [isize; 3]) -> Option<(usize, [isize; 3])> {
        let mut position = [0usize; 3];
        let mut local = [0isize; 3];
        for a in 0..3 {
            if !self.active[a] {
                // No ghosts along an axis the grid does not use.
                if global[a] != 0 {
                    return None;
                }
                continue;
            }
            let n = self.points[a];
            let g = if self.periodic[a] {
                global[a].rem_euclid(n)
            } else if (0..n).contains(&global[a]) {
                global[a]
            } else {
                return None;
            };
            let width = self.patch_cells[a] as isize;
            let p = ((g / width) as usize).min(self.counts[a] - 1);
            position[a] = p;
            local[a] = g - p as isize * width;
        }
        Some(((self.index_of)(position), local))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomposition::tests::divisor_at_most;
    use crate::device::Device;
    use crate::grid::{GhostWidth, Grid};
    use crate::location::{CellCentre, XFace, YFace};
    use proptest::prelude::*;

    /// The value every test puts at global point `g` (distinct per point).
    fn value_at(g: [isize; 3]) -> f64 {
        (g[0] * 10_000 + g[1] * 100 + g[2]) as f64 + 0.25
    }

    /// Ranks as threads of this process, every pair joined by a channel:
    /// a [`RankLink`] whose messages really travel between the ranks'
    /// own fields, for exchanges across ranks without MPI.
    #[derive(Debug)]
    struct ThreadLink {
        rank: usize,
        ranks: usize,
        to: Vec<std::sync::mpsc::Sender<Vec<f64>>>,
        from: Vec<std::sync::mpsc::Receiver<Vec<f64>>>,
    }

    impl ThreadLink {
        /// The links of `ranks` ranks, in rank order.
        fn all(ranks: usize) -> Vec<ThreadLink> {
            let mut senders: Vec<Vec<_>> = (0..ranks).map(|_| Vec::new()).collect();
            let mut receivers: Vec<Vec<_>> = (0..ranks).map(|_| Vec::new()).collect();
            for sender in senders.iter_mut() {
                for receiver in receivers.iter_mut() {
                    let (tx, rx) = std::sync::mpsc::channel();
                    sender.push(tx);
                    receiver.push(rx);
                }
            }
            senders
                .into_iter()
                .zip(receivers)
                .enumerate()
                .map(|(rank, (to, from))| ThreadLink {
                    rank,
                    ranks,
                    to,
                    from,
                })
                .collect()
        }
    }

    impl RankLink for ThreadLink {
        fn rank(&self) -> usize {
            self.rank
        }

        fn ranks(&self) -> usize {
            self.ranks
        }

        fn swap(&self, outgoing: &[Vec<f64>], _: &[usize]) -> FieldResult<Vec<Vec<f64>>> {
            // Channel [a][b] of `all` carries a's messages to b: rank a
            // holds its sending end at `to[b]`, rank b its receiving end
            // at `from[a]`.
            for (to, message) in self.to.iter().zip(outgoing) {
                to.send(message.clone()).unwrap();
            }
            Ok(self.from.iter().map(|from| from.recv().unwrap()).collect())
        }

        fn abort(&self, code: i32) -> ! {
            panic!("rank {} aborted with status {code}", self.rank)
        }
    }

    /// Fields of every patch with their interiors from `value_at` and their
    /// ghosts NaN; then the exchange, by `ranks` ranks (threads, each
    /// owning its contiguous run of patches, its messages travelling
    /// through [`ThreadLink`]); then every ghost point compared with a
    /// hand-written reference: inside the domain (after wrapping periodic
    /// axes, faces normal to a non-periodic axis counting the boundary
    /// face) the value at the wrapped point, NaN outside.
    fn check<L: Location>(
        cells: [usize; 3],
        counts: [usize; 3],
        periodic: [bool; 3],
        ghosts: usize,
        ranks: usize,
    ) {
        let grid = Grid::new(cells, [1.0; 3], [0.0; 3])
            .unwrap()
            .with_periodic(periodic);
        let layout = PatchLayout::new(&grid, counts, GhostWidth::uniform(ghosts)).unwrap();
        let mut fields: Vec<SpatialField<L, f64>> = (0..layout.len())
            .map(|p| {
                let patch = layout.patch(p).unwrap();
                let mut field =
                    SpatialField::<L, f64>::new(&format!("f{p}"), &patch, Device::Cpu).unwrap();
                let fl = field.layout().clone();
                let data = field.values_mut().unwrap();
                for local in fl.allocated().iter() {
                    let g = [0, 1, 2].map(|a| patch.offset()[a] as isize + local[a]);
                    data[fl.linear_index(local)] = if fl.interior().contains(local) {
                        value_at(g)
                    } else {
                        f64::NAN
                    };
                }
                field
            })
            .collect();
        if ranks == 1 {
            exchange_ghosts(&layout, &mut fields).unwrap();
        } else {
            let plan = HaloPlan::new(&layout, L::KIND).unwrap();
            let mut rest: &mut [SpatialField<L, f64>] = &mut fields;
            std::thread::scope(|scope| {
                for link in ThreadLink::all(ranks) {
                    let owned = layout.owned_by(link.rank, ranks).unwrap();
                    let (mine, others) = std::mem::take(&mut rest).split_at_mut(owned.len());
                    rest = others;
                    let (plan, layout) = (&plan, &layout);
                    scope.spawn(move || {
                        let route = HaloRoute::new(plan, layout, link.rank, ranks).unwrap();
                        let mut held = PatchFields::new(layout, owned.start, mine).unwrap();
                        exchange_with(&route, &link, &mut held).unwrap();
                    });
                }
            });
        }
        let active = grid.active_dimensions();
        let normal = match L::KIND {
            LocationKind::XFace => 0,
            LocationKind::YFace => 1,
            LocationKind::ZFace => 2,
            LocationKind::CellCentre => 3,
        };
        for (p, field) in fields.iter().enumerate() {
            let patch = layout.patch(p).unwrap();
            let fl = field.layout();
            let data = field.values().unwrap();
            for local in fl.allocated().iter() {
                let g = [0, 1, 2].map(|a| patch.offset()[a] as isize + local[a]);
                let mut wrapped = g;
                let mut inside = true;
                for a in 0..3 {
                    if !active[a] {
                        continue;
                    }
                    if periodic[a] {
                        wrapped[a] = g[a].rem_euclid(cells[a] as isize);
                    } else {
                        let last = cells[a] as isize - if normal == a { 0 } else { 1 };
                        inside &= g[a] >= 0 && g[a] <= last;
                    }
                }
                let got = data[fl.linear_index(local)];
                if inside {
                    assert_eq!(
                        got.to_bits(),
                        value_at(wrapped).to_bits(),
                        "patch {p} point {local:?} (global {g:?})"
                    );
                } else {
                    assert!(
                        got.is_nan(),
                        "patch {p} point {local:?} outside the domain was written: {got}"
                    );
                }
            }
        }
    }

    #[test]
    fn seams_corners_and_periodic_wraps_take_the_owners_values() {
        check::<CellCentre>([8, 6, 1], [2, 3, 1], [true, false, false], 2, 1);
        check::<XFace>([8, 6, 1], [4, 2, 1], [false, true, false], 1, 1);
        check::<YFace>([6, 8, 4], [3, 2, 2], [false, false, true], 2, 1);
    }

    /// The same exchanges by 2, 3 and 5 ranks: messages read straight from
    /// the fields and written straight into the ghosts, in pieces that
    /// switch between ranks and patches.
    #[test]
    fn ranks_exchanging_messages_fill_the_ghosts_one_rank_fills() {
        for ranks in [2, 3, 5] {
            check::<CellCentre>([8, 6, 1], [2, 3, 1], [true, false, false], 2, ranks);
            check::<XFace>([8, 6, 1], [4, 2, 1], [false, true, false], 1, ranks);
            check::<YFace>([6, 8, 4], [3, 2, 2], [false, false, true], 2, ranks);
            check::<crate::location::ZFace>([6, 4, 6], [3, 2, 2], [true, true, true], 1, ranks);
        }
    }

    #[test]
    fn fields_that_do_not_match_the_layout_are_refused_by_name() {
        let grid = Grid::new([8, 8, 1], [1.0; 3], [0.0; 3]).unwrap();
        let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1)).unwrap();
        let mut one = vec![
            SpatialField::<CellCentre>::new("only", &layout.patch(0).unwrap(), Device::Cpu)
                .unwrap(),
        ];
        let why = exchange_ghosts(&layout, &mut one).unwrap_err().to_string();
        assert!(why.contains("1 field(s) given for the 2 patches"), "{why}");
        let mut swapped = vec![
            SpatialField::<CellCentre>::new("a", &layout.patch(1).unwrap(), Device::Cpu).unwrap(),
            SpatialField::<CellCentre>::new("b", &layout.patch(0).unwrap(), Device::Cpu).unwrap(),
        ];
        let error = exchange_ghosts(&layout, &mut swapped).unwrap_err();
        assert!(
            matches!(&error, FieldError::InvalidLayout { reason } if reason.contains("field 'a'") && reason.contains("patch 0")),
            "{error}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random grids, layouts, periodicity, ghost widths and locations.
        #[test]
        fn every_ghost_point_equals_the_whole_domain(
            cells in prop::array::uniform3(1usize..9),
            wanted in prop::array::uniform3(1usize..4),
            periodic in prop::array::uniform3(any::<bool>()),
            ghosts in 0usize..3,
            location in 0usize..4,
            ranks in 1usize..4,
        ) {
            let counts = [0, 1, 2].map(|a| {
                let mut c = divisor_at_most(cells[a], wanted[a]);
                // Patches at least as thick as their ghosts.
                while c > 1 && cells[a] / c < ghosts {
                    c = divisor_at_most(cells[a], c - 1);
                }
                c
            });
            // No more ranks than patches.
            let ranks = ranks.min(counts.iter().product());
            match location {
                0 => check::<CellCentre>(cells, counts, periodic, ghosts, ranks),
                1 => check::<XFace>(cells, counts, periodic, ghosts, ranks),
                2 => check::<YFace>(cells, counts, periodic, ghosts, ranks),
                _ => check::<crate::location::ZFace>(cells, counts, periodic, ghosts, ranks),
            }
        }
    }
}
