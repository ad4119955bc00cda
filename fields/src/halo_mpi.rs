//! The halo exchange of [`crate::halo`] across MPI ranks: each rank holds
//! the fields of the patches it owns ([`PatchLayout::owned_by`]), copies
//! the ghost points whose owners it holds itself, and sends the others in
//! one message per pair of ranks. Both ends of a message walk the same
//! [`HaloPlan`] in the same order (destination patch, then its ghost
//! points in storage order), so a message carries values only, no indices.
//! Receives are posted before sends, all non-blocking, and every rank
//! waits for all of them before writing. Values are copied, so the ghosts
//! equal those one process gives with the same layout, bit for bit,
//! whatever the number of ranks.

use crate::decomposition::PatchLayout;
use crate::error::{FieldError, FieldResult};
use crate::field::SpatialField;
use crate::halo::{HaloPlan, check_patch};
use crate::location::Location;
use mpi::traits::{Communicator, Destination, Source};

/// The tag of halo messages.
const HALO_TAG: i32 = 51;

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
    let (rank, ranks) = (communicator.rank() as usize, communicator.size() as usize);
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
    for (field, index) in owned.iter().zip(mine.clone()) {
        check_patch(layout, index, field)?;
    }
    let plan = HaloPlan::new(layout, L::KIND)?;
    let owner = |patch: usize| layout.owner(patch, ranks);
    // What each other rank sends this rank, and what this rank sends it.
    let mut outgoing: Vec<Vec<f64>> = vec![Vec::new(); ranks];
    let mut incoming_len = vec![0usize; ranks];
    for (destination, copies) in plan.copies.iter().enumerate() {
        let to = owner(destination)?;
        for copy in copies {
            let from = owner(copy.source)?;
            if from == rank && to != rank {
                let field = &owned[copy.source - mine.start];
                outgoing[to].push(field.values()?[copy.from]);
            } else if to == rank && from != rank {
                incoming_len[from] += 1;
            }
        }
    }
    let mut incoming: Vec<Vec<f64>> = incoming_len.iter().map(|&n| vec![0.0; n]).collect();
    mpi::request::scope(|scope| {
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
        for request in requests {
            request.wait();
        }
    });
    // Local values first (read before any write), then everything written
    // in plan order.
    let mut cursors = vec![0usize; ranks];
    let mut writes: Vec<Vec<(usize, f64)>> = Vec::with_capacity(owned.len());
    for destination in mine.clone() {
        let mut values = Vec::with_capacity(plan.copies[destination].len());
        for copy in &plan.copies[destination] {
            let from = owner(copy.source)?;
            let value = if from == rank {
                owned[copy.source - mine.start].values()?[copy.from]
            } else {
                let value = incoming[from][cursors[from]];
                cursors[from] += 1;
                value
            };
            values.push((copy.to, value));
        }
        writes.push(values);
    }
    let mut written = 0;
    for (field, values) in owned.iter_mut().zip(writes) {
        let data = field.values_mut()?;
        written += values.len();
        for (at, value) in values {
            data[at] = value;
        }
    }
    Ok(written)
}
