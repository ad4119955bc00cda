//! The halo exchange of [`crate::halo`] across MPI ranks: [`MpiLink`], a
//! [`RankLink`] over an MPI communicator, and [`exchange_ghosts_across`]
//! for fields a rank holds in a slice. Each rank holds the fields of the
//! patches it owns ([`PatchLayout::owned_by`]), copies the ghost points
//! whose owners it holds itself and sends the others in one message per
//! pair of ranks. Both ends of a message walk the same [`HaloPlan`] in the
//! same order (destination patch, then its ghost points in storage
//! order), so a message carries values only, no indices. Receives are
//! posted before sends, all non-blocking, and every rank waits for all of
//! them before writing. Values are copied, so the ghosts equal those one
//! process gives with the same layout, bit for bit, whatever the number
//! of ranks.

use crate::decomposition::PatchLayout;
use crate::error::{FieldError, FieldResult};
use crate::field::SpatialField;
use crate::halo::{HaloPlan, HaloRoute, PatchFields, exchange_with};
use crate::location::Location;
use crate::ranks::{RankLink, Work, check_counts};
use mpi::Count;
use mpi::datatype::PartitionMut;
use mpi::traits::{Communicator, CommunicatorCollectives, Destination, Equivalence, Root, Source};
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// The tag of halo and gather messages.
const HALO_TAG: i32 = 51;

/// The shortest time between two progress passes of a swap's requests
/// while its work runs ([`RankLink::swap_during`]).
const PROGRESS_INTERVAL: Duration = Duration::from_micros(100);

/// A [`RankLink`] over the ranks of an MPI communicator.
pub struct MpiLink<C: Communicator> {
    communicator: C,
    /// [`RankLink::waited`]: time blocked in swaps' waits and gathers.
    waited: Cell<Duration>,
}

impl<C: Communicator> std::fmt::Debug for MpiLink<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiLink")
            .field("rank", &self.communicator.rank())
            .field("ranks", &self.communicator.size())
            .finish()
    }
}

impl<C: Communicator> MpiLink<C> {
    /// The link between the ranks of `communicator`.
    pub fn new(communicator: C) -> Self {
        MpiLink {
            communicator,
            waited: Cell::new(Duration::ZERO),
        }
    }

    /// The communicator.
    pub fn communicator(&self) -> &C {
        &self.communicator
    }
}

impl<C: Communicator> RankLink for MpiLink<C> {
    fn rank(&self) -> usize {
        self.communicator.rank() as usize
    }

    fn ranks(&self) -> usize {
        self.communicator.size() as usize
    }

    fn swap(&self, outgoing: &[Vec<f64>], incoming_len: &[usize]) -> FieldResult<Vec<Vec<f64>>> {
        let mut incoming: Vec<Vec<f64>> = incoming_len.iter().map(|&n| vec![0.0; n]).collect();
        swap_over_during(
            &self.communicator,
            outgoing,
            &mut incoming,
            &mut |_| Ok(()),
            &self.waited,
        )?;
        Ok(incoming)
    }

    fn swap_during(
        &self,
        outgoing: &[Vec<f64>],
        incoming: &mut [Vec<f64>],
        work: &mut Work<'_>,
    ) -> FieldResult<()> {
        swap_over_during(&self.communicator, outgoing, incoming, work, &self.waited)
    }

    fn waited(&self) -> Duration {
        self.waited.get()
    }

    fn abort(&self, code: i32) -> ! {
        self.communicator.abort(code)
    }

    fn gather_in_rank_order(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Vec<f64>> {
        let started = Instant::now();
        let gathered = all_gather_over(&self.communicator, mine, counts);
        add_time(&self.waited, started);
        gathered
    }

    fn gather_to_root(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Option<Vec<f64>>> {
        let started = Instant::now();
        let gathered = gather_to_root_over(&self.communicator, mine, counts);
        add_time(&self.waited, started);
        gathered
    }
}

/// A link over a communicator the caller keeps.
struct BorrowedLink<'a, C: Communicator>(&'a C);

impl<C: Communicator> std::fmt::Debug for BorrowedLink<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BorrowedLink")
            .field("rank", &self.0.rank())
            .field("ranks", &self.0.size())
            .finish()
    }
}

