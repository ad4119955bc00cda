//! How the ranks of a decomposed run reach each other: [`RankLink`], the
//! one primitive the halo exchange and the patch-order reductions need
//! (every rank sends each other rank a buffer of values and receives one
//! from each), with [`SingleProcess`] for a run in one process and, with
//! the cargo feature `mpi`, `halo_mpi::MpiLink` over an MPI communicator.
//!
//! Keeping the transport behind this trait lets the solvers decompose
//! without knowing about MPI: what crosses a rank boundary is only ever a
//! vector of `f64` whose length both ends know from the patch layout.

use crate::error::{FieldError, FieldResult};

/// Work a rank does while its messages travel ([`RankLink::swap_during`]),
/// given a progress call to make between its pieces.
pub type Work<'w> = dyn FnMut(&mut dyn FnMut()) -> FieldResult<()> + 'w;

/// The ranks of a run and how values travel between them. Every rank of a
/// run calls the same methods in the same order (collectively).
pub trait RankLink: std::fmt::Debug {
    /// This rank (0-based).
    fn rank(&self) -> usize;

    /// How many ranks the run has.
    fn ranks(&self) -> usize;

    /// Sends `outgoing[r]` to each rank `r` (nothing when empty; this
    /// rank's own entry must be empty) and receives `incoming_len[r]`
    /// values from each rank `r`, returned per rank. Both slices have one
    /// entry per rank.
    fn swap(&self, outgoing: &[Vec<f64>], incoming_len: &[usize]) -> FieldResult<Vec<Vec<f64>>>;

    /// [`Self::swap`] with `work` run while the values travel: the
    /// messages are posted, `work` runs, then the swap completes. `work`
    /// is given a progress call to make now and then (between pieces of
    /// its work, on the calling thread): a transport that moves large
    /// messages only while the library is called (MPI's rendezvous
    /// protocol) moves them then. `work`'s error is returned after the
    /// swap completed (every rank takes part in every swap, so no rank
    /// waits forever for a failed one). The default, for links that
    /// cannot post a swap and return, runs `work` and then swaps: the same
    /// values, nothing hidden. The values from rank `r` land in
    /// `incoming[r]`, whose length says how many to receive (buffers kept
    /// by the caller from one swap to the next: no allocation, no page
    /// faults per exchange).
    fn swap_during(
        &self,
        outgoing: &[Vec<f64>],
        incoming: &mut [Vec<f64>],
        work: &mut Work<'_>,
    ) -> FieldResult<()> {
        let worked = work(&mut || {});
        let lengths: Vec<usize> = incoming.iter().map(Vec::len).collect();
        let received = self.swap(outgoing, &lengths)?;
        for (into, from) in incoming.iter_mut().zip(received) {
            if into.len() != from.len() {
                return Err(FieldError::InvalidLayout {
                    reason: format!(
                        "rank {} expected {} value(s) in a swap and received {}; every rank must exchange the same fields with the same layout",
                        self.rank(),
                        into.len(),
                        from.len()
                    ),
                });
            }
            into.copy_from_slice(&from);
        }
        worked
    }

