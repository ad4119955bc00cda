//! What the ranks of a decomposed run agree on while the driver runs it
//! (issue 51): every rank steps, dumps and checkpoints together, because
//! a decomposed case gathers its fields over the ranks to write them, but
//! only rank 0 writes files. The other ranks ("followers") write their
//! part of each dump and checkpoint into an HDF5 file in memory that is
//! never stored, so that they run exactly the code rank 0 runs (the same
//! collective calls in the same order) without a second copy on disk.
//! (Dumps written per rank are the exception: every rank writes its own
//! file, and rank 0 records the dump after all have; see
//! `crate::driver::OutputFiles`.)
//!
//! Decisions that depend on what only rank 0 knows (which dumps its
//! output folder already holds) are rank 0's, sent to all; a signal that
//! reached any rank stops every rank after the same step.

use crate::error::{CaseError, CaseResult};
#[cfg(feature = "mpi")]
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use watershed_fields::ranks::RankLink;
use watershed_io::rank_dumps::RankDumpReport;

/// Whether this process is a follower: a rank other than 0 of a run on
/// several ranks.
pub fn is_follower(ranks: Option<&dyn RankLink>) -> bool {
    ranks.is_some_and(|link| link.rank() != 0)
}

/// Rank 0's `decision`, on every rank (collective when there are several).
pub fn leader_decides(ranks: Option<&dyn RankLink>, decision: bool) -> CaseResult<bool> {
    match ranks {
        Some(link) if link.ranks() > 1 => {
            let all = link
                .gather_in_rank_order(&[f64::from(u8::from(decision))], &vec![1; link.ranks()])?;
            Ok(all[0] != 0.0)
        }
        _ => Ok(decision),
    }
}

/// Every rank's report of the dump file it wrote, by rank, on every rank
/// (collective when there are several): what rank 0 records a dump per
/// rank from without opening the files.
pub fn gather_dump_reports(
    ranks: Option<&dyn RankLink>,
    mine: RankDumpReport,
) -> CaseResult<Vec<RankDumpReport>> {
    match ranks {
        Some(link) if link.ranks() > 1 => {
            let all = link.gather_in_rank_order(
                &mine.to_numbers(),
                &vec![RankDumpReport::NUMBERS; link.ranks()],
            )?;
            all.chunks(RankDumpReport::NUMBERS)
                .enumerate()
                .map(|(rank, numbers)| {
                    RankDumpReport::from_numbers(numbers).ok_or_else(|| {
                        CaseError::Usage(format!(
                            "rank {rank}'s report of its dump file ({numbers:?}) is not a file size and a fingerprint: the ranks run different builds of watershed"
                        ))
                    })
                })
                .collect()
        }
        _ => Ok(vec![mine]),
    }
}

/// The signal any rank received (the largest number when several did),
/// on every rank (collective when there are several).
pub fn any_signal(ranks: Option<&dyn RankLink>, mine: Option<i32>) -> CaseResult<Option<i32>> {
    match ranks {
        Some(link) if link.ranks() > 1 => {
            let value = f64::from(mine.unwrap_or(0));
            let all = link.gather_in_rank_order(&[value], &vec![1; link.ranks()])?;
            let largest = all.iter().copied().fold(0.0, f64::max);
            Ok((largest > 0.0).then_some(largest as i32))
        }
        _ => Ok(mine),
    }
}

/// Runs `write` on the root group of an HDF5 file that lives in memory
/// only (the core driver without a backing store) and is dropped after:
/// a follower's part of a dump or checkpoint.
pub fn in_memory<T>(write: impl FnOnce(&hdf5::Group) -> CaseResult<T>) -> CaseResult<T> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "watershed-follower-{}-{}.h5",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    );
    let file = hdf5::File::with_options()
        .with_fapl(|p| p.core_filebacked(false))
        .create(&name)
        .map_err(|e| {
            CaseError::Usage(format!(
                "a follower rank cannot open an HDF5 file in memory ({e}); this HDF5 build lacks the core driver"
            ))
        })?;
    let group: &hdf5::Group = &file;
    write(group)
}

/// Whether this process was started by `mpirun` (OpenMPI's or a PMI
/// launcher's variables are set).
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"]
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// This process's rank among the ranks on its machine, as the launcher
/// says (OpenMPI's `OMPI_COMM_WORLD_LOCAL_RANK`, MPICH's `MPI_LOCALRANKID`,
/// PMIx's `PMIX_LOCAL_RANK`): which GPU of the machine it takes.
pub fn local_rank() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMIX_LOCAL_RANK",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.parse().ok())
}

/// How many ranks run on this process's machine, as the launcher says
/// (OpenMPI's `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's `MPI_LOCALNRANKS`,
/// PMIx's `PMIX_LOCAL_SIZE`): the ranks that share its cores.
pub fn local_ranks() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMIX_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.parse().ok())
    .filter(|&n| n >= 1)
}

/// The threads each of `local_ranks` ranks on a machine of `cores` cores
/// takes by default: an even share, at least one (more ranks than cores
/// oversubscribe anyway; more threads would make it worse).
pub fn threads_per_rank(cores: usize, local_ranks: usize) -> usize {
    (cores / local_ranks.max(1)).max(1)
}

/// Joins the MPI run this process was started in: the MPI environment
/// (keep it until the end: dropping it finalises MPI) and the link over
/// its world. `None` when not started by `mpirun`.
#[cfg(feature = "mpi")]
pub fn join_mpi_run() -> CaseResult<Option<(mpi::environment::Universe, Rc<dyn RankLink>)>> {
    use watershed_fields::halo_mpi::MpiLink;
    if !launched_by_mpirun() {
        return Ok(None);
    }
    let universe = mpi::initialize()
        .ok_or_else(|| CaseError::Usage("MPI was initialised twice in this process".into()))?;
    let link: Rc<dyn RankLink> = Rc::new(MpiLink::new(universe.world()));
    Ok(Some((universe, link)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use watershed_fields::ranks::SingleProcess;

    #[test]
    fn the_cores_are_shared_among_the_ranks_of_a_machine() {
        assert_eq!(threads_per_rank(16, 1), 16);
        assert_eq!(threads_per_rank(16, 4), 4);
        assert_eq!(threads_per_rank(16, 3), 5);
        assert_eq!(threads_per_rank(2, 4), 1);
        assert_eq!(threads_per_rank(8, 0), 8);
    }

    #[test]
    fn one_process_decides_alone_and_writes_nothing_to_disk() {
        let link = SingleProcess;
        assert!(!is_follower(Some(&link)));
        assert!(leader_decides(Some(&link), true).unwrap());
        assert_eq!(any_signal(Some(&link), Some(15)).unwrap(), Some(15));
        assert_eq!(any_signal(None, None).unwrap(), None);
        let here = std::env::current_dir().unwrap();
        let before = std::fs::read_dir(&here).unwrap().count();
        let written = in_memory(|group| {
            group
                .new_dataset::<f64>()
                .shape([3])
                .create("x")
                .and_then(|d| d.write(&[1.0, 2.0, 3.0]))
                .map_err(|e| CaseError::Usage(e.to_string()))?;
            group
                .member_names()
                .map_err(|e| CaseError::Usage(e.to_string()))
        })
        .unwrap();
        assert_eq!(written, ["x"]);
        assert_eq!(std::fs::read_dir(&here).unwrap().count(), before);
    }
}
