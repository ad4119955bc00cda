#!/usr/bin/env bash
# Issue 51's benchmarks, in release mode: the cost of a message through
# OpenMPI's shared-memory and TCP transports (the halo exchange's path),
# and the wasatch-scalability case (the ExprLib equations through the
# transport solver) and exprlib-scalability (the hand-built graph on
# PatchedGraphs) on 1, 2 and 4 ranks, strong (one grid) and near-weak
# (cells per rank about constant: a cube cannot double), with each rank's
# stepping and exchange time; the multigrid Poisson solve on 2 x 1 x 2
# patches of a 64^3 periodic box against the whole domain's on every
# rank; and the 3D Taylor-Green flow on 2 x 1 x 2 patches (momentum and
# Poisson solve; then with the projection replicated) on 1, 2 and 4
# ranks, strong, with the graphs' times; dumps per rank against whole ones,
# for a transport case and a flow. Above 2 ranks this 2-core machine is
# oversubscribed: the figures measure overhead, not speed. Record them in
# docs/benchmarks.md with the machine and date.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
source scripts/mpi-tools.sh
cargo build --release -p watershed-fields --features mpi --example mpi_pingpong
cargo build --release -p watershed-cases --features mpi --bin watershed
cargo build --release -p watershed-solvers --features mpi --example mpi_poisson
cargo build --release -p watershed-exprgraph --example split_cost
mkdir -p target/mpi-release
cp target/release/watershed target/mpi-release/watershed
W="$PWD/target/mpi-release/watershed"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== one message each way between 2 ranks, shared memory (btl self,vader)"
mpirun --oversubscribe --mca btl self,vader -np 2 target/release/examples/mpi_pingpong
echo "== the same through TCP on the loopback (btl self,tcp)"
mpirun --oversubscribe --mca btl self,tcp -np 2 target/release/examples/mpi_pingpong

# One run: prints ms/step and the per-rank exchange table.
case_run() { # case ranks cells patches
    local case="$1" ranks="$2" cells="$3" patches="$4"
    local args=(run "$case" --set pdes=10 --set "cells=$cells" --set variant=coupled
        --set "patches=$patches" --steps 40 --threads 1 --quiet --output "$out/$case-r$ranks-c$cells-p${patches//,/x}")
    local log="$out/log"
    if [ "$ranks" = 0 ]; then
        "$W" "${args[@]}" >"$log" 2>&1
        ranks=1
    else
        mpirun --oversubscribe -np "$ranks" "$W" "${args[@]}" >"$log" 2>&1
    fi
    local per_step
    per_step="$(grep -o 'stepping: [0-9.e+-]* ms/step' "$log" | head -n 1)"
    echo "$case: ranks $ranks, ${cells}^3 cells, patches $patches: $per_step"
    grep -E "^  rank [0-9]+:|^exchanges and reductions" "$log" || true
}
for case in wasatch-scalability exprlib-scalability; do
    echo "== $case, 10 coupled equations, 40 forward-Euler steps, 1 thread per rank"
    echo "-- one process, no mpirun: one patch, then 2 x 2 patches (the exchange's cost in one process)"
    case_run "$case" 0 32 1,1,1
    case_run "$case" 0 32 2,2,1
    echo "-- strong: 32^3 cells on 2 x 2 patches"
    for ranks in 1 2 4; do case_run "$case" "$ranks" 32 2,2,1; done
    echo "-- near-weak: about 4096 cells per rank (16^3 on 1, 20^3 on 2, 26^3 on 4)"
    case_run "$case" 1 16 1,1,1
    case_run "$case" 2 20 2,1,1
    case_run "$case" 4 26 2,2,1
done

echo "== the multigrid Poisson solve (CG, 1e-8) of a 64^3 periodic box: whole on every rank, and on 2 x 1 x 2 patches across the ranks"
for ranks in 1 2 4; do
    mpirun --oversubscribe -np "$ranks" target/release/examples/mpi_poisson --bench 64 | sort
done