impl<C: Communicator> RankLink for BorrowedLink<'_, C> {
    fn rank(&self) -> usize {
        self.0.rank() as usize
    }

    fn ranks(&self) -> usize {
        self.0.size() as usize
    }

    fn swap(&self, outgoing: &[Vec<f64>], incoming_len: &[usize]) -> FieldResult<Vec<Vec<f64>>> {
        swap_over(self.0, outgoing, incoming_len)
    }

    fn abort(&self, code: i32) -> ! {
        self.0.abort(code)
    }

    fn gather_in_rank_order(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Vec<f64>> {
        all_gather_over(self.0, mine, counts)
    }

    fn gather_to_root(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Option<Vec<f64>>> {
        gather_to_root_over(self.0, mine, counts)
    }
}

/// The counts and offsets of an `MPI_Allgatherv` or `MPI_Gatherv` of
/// `counts` values per rank, checked against MPI's count limit, and the
/// total.
fn partition_of(counts: &[usize]) -> FieldResult<(Vec<Count>, Vec<Count>, usize)> {
    let too_many = || FieldError::InvalidLayout {
        reason: format!(
            "a gather of {counts:?} values per rank exceeds MPI's count limit ({}); gather fewer values at once",
            i32::MAX
        ),
    };
    let mut sizes: Vec<Count> = Vec::with_capacity(counts.len());
    let mut offsets: Vec<Count> = Vec::with_capacity(counts.len());
    let mut total: usize = 0;
    for &count in counts {
        offsets.push(Count::try_from(total).map_err(|_| too_many())?);
        sizes.push(Count::try_from(count).map_err(|_| too_many())?);
        total = total.checked_add(count).ok_or_else(too_many)?;
    }
    Count::try_from(total).map_err(|_| too_many())?;
    Ok((sizes, offsets, total))
}

/// [`RankLink::gather_in_rank_order`] over `communicator` as one
/// `MPI_Allgatherv` (about log2(ranks) message latencies, where the
/// default through `swap` sends every rank's values to every other).
fn all_gather_over<C: Communicator>(
    communicator: &C,
    mine: &[f64],
    counts: &[usize],
) -> FieldResult<Vec<f64>> {
    let (rank, ranks) = (communicator.rank() as usize, communicator.size() as usize);
    check_counts(rank, ranks, mine, counts)?;
    let (sizes, offsets, total) = partition_of(counts)?;
    let mut all = vec![0.0; total];
    {
        let mut partition = PartitionMut::new(&mut all[..], &sizes[..], &offsets[..]);
        communicator.all_gather_varcount_into(mine, &mut partition);
    }
    Ok(all)
}

/// [`RankLink::gather_to_root`] over `communicator` as one `MPI_Gatherv`
/// to rank 0.
fn gather_to_root_over<C: Communicator>(
    communicator: &C,
    mine: &[f64],
    counts: &[usize],
) -> FieldResult<Option<Vec<f64>>> {
    let (rank, ranks) = (communicator.rank() as usize, communicator.size() as usize);
    check_counts(rank, ranks, mine, counts)?;
    let (sizes, offsets, total) = partition_of(counts)?;
    let root = communicator.process_at_rank(0);
    if rank != 0 {
        root.gather_varcount_into(mine);
        return Ok(None);
    }
    let mut all = vec![0.0; total];
    {
        let mut partition = PartitionMut::new(&mut all[..], &sizes[..], &offsets[..]);
        root.gather_varcount_into_root(mine, &mut partition);
    }
    Ok(Some(all))
}

/// [`RankLink::swap`] over `communicator`: every receive posted, then
/// every send, all non-blocking, then all awaited (the wait not kept).
fn swap_over<C: Communicator>(
    communicator: &C,
    outgoing: &[Vec<f64>],
    incoming_len: &[usize],
) -> FieldResult<Vec<Vec<f64>>> {
    let waited = Cell::new(Duration::ZERO);
    let mut incoming: Vec<Vec<f64>> = incoming_len.iter().map(|&n| vec![0.0; n]).collect();
    swap_over_during(
        communicator,
        outgoing,
        &mut incoming,
        &mut |_| Ok(()),
        &waited,
    )?;
    Ok(incoming)
}

/// Adds the time since `started` to `waited`.
fn add_time(waited: &Cell<Duration>, started: Instant) {
    waited.set(waited.get() + started.elapsed());
}

/// [`swap_over`] with `work` run between posting the messages and waiting
/// for them, its progress call testing the requests still pending (so
/// that messages above the eager limit move while it works); `work`'s
/// error is returned after the wait, whose time is added to `waited`. The
/// values from rank `r` land in `incoming[r]`, as many as it holds.
fn swap_over_during<C: Communicator>(
    communicator: &C,
    outgoing: &[Vec<f64>],
    incoming: &mut [Vec<f64>],
    work: &mut Work<'_>,
    waited: &Cell<Duration>,
) -> FieldResult<()> {
    let (rank, ranks) = (communicator.rank() as usize, communicator.size() as usize);
    if outgoing.len() != ranks || incoming.len() != ranks {
        return Err(FieldError::InvalidLayout {
            reason: format!(
                "rank {rank} of {ranks} was given {} outgoing and {} incoming buffer(s); give one per rank",
                outgoing.len(),
                incoming.len()
            ),
        });
    }
    // What each request receives, for the check of its count: a message
    // shorter than its buffer would leave stale values behind unseen.
    let expected: Vec<(usize, usize)> = incoming
        .iter()
        .enumerate()
        .filter(|(_, buffer)| !buffer.is_empty())
        .map(|(from, buffer)| (from, buffer.len()))
        .collect();
    let short: RefCell<Option<FieldError>> = RefCell::new(None);
    let check = |which: usize, status: mpi::point_to_point::Status| {
        if let Some(&(from, length)) = expected.get(which) {
            let count = status.count(f64::equivalent_datatype());
            if usize::try_from(count).ok() != Some(length) {
                short.borrow_mut().get_or_insert(FieldError::InvalidLayout {
                    reason: format!(
                        "rank {rank} expected {length} value(s) from rank {from} and received {count}; every rank must exchange the same fields with the same layout"
                    ),
                });
            }
        }
    };
    let worked = mpi::request::scope(|scope| {
        let mut requests = Vec::new();
        for (from, buffer) in incoming.iter_mut().enumerate() {
            if !buffer.is_empty() {
                requests.push(
                    communicator
                        .process_at_rank(from as i32)
                        .immediate_receive_into_with_tag(scope, &mut buffer[..], HALO_TAG),
                );
            }
        }
        for (to, buffer) in outgoing.iter().enumerate() {
            if !buffer.is_empty() {
                requests.push(
                    communicator
                        .process_at_rank(to as i32)
                        .immediate_send_with_tag(scope, &buffer[..], HALO_TAG),
                );
            }
        }
        // Receives first, in `expected`'s order, then the sends.
        let mut pending: Vec<Option<_>> = requests.into_iter().map(Some).collect();
        let mut last = Instant::now();
        let worked = work(&mut || {
            // Each test runs the library's whole progress engine (every
            // transport polled): at most one pass per PROGRESS_INTERVAL,
            // and it stops at the first request still in flight.
            if last.elapsed() < PROGRESS_INTERVAL {
                return;
            }
            last = Instant::now();
            for (which, slot) in pending.iter_mut().enumerate() {
                if let Some(request) = slot.take() {
                    match request.test() {
                        Ok(status) => check(which, status),
                        Err(still) => {
                            *slot = Some(still);
                            break;
                        }
                    }
                }
            }
        });
        let waiting = Instant::now();
        for (which, slot) in pending.into_iter().enumerate() {
            if let Some(request) = slot {
                check(which, request.wait());
            }
        }
        add_time(waited, waiting);
        worked
    });
    match short.into_inner() {
        Some(error) => Err(error),
        None => worked,
    }
}

/// Fills the ghost points of the fields of the patches this rank of
/// `communicator` owns (`owned`, in patch order) from the patches owning
/// those points, on this rank or another (see the module docs). Every rank
/// of the communicator must call it with the same layout and location.
/// Returns how many points this rank wrote. An error, naming the field or
/// the counts, when `owned` is not this rank's run of patches.
pub fn exchange_ghosts_across<L: Location, C: Communicator>(
    layout: &PatchLayout,
    communicator: &C,
    owned: &mut [SpatialField<L, f64>],
) -> FieldResult<usize> {
    let link = BorrowedLink(communicator);
    let (rank, ranks) = (link.rank(), link.ranks());
    let mine = layout.owned_by(rank, ranks)?;
    if owned.len() != mine.len() {
        return Err(FieldError::InvalidLayout {
            reason: format!(
                "rank {rank} of {ranks} owns patches {mine:?} of layout {:?} but was given {} field(s); give one per owned patch, in order",
                layout.counts(),
                owned.len()
            ),
        });
    }
    let plan = HaloPlan::new(layout, L::KIND)?;
    let route = HaloRoute::new(&plan, layout, rank, ranks)?;
    let mut fields = PatchFields::new(layout, mine.start, owned)?;
    exchange_with(&route, &link, &mut fields)
}
