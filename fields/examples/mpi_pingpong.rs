//! The cost of a message between two MPI ranks through the path the halo
//! exchange takes ([`RankLink::swap`] of `MpiLink`): rank 0 and rank 1
//! swap buffers of 1 to 1,048,576 `f64` back and forth, and the one-way
//! time per size is printed with a fitted latency and bandwidth (the
//! cost model of issue 51; `scripts/bench-mpi.sh` runs it through
//! OpenMPI's shared-memory and TCP transports). Run with
//! `mpirun -np 2 target/release/examples/mpi_pingpong`.

use mpi::traits::Communicator;
use std::time::Instant;
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::RankLink;

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("MPI was initialised already");
        std::process::exit(1);
    };
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("run on exactly 2 ranks (mpirun -np 2)");
        world.abort(2);
    }
    let link = MpiLink::new(world.duplicate());
    let rank = link.rank();
    let other = 1 - rank;
    let mut rows = Vec::new();
    for power in [0u32, 3, 6, 9, 12, 15, 18, 20] {
        let n = 1usize << power;
        // About 20 ms of messages per size, at least 10 round trips.
        let rounds = (200_000 / n.max(1)).clamp(10, 20_000);
        let buffer = vec![rank as f64; n];
        let mut outgoing = vec![Vec::new(), Vec::new()];
        let mut incoming_len = vec![0, 0];
        incoming_len[other] = n;
        // Warm-up, then the timed round trips: every swap is one message
        // each way, so one swap's time is one one-way transfer (both
        // directions in flight at once).
        for _ in 0..3 {
            outgoing[other] = buffer.clone();
            link.swap(&outgoing, &incoming_len).unwrap_or_else(|e| {
                eprintln!("rank {rank}: {e}");
                link.abort(1)
            });
        }
        let started = Instant::now();
        for _ in 0..rounds {
            outgoing[other] = buffer.clone();
            let received = link.swap(&outgoing, &incoming_len).unwrap_or_else(|e| {
                eprintln!("rank {rank}: {e}");
                link.abort(1)
            });
            if received[other].len() != n || received[other][0] != other as f64 {
                eprintln!("rank {rank}: a message of {n} values arrived wrong");
                link.abort(1);
            }
        }
        let seconds = started.elapsed().as_secs_f64() / rounds as f64;
        rows.push((n * 8, seconds));
    }
    if rank == 0 {
        println!("bytes\tone-way us\tGB/s");
        for &(bytes, seconds) in &rows {
            println!(
                "{bytes}\t{:.2}\t{:.3}",
                seconds * 1e6,
                bytes as f64 / seconds / 1e9
            );
        }
        let (small, large) = (rows[0], rows[rows.len() - 1]);
        // t(b) = latency + b / bandwidth, through the smallest and largest.
        let bandwidth = (large.0 - small.0) as f64 / (large.1 - small.1);
        println!(
            "fit: latency {:.2} us, bandwidth {:.2} GB/s",
            small.1 * 1e6,
            bandwidth / 1e9
        );
    }
}