    /// Wall time this rank has spent blocked in the link waiting for
    /// other ranks since the link was made: the final waits of swaps
    /// (after their work) and the collective gathers. What a rank's
    /// exchanges cost beyond it is the rank's own work (reading the values
    /// sent, writing the ghosts received). Zero for a link that never
    /// waits ([`SingleProcess`]).
    fn waited(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Ends every rank of the run with exit status `code`: after an error
    /// on one rank the others would otherwise wait for it forever (MPI:
    /// `MPI_Abort`; one process: it exits).
    fn abort(&self, code: i32) -> !;

    /// Every rank's `mine` concatenated in rank order, where rank `r`
    /// contributes `counts[r]` values: the same vector on every rank. With
    /// each rank holding a contiguous run of patches and `mine` one value
    /// per patch, the result is in patch order, so a sum over it does not
    /// depend on how many ranks there are.
    fn gather_in_rank_order(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Vec<f64>> {
        let (rank, ranks) = (self.rank(), self.ranks());
        check_counts(rank, ranks, mine, counts)?;
        let outgoing: Vec<Vec<f64>> = (0..ranks)
            .map(|r| if r == rank { Vec::new() } else { mine.to_vec() })
            .collect();
        let incoming_len: Vec<usize> = (0..ranks)
            .map(|r| if r == rank { 0 } else { counts[r] })
            .collect();
        let mut incoming = self.swap(&outgoing, &incoming_len)?;
        incoming[rank] = mine.to_vec();
        Ok(incoming.concat())
    }

    /// Every rank's `mine` concatenated in rank order on rank 0 only
    /// (`None` elsewhere): what rank 0 writes to a file, without a copy of
    /// the whole on every rank.
    fn gather_to_root(&self, mine: &[f64], counts: &[usize]) -> FieldResult<Option<Vec<f64>>> {
        gather_to_root_by_swap(self, mine, counts)
    }
}

/// `mine` of every rank concatenated in rank order on rank 0 (`Some`),
/// `None` on the others: [`RankLink::gather_to_root`] through
/// [`RankLink::swap`] (every rank sends rank 0 one message).
pub fn gather_to_root_by_swap(
    link: &(impl RankLink + ?Sized),
    mine: &[f64],
    counts: &[usize],
) -> FieldResult<Option<Vec<f64>>> {
    let (rank, ranks) = (link.rank(), link.ranks());
    check_counts(rank, ranks, mine, counts)?;
    let mut outgoing = vec![Vec::new(); ranks];
    let mut incoming_len = vec![0; ranks];
    if rank == 0 {
        incoming_len[1..].copy_from_slice(&counts[1..]);
    } else {
        outgoing[0] = mine.to_vec();
    }
    let mut incoming = link.swap(&outgoing, &incoming_len)?;
    if rank != 0 {
        return Ok(None);
    }
    incoming[0] = mine.to_vec();
    Ok(Some(incoming.concat()))
}

/// Refuses counts that are not one per rank or disagree with what this
/// rank contributes.
pub(crate) fn check_counts(
    rank: usize,
    ranks: usize,
    mine: &[f64],
    counts: &[usize],
) -> FieldResult<()> {
    if counts.len() != ranks || counts.get(rank) != Some(&mine.len()) {
        return Err(FieldError::InvalidLayout {
            reason: format!(
                "rank {rank} of {ranks} contributes {} value(s) but the counts {counts:?} say otherwise; give one count per rank, this rank's equal to what it contributes",
                mine.len()
            ),
        });
    }
    Ok(())
}

/// A run in one process: rank 0 of 1. Nothing travels.
///
/// ```
/// use watershed_fields::ranks::{RankLink, SingleProcess};
/// let link = SingleProcess;
/// assert_eq!((link.rank(), link.ranks()), (0, 1));
/// assert_eq!(link.gather_in_rank_order(&[1.0, 2.0], &[2])?, vec![1.0, 2.0]);
/// assert_eq!(link.gather_to_root(&[1.0, 2.0], &[2])?, Some(vec![1.0, 2.0]));
/// # Ok::<(), watershed_fields::FieldError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl RankLink for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn ranks(&self) -> usize {
        1
    }

    fn swap(&self, outgoing: &[Vec<f64>], incoming_len: &[usize]) -> FieldResult<Vec<Vec<f64>>> {
        if outgoing.len() != 1 || incoming_len.len() != 1 {
            return Err(FieldError::InvalidLayout {
                reason: format!(
                    "a single process has 1 rank, but the exchange gives {} outgoing and {} incoming buffer(s)",
                    outgoing.len(),
                    incoming_len.len()
                ),
            });
        }
        if !outgoing[0].is_empty() || incoming_len[0] != 0 {
            return Err(FieldError::InvalidLayout {
                reason: "a rank sends nothing to itself; its own values are copied locally".into(),
            });
        }
        Ok(vec![Vec::new()])
    }

    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_process_refuses_messages_to_itself() {
        let error = SingleProcess.swap(&[vec![1.0]], &[0]).unwrap_err();
        assert!(
            matches!(error, FieldError::InvalidLayout { ref reason } if reason.contains("itself"))
        );
        let error = SingleProcess
            .gather_in_rank_order(&[1.0], &[2])
            .unwrap_err();
        assert!(
            matches!(error, FieldError::InvalidLayout { ref reason } if reason.contains("rank 0 of 1 contributes 1"))
        );
    }
}