# One flow run: ms/step, the per-rank table, and the graphs' times.
flow_run() { # ranks patches [replicate_projection]
    local ranks="$1" patches="$2" replicate="${3:-false}"
    local args=(run taylor-green --set dimensions=3 --set cells=32 --set re=1600
        --set "patches=$patches" --set "replicate_projection=$replicate" --steps 10 --threads 1 --quiet
        --output "$out/tgv-r$ranks-p${patches//,/x}-$replicate")
    local log="$out/log"
    local status=0
    if [ "$ranks" = 0 ]; then
        "$W" "${args[@]}" >"$log" 2>&1 || status=$?
        ranks=1
    else
        mpirun --oversubscribe -np "$ranks" "$W" "${args[@]}" >"$log" 2>&1 || status=$?
    fi
    # 10 steps do not reach the case's end: its check fails (status 3).
    [ "$status" = 0 ] || [ "$status" = 3 ] || { cat "$log"; exit 1; }
    local per_step
    per_step="$(grep -o 'stepping: [0-9.e+-]* ms/step' "$log" | head -n 1)"
    echo "ranks $ranks, 32^3 cells, patches $patches, replicated projection $replicate: $per_step"
    grep -E "^  rank [0-9]+:|^exchanges and reductions|^  (momentum|projection)" "$log" || true
}
echo "== taylor-green 3D, Re 1600, 32^3 cells, 10 SSP-RK3 steps, 1 thread per rank"
echo "-- one process: the single graph, then 2 x 1 x 2 patches"
flow_run 0 1,1,1
flow_run 0 2,1,2
echo "-- strong: 2 x 1 x 2 patches on 1, 2 and 4 ranks, the Poisson solve on the patches"
for ranks in 1 2 4; do flow_run "$ranks" 2,1,2; done
echo "-- the same with the projection replicated (whole on every rank)"
for ranks in 1 2 4; do flow_run "$ranks" 2,1,2 true; done

# One wasatch-scalability run on 2 ranks: ms/step and each rank's wall,
# exchange and overlapped interior time.
overlap_run() { # cells patches overlap_exchange [mpirun options...]
    local cells="$1" patches="$2" overlap="$3"
    shift 3
    local log="$out/log"
    mpirun --oversubscribe "$@" -np 2 "$W" run wasatch-scalability --set pdes=10 --set "cells=$cells" \
        --set variant=coupled --set "patches=$patches" --set "overlap_exchange=$overlap" --steps 60 \
        --threads 1 --quiet --output "$out/overlap-$cells-${patches//,/x}-$overlap-$RANDOM" >"$log" 2>&1
    echo "2 ranks, ${cells}^3, patches $patches, overlap $overlap $*: $(grep -o 'stepping: [0-9.e+-]* ms/step' "$log" | head -n 1)"
    grep -E "^  rank [0-9]+:" "$log" || true
}
echo "== the exchange overlapped with the next stage's interior work, or run when each stage ends"
echo "-- what the split costs in one process (one diffusion update, us per execution)"
target/release/examples/split_cost
echo "-- wasatch-scalability, 10 coupled equations, forward Euler, 60 steps, 1 thread per rank, alternated"
for round in 1 2 3; do
    overlap_run 32 1,2,2 true
    overlap_run 32 1,2,2 false
done
for round in 1 2; do
    overlap_run 32 2,2,1 true
    overlap_run 32 2,2,1 false
    overlap_run 64 1,1,2 true
    overlap_run 64 1,1,2 false
    overlap_run 32 1,2,2 true --mca btl self,tcp
    overlap_run 32 1,2,2 false --mca btl self,tcp
done

# One wasatch-scalability run on 2 ranks dumping every step: the stepping
# loop's wall time (dumps included) and the exchanges (gathers included).
dump_run() { # extra option ("" or --per-rank-files)
    local log="$out/log"
    mpirun --oversubscribe -np 2 "$W" run wasatch-scalability --set pdes=4 --set cells=64 \
        --set patches=1,1,2 --steps 6 --dump-every 1 --threads 1 --quiet $1 \
        --output "$out/dumps-$RANDOM" >"$log" 2>&1
    echo "${1:-whole (gathered on rank 0)}: $(grep -o 'steps 6 .*wall [0-9.]* s' "$log" | grep -o 'wall [0-9.]* s'), $(grep -o 'exchanges and reductions across patches: [0-9.]* s' "$log")"
}
echo "== dumps written per rank or gathered on rank 0: wasatch-scalability 64^3, 4 equations, 7 dumps of 4 fields, alternated"
for round in 1 2 3; do
    dump_run ""
    dump_run --per-rank-files
done

# The 3D Taylor-Green flow on 2 ranks dumping every step: every rank holds
# the whole flow, so rank 0 writes a whole dump with nothing gathered;
# per rank, each writes its patches' part.
flow_dump_run() { # extra option ("" or --per-rank-files)
    local log="$out/log"
    mpirun --oversubscribe -np 2 "$W" run taylor-green --set dimensions=3 --set cells=48 \
        --set patches=1,1,2 --steps 6 --dump-every 1 --threads 1 --quiet $1 \
        --output "$out/flow-dumps-$RANDOM" >"$log" 2>&1 || [ $? = 3 ]
    echo "${1:-whole (rank 0)}: $(grep -o 'steps 6 .*wall [0-9.]* s' "$log" | grep -o 'wall [0-9.]* s')"
}
echo "== a flow's dumps per rank or whole on rank 0: the 3D Taylor-Green vortex 48^3 on 1 x 1 x 2 patches, 7 dumps of 11 arrays (u, v, w, p and the derived fields), alternated"
for round in 1 2 3; do
    flow_dump_run ""
    flow_dump_run --per-rank-files
done
