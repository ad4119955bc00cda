#!/usr/bin/env bash
# The `watershed` program across MPI ranks (issue 51), run by
# scripts/test.sh: the advection case on 2 x 2 patches under
# `mpirun --oversubscribe -np 1, 2, 4` gives, at every dump, the bits of
# one process on one patch, and the same checkpoints on every rank count,
# and so do its dumps written per rank (--per-rank-files) on 2 and 4 ranks,
# continued on 2 ranks from a 4-rank checkpoint written per rank;
# so do wasatch-scalability on 2 x 1 x 2 patches on 2 and 4 ranks (its
# exchanges overlapped with interior work, and not), exprlib-scalability
# (the hand-built graph) on the same patches, and per rank on 4 ranks
# continued on 2, heat on
# 2 x 2 x 1 patches on 2 ranks, reacting-species (its species and its
# computed flow on 2 x 2 patches) on 2 ranks and per rank on 4 ranks
# continued on 2, and advection with one rank per
# (emulated) GPU; the lid-driven cavity on 2 x 2 patches (its momentum and
# its Poisson solve) on 1, 2 and 4 ranks and the 3D Taylor-Green vortex on
# 2 x 1 x 2 patches on 2 and 4 ranks give the bits of one process with the
# same layout (with the projection replicated, those of one patch; traced,
# rank 0 writing every rank's tracks into one trace), and a
# cavity checkpoint of 2 ranks restarts on 4, and so do its dumps and
# checkpoints per rank (each patch's pieces of the staggered velocity);
# the Taylor-Green vortex per rank on 4 ranks; the channel with its
# convective outflow on 2 x 2 patches on 2 ranks gives the bits of one
# process with that layout, and so does the DFG cylinder (an immersed
# body) on 2 x 2 patches on 2 and 4 ranks, forces included, and with its
# projection replicated it gives those of one patch; per rank on 2 ranks,
# continued on 4, it keeps every force row; a checkpoint written on
# 2 ranks restarts on 4 with the same bits; a bad layout or more ranks
# than patches is a clear error on every rank
# (no hang); SIGTERM to one rank stops every rank after the same step with
# a checkpoint that restarts bitwise; a rank killed mid-run ends the job
# (no hang) and the last complete checkpoint restarts. Needs scripts/tools.sh and
# scripts/mpi-tools.sh sourced (h5py in $WATERSHED_PYTHON, mpirun).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The same build as scripts/test.sh's (so that it is found built there).
cargo build --workspace --features watershed/mpi --examples --bins
mkdir -p target/mpi
cp target/debug/watershed target/mpi/watershed
W="$PWD/target/mpi/watershed"
SAME="$WATERSHED_PYTHON $PWD/scripts/mpi/same-dumps.py"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
run_quietly() { "$@" >"$out/last.log" 2>&1 || { cat "$out/last.log"; return 1; }; }
common=(--set cells=32 --set scheme=limited --steps 20 --dump-every 5 --quiet)

expect_error() { # expected text, then the command: it must fail within 120 s naming it
    local expected="$1"; shift
    local status=0
    timeout 120 "$@" >"$out/error.log" 2>&1 || status=$?
    if [ "$status" = 0 ] || [ "$status" = 124 ] || ! grep -q -- "$expected" "$out/error.log"; then
        echo "expected a failure (not a hang, status 124) saying '$expected'; status $status:"
        cat "$out/error.log"
        exit 1
    fi
}
echo "--> one process, one patch (the reference)"
run_quietly "$W" run advection "${common[@]}" --set patches=1,1,1 --output "$out/one"
for ranks in 1 2 4; do
    echo "--> $ranks rank(s), 2 x 2 patches: every dump and checkpoint"
    run_quietly mpirun --oversubscribe -np "$ranks" "$W" run advection "${common[@]}" \
        --set patches=2,2,1 --checkpoint-every 10 --output "$out/np$ranks"
    # The dumps equal one patch's; the checkpoints (which also hold the
    # initial mass, summed in patch order: another order than one patch's)
    # equal those of the same layout on 1 rank.
    $SAME "$out/one" "$out/np$ranks"
    if [ "$ranks" != 1 ]; then
        $SAME "$out/np1" "$out/np$ranks" --checkpoints
    fi
done
grep -q "ranks: 4 (MPI)" "$out/last.log" || { echo "no per-rank table in the summary"; cat "$out/last.log"; exit 1; }
# Without --threads, the 4 ranks share this machine's cores: each takes
# max(1, cores / 4) threads (for its graphs and the work between them).
share=$(( $(nproc) / 4 )); [ "$share" -ge 1 ] || share=1
grep -qE "threads: (up to )?$share([^0-9]|$)" "$out/last.log" \
    || { echo "expected $share thread(s) per rank by default"; cat "$out/last.log"; exit 1; }

echo "--> dumps and checkpoints per rank (--per-rank-files) on 2 and 4 ranks: every rank writes its patches, the same bits as one patch"
for ranks in 2 4; do
    run_quietly mpirun --oversubscribe -np "$ranks" "$W" run advection "${common[@]}" \
        --set patches=2,2,1 --checkpoint-every 10 --per-rank-files --output "$out/per-rank-np$ranks"
    $SAME "$out/one" "$out/per-rank-np$ranks"
    [ "$(ls "$out/per-rank-np$ranks" | grep -c '^advection_00000020\.rank.*\.h5$')" = "$ranks" ] || { echo "not one file per rank"; ls "$out/per-rank-np$ranks"; exit 1; }
    grep -q 'CollectionType="Spatial"' "$out/per-rank-np$ranks/advection.xmf" || { echo "the XDMF has no dataset of patches"; exit 1; }
done
[ -e "$out/per-rank-np4/checkpoint_00000010.rank00003.h5" ] || { echo "no checkpoint file of rank 3"; ls "$out/per-rank-np4"; exit 1; }
echo "--> the 4-rank run continued on 2 ranks from its step-10 checkpoint (each rank reads its patches from the 4 ranks' files): its later dumps per rank are rewritten by 2 ranks, the earlier kept"
run_quietly mpirun --oversubscribe -np 2 "$W" run advection --restart "$out/per-rank-np4/checkpoint_00000010.h5" \
    --steps 20 --dump-every 5 --per-rank-files --quiet --output "$out/per-rank-np4"
$SAME "$out/one" "$out/per-rank-np4"
ls "$out/per-rank-np4" | grep -q '^advection_00000005\.rank00003\.h5$' || { echo "the dump before the restart lost its rank files"; ls "$out/per-rank-np4"; exit 1; }
if ls "$out/per-rank-np4" | grep -Eq '^(advection|checkpoint)_000000(15|20)\.rank0000[23]\.h5$'; then
    echo "rank files of 4 ranks left beside the 2-rank dumps and checkpoints"; ls "$out/per-rank-np4"; exit 1
fi
# A flow not set on patches has none to write per rank.
expect_error "cannot write its dumps and checkpoints per rank" mpirun --oversubscribe -np 1 "$W" run lid-driven-cavity \
    --set cells=16 --steps 2 --per-rank-files --output "$out/bad-per-rank"

echo "--> patches=0,0,0 on 4 ranks: 4 patches laid out automatically, the same fields"
run_quietly mpirun --oversubscribe -np 4 "$W" run advection "${common[@]}" --set patches=0,0,0 --output "$out/auto"
grep -q "advection patch 3" "$out/last.log" || grep -q "ranks: 4 (MPI)" "$out/last.log" || { cat "$out/last.log"; exit 1; }
$SAME "$out/one" "$out/auto"

echo "--> one rank per GPU (two emulated GPUs): rank k takes GPU k, the same bits"
WATERSHED_EMULATE_GPUS=2 run_quietly mpirun --oversubscribe -np 2 "$W" run advection "${common[@]}" \
    --set patches=2,2,1 --device gpu --output "$out/gpus"
grep -q "rank 1 on GPU 1" "$out/last.log" || { echo "rank 1 did not take GPU 1"; cat "$out/last.log"; exit 1; }
$SAME "$out/one" "$out/gpus"

echo "--> wasatch-scalability (3 coupled ExprLib equations, SSP-RK3, periodic cube) on 2 x 1 x 2 patches"
wasatch=(--set pdes=3 --set cells=16 --set variant=coupled --set integrator=ssp-rk3 --set dt=2e-4 --steps 6 --dump-every 3 --quiet)
run_quietly "$W" run wasatch-scalability "${wasatch[@]}" --set patches=1,1,1 --output "$out/wasatch-one"
for ranks in 2 4; do
    run_quietly mpirun --oversubscribe -np "$ranks" "$W" run wasatch-scalability "${wasatch[@]}" \
        --set patches=2,1,2 --output "$out/wasatch-np$ranks"
    $SAME "$out/wasatch-one" "$out/wasatch-np$ranks"
done
# Each stage's exchange run when it ends (the default) or overlapped with
# the next stage's interior work (the summary says how much ran during
# them): the same bits.
grep -q "not overlapped" "$out/last.log" || { echo "the exchanges overlapped by default"; cat "$out/last.log"; exit 1; }
run_quietly mpirun --oversubscribe -np 2 "$W" run wasatch-scalability "${wasatch[@]}" \
    --set patches=2,1,2 --set overlap_exchange=true --output "$out/wasatch-overlapped"
grep -q "interior work during them" "$out/last.log" || { echo "no overlapped work in the per-rank table"; cat "$out/last.log"; exit 1; }
$SAME "$out/wasatch-one" "$out/wasatch-overlapped"

echo "--> exprlib-scalability (the hand-built graph, 3 coupled equations) on 2 x 1 x 2 patches on 2 and 4 ranks (and overlapped on 2): one patch's bits; per rank on 4 ranks continued on 2 from the step-3 checkpoint"
exprlib=(--set pdes=3 --set cells=16 --set variant=coupled --steps 6 --dump-every 3 --quiet)
run_quietly "$W" run exprlib-scalability "${exprlib[@]}" --set patches=1,1,1 --output "$out/exprlib-one"
for ranks in 2 4; do
    run_quietly mpirun --oversubscribe -np "$ranks" "$W" run exprlib-scalability "${exprlib[@]}" \
        --set patches=2,1,2 --output "$out/exprlib-np$ranks"
    $SAME "$out/exprlib-one" "$out/exprlib-np$ranks"
done
# Each step's exchange overlapped with its interior work, on 2 ranks.
run_quietly mpirun --oversubscribe -np 2 "$W" run exprlib-scalability "${exprlib[@]}" \
    --set patches=2,1,2 --set overlap_exchange=true --output "$out/exprlib-overlapped"
$SAME "$out/exprlib-one" "$out/exprlib-overlapped"
run_quietly mpirun --oversubscribe -np 4 "$W" run exprlib-scalability "${exprlib[@]}" \
    --set patches=2,1,2 --checkpoint-every 3 --per-rank-files --output "$out/exprlib-per-rank"
run_quietly mpirun --oversubscribe -np 2 "$W" run exprlib-scalability \
    --restart "$out/exprlib-per-rank/checkpoint_00000003.h5" --steps 6 --per-rank-files --quiet \
    --output "$out/exprlib-per-rank"
$SAME "$out/exprlib-one" "$out/exprlib-per-rank"

echo "--> heat (the 3D periodic heat equation, SSP-RK3) on 2 x 2 x 1 patches"
run_quietly "$W" run heat --set cells=16 --dump-every 1 --quiet --output "$out/heat-one"
run_quietly mpirun --oversubscribe -np 2 "$W" run heat --set cells=16 --set patches=2,2,1 --dump-every 1 \
    --quiet --output "$out/heat-np2"
$SAME "$out/heat-one" "$out/heat-np2"

echo "--> reacting-species carried by its computed flow, species and flow on 2 x 2 patches: one process's bits on 2 ranks, and per rank on 4 ranks continued on 2 from the step-3 checkpoint; by the prescribed flow, one patch's bits on 2 ranks"
reacting=(--set cells=16 --set flow=computed --steps 6 --dump-every 3 --quiet)
run_quietly "$W" run reacting-species "${reacting[@]}" --set patches=2,2,1 --output "$out/reacting-one"
run_quietly mpirun --oversubscribe -np 2 "$W" run reacting-species "${reacting[@]}" \
    --set patches=2,2,1 --output "$out/reacting-np2"
$SAME "$out/reacting-one" "$out/reacting-np2"
run_quietly mpirun --oversubscribe -np 4 "$W" run reacting-species "${reacting[@]}" \
    --set patches=2,2,1 --checkpoint-every 3 --per-rank-files --output "$out/reacting-per-rank"
run_quietly mpirun --oversubscribe -np 2 "$W" run reacting-species \
    --restart "$out/reacting-per-rank/checkpoint_00000003.h5" --steps 6 --per-rank-files --quiet \
    --output "$out/reacting-per-rank"
$SAME "$out/reacting-one" "$out/reacting-per-rank"
prescribed=(--set cells=16 --set flow=prescribed --steps 6 --dump-every 3 --quiet)
run_quietly "$W" run reacting-species "${prescribed[@]}" --output "$out/prescribed-one"
run_quietly mpirun --oversubscribe -np 2 "$W" run reacting-species "${prescribed[@]}" \
    --set patches=2,2,1 --output "$out/prescribed-np2"
$SAME "$out/prescribed-one" "$out/prescribed-np2"

# A flow stopped after a few steps fails its case's check (exit status 3:
# not steady, not at the end time): that status only is accepted here.
run_unchecked() {
    local status=0
    "$@" >"$out/last.log" 2>&1 || status=$?
    if [ "$status" != 0 ] && [ "$status" != 3 ]; then
        cat "$out/last.log"
        return 1
    fi
}
echo "--> the lid-driven cavity on 2 x 2 patches (momentum and Poisson solve) on 1, 2 and 4 ranks: the bits of one process; a checkpoint of 2 ranks restarts on 4"
cavity=(--set cells=32 --set integrator=ssp-rk3 --steps 12 --dump-every 4 --quiet)
run_unchecked "$W" run lid-driven-cavity "${cavity[@]}" --set patches=2,2,1 --output "$out/cavity-alone"
for ranks in 1 2 4; do
    run_unchecked mpirun --oversubscribe -np "$ranks" "$W" run lid-driven-cavity "${cavity[@]}" \
        --set patches=2,2,1 --checkpoint-every 6 --output "$out/cavity-np$ranks"
    $SAME "$out/cavity-alone" "$out/cavity-np$ranks"
done
grep -q "exchanges and reductions across patches" "$out/last.log" || { echo "no exchange time in the flow's summary"; cat "$out/last.log"; exit 1; }
grep -q "Poisson solve on patches: .* 5 levels, 2 on patches" "$out/last.log" || { echo "no Poisson solve on patches in the flow's summary"; cat "$out/last.log"; exit 1; }
echo "--> with the projection replicated (replicate_projection = true), the bits of one patch"
run_unchecked "$W" run lid-driven-cavity "${cavity[@]}" --output "$out/cavity-one"
run_unchecked mpirun --oversubscribe -np 2 "$W" run lid-driven-cavity "${cavity[@]}" \
    --set patches=2,2,1 --set replicate_projection=true --output "$out/cavity-replicated"
$SAME "$out/cavity-one" "$out/cavity-replicated"
# Placed on (emulated) GPUs, one per rank: the windows and the gathers go
# through the GPU-resident fields, the same bits.
WATERSHED_EMULATE_GPUS=2 run_unchecked mpirun --oversubscribe -np 2 "$W" run lid-driven-cavity "${cavity[@]}" \
    --set patches=2,2,1 --device gpu --output "$out/cavity-gpus"
grep -q "rank 1 on GPU 1" "$out/last.log" || { echo "rank 1 did not take GPU 1"; cat "$out/last.log"; exit 1; }
$SAME "$out/cavity-alone" "$out/cavity-gpus"
mkdir "$out/cavity-restart4"
cp "$out/cavity-np2/checkpoint_00000006.h5" "$out/cavity-restart4/"
run_unchecked mpirun --oversubscribe -np 4 "$W" run lid-driven-cavity \
    --restart "$out/cavity-restart4/checkpoint_00000006.h5" --steps 12 --quiet --output "$out/cavity-restart4"
$SAME "$out/cavity-alone" "$out/cavity-restart4" --from-step=7

echo "--> the cavity's dumps and checkpoints per rank on 2 ranks (each patch's pieces of u and v, p and the derived fields): the bits of one process; continued on 4 ranks from the 2 ranks' step-6 checkpoint"
run_unchecked mpirun --oversubscribe -np 2 "$W" run lid-driven-cavity "${cavity[@]}" \
    --set patches=2,2,1 --checkpoint-every 6 --per-rank-files --output "$out/cavity-per-rank"
$SAME "$out/cavity-alone" "$out/cavity-per-rank"
grep -q 'CollectionType="Spatial"' "$out/cavity-per-rank/lid-driven-cavity_xface.xmf" || { echo "the x-face XDMF has no dataset of patches"; exit 1; }
run_unchecked mpirun --oversubscribe -np 4 "$W" run lid-driven-cavity --restart "$out/cavity-per-rank/checkpoint_00000006.h5" \
    --steps 12 --per-rank-files --quiet --output "$out/cavity-per-rank"
[ "$(ls "$out/cavity-per-rank" | grep -c '^lid-driven-cavity_00000012\.rank.*\.h5$')" = 4 ] || { echo "the restarted dump is not one file per rank of 4"; ls "$out/cavity-per-rank"; exit 1; }
$SAME "$out/cavity-alone" "$out/cavity-per-rank"
# On (emulated) GPUs, one per rank: each patch's pieces cut from the
# GPU-resident fields, the same bits.
WATERSHED_EMULATE_GPUS=2 run_unchecked mpirun --oversubscribe -np 2 "$W" run lid-driven-cavity "${cavity[@]}" \
    --set patches=2,2,1 --device gpu --per-rank-files --output "$out/cavity-gpus-per-rank"
$SAME "$out/cavity-alone" "$out/cavity-gpus-per-rank"

echo "--> the 3D Taylor-Green vortex on 2 x 1 x 2 patches on 2 and 4 ranks: the bits of one process; traced (--trace), rank 0 writes every rank's tracks into one trace"
tgv=(--set cells=16 --set dimensions=3 --steps 6 --dump-every 3 --quiet)
run_unchecked "$W" run taylor-green "${tgv[@]}" --set patches=2,1,2 --output "$out/tgv-alone"
for ranks in 2 4; do
    run_unchecked mpirun --oversubscribe -np "$ranks" "$W" run taylor-green "${tgv[@]}" \
        --set patches=2,1,2 --output "$out/tgv-np$ranks" --trace "$out/tgv-np$ranks.json"
    $SAME "$out/tgv-alone" "$out/tgv-np$ranks"
    # Every rank's graphs, exchanges and solves, each track named with its
    # rank; every rank ran as many solves and state exchanges.
    "$WATERSHED_PYTHON" - "$out/tgv-np$ranks.json" "$ranks" <<'PY'
import json, sys
from collections import Counter
events = json.load(open(sys.argv[1]))["traceEvents"]
ranks = int(sys.argv[2])
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
spans = Counter((names[e["pid"]], e["name"]) for e in events if e.get("ph") == "X")
solves = [spans[(f"rank {r}: Poisson solve on patches", "div(u*), the solve and its exchanges")] for r in range(ranks)]
seams = [spans[(f"rank {r}: exchanges across patches", "seams of the velocity")] for r in range(ranks)]
momentum = [sum(n for (track, _), n in spans.items() if track.startswith(f"rank {r}: momentum patch")) for r in range(ranks)]
if min(solves) < 6 or len(set(solves)) != 1 or seams != solves or min(momentum) == 0:
    sys.exit(f"{sys.argv[1]}: solves {solves}, state exchanges {seams}, momentum nodes {momentum} per rank")
print(f"{ranks} ranks in one trace: {solves[0]} solves and state exchanges on each")
PY
done
run_unchecked mpirun --oversubscribe -np 4 "$W" run taylor-green "${tgv[@]}" \
    --set patches=2,1,2 --per-rank-files --output "$out/tgv-per-rank"
$SAME "$out/tgv-alone" "$out/tgv-per-rank"

echo "--> the channel with a convective outflow on 2 x 2 patches on 2 ranks: the bits of one process"
channel=(--set cells=8 --set length=2 --steps 6 --dump-every 3 --quiet)
run_unchecked "$W" run channel "${channel[@]}" --set patches=2,2,1 --output "$out/channel-alone"
run_unchecked mpirun --oversubscribe -np 2 "$W" run channel "${channel[@]}" \
    --set patches=2,2,1 --output "$out/channel-np2"
$SAME "$out/channel-alone" "$out/channel-np2"

echo "--> the DFG cylinder (an immersed body) on 2 x 2 patches (its faces closed in the solve on the patches) on 2 and 4 ranks: the bits of one process; replicated on 2 ranks, those of one patch"
cylinder=(--set cells=16 --steps 4 --dump-every 2 --quiet)
run_unchecked "$W" run cylinder "${cylinder[@]}" --set patches=2,2,1 --output "$out/cylinder-alone"
for ranks in 2 4; do
    run_unchecked mpirun --oversubscribe -np "$ranks" "$W" run cylinder "${cylinder[@]}" \
        --set patches=2,2,1 --output "$out/cylinder-np$ranks"
    $SAME "$out/cylinder-alone" "$out/cylinder-np$ranks"
    cmp "$out/cylinder-alone/cylinder_forces.csv" "$out/cylinder-np$ranks/cylinder_forces.csv"
done
echo "--> the cylinder per rank on 2 ranks, continued on 4 from its step-2 checkpoint: every force row, the bits of one process"
run_unchecked mpirun --oversubscribe -np 2 "$W" run cylinder "${cylinder[@]}" \
    --set patches=2,2,1 --checkpoint-every 2 --per-rank-files --output "$out/cylinder-per-rank"
run_unchecked mpirun --oversubscribe -np 4 "$W" run cylinder --restart "$out/cylinder-per-rank/checkpoint_00000002.h5" \
    --steps 4 --per-rank-files --quiet --output "$out/cylinder-per-rank"
$SAME "$out/cylinder-alone" "$out/cylinder-per-rank"
cmp "$out/cylinder-alone/cylinder_forces.csv" "$out/cylinder-per-rank/cylinder_forces.csv"
run_unchecked "$W" run cylinder "${cylinder[@]}" --output "$out/cylinder-one"
run_unchecked mpirun --oversubscribe -np 2 "$W" run cylinder "${cylinder[@]}" \
    --set patches=2,2,1 --set replicate_projection=true --output "$out/cylinder-replicated"
$SAME "$out/cylinder-one" "$out/cylinder-replicated"
cmp "$out/cylinder-one/cylinder_forces.csv" "$out/cylinder-replicated/cylinder_forces.csv"

echo "--> a checkpoint written on 2 ranks restarts on 4"
mkdir "$out/restart4"
cp "$out/np2/checkpoint_00000010.h5" "$out/restart4/"
run_quietly mpirun --oversubscribe -np 4 "$W" run advection --restart "$out/restart4/checkpoint_00000010.h5" \
    --steps 20 --quiet --output "$out/restart4"
$SAME "$out/one" "$out/restart4" --from-step=10

echo "--> errors on every rank end the job with the message"
expect_error "do not divide its 32 cells" mpirun --oversubscribe -np 2 "$W" run advection --set cells=32 --set patches=3,1,1 --steps 2 --output "$out/bad1"
expect_error "5 rank(s) for the 4 patches" mpirun --oversubscribe -np 5 "$W" run advection --set cells=32 --set patches=2,2,1 --steps 2 --output "$out/bad3"

rank_pid() { # output folder, rank: the pid of that rank of the run writing there
    local pid
    for pid in $(pgrep -f -- "$1" || true); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$pid"
        fi
    done
}

echo "--> SIGTERM to rank 1 alone stops both ranks after the same step with a checkpoint, which restarts bitwise"
mpirun --oversubscribe -np 2 "$W" run advection --set cells=32 --set patches=2,1,1 --steps 1000000 \
    --dump-every 500 --quiet --output "$out/signalled" >"$out/signalled.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
    [ -e "$out/signalled/advection_00000500.h5" ] && break
    sleep 0.1
done
victim="$(rank_pid "$out/signalled" 1)"
[ -n "$victim" ] || { echo "rank 1 of the run to signal was not found"; cat "$out/signalled.log"; exit 1; }
kill -TERM "$victim"
status=0
timeout 120 tail --pid="$launcher" -f /dev/null || status=$?
[ "$status" = 0 ] || { echo "the signalled job did not end within 120 s"; exit 1; }
wait "$launcher" && true
grep -q "interrupted by SIGTERM after step" "$out/signalled.log" || { cat "$out/signalled.log"; exit 1; }
checkpoint="$(ls "$out/signalled"/checkpoint_*.h5 | sort | tail -n 1)"
step="$(basename "$checkpoint" .h5)"; step=$((10#${step#checkpoint_}))
grep -q "interrupted by SIGTERM after step $step " "$out/signalled.log" || { echo "the checkpoint is not at the step both ranks stopped"; cat "$out/signalled.log"; exit 1; }
end=$((step + 7))
mkdir "$out/resumed"
cp "$checkpoint" "$out/resumed/"
run_quietly mpirun --oversubscribe -np 2 "$W" run advection --restart "$out/resumed/$(basename "$checkpoint")" \
    --steps "$end" --quiet --output "$out/resumed"
run_quietly "$W" run advection --set cells=32 --set patches=1,1,1 --steps "$end" --dump-every 500 --quiet --output "$out/straight"
$SAME "$out/straight" "$out/resumed" --from-step=$((step + 1))

echo "--> a rank killed mid-run ends the job; the last complete checkpoint restarts"
mpirun --oversubscribe -np 2 "$W" run advection --set cells=64 --set patches=2,1,1 --end-time 1000 \
    --checkpoint-every 5 --quiet --output "$out/killed" >"$out/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
    # Two checkpoints written (only the newest two are kept).
    [ "$(ls "$out/killed" 2>/dev/null | grep -c '^checkpoint_.*\.h5$')" -ge 2 ] && break
    sleep 0.1
done
victim="$(rank_pid "$out/killed" 1)"
[ -n "$victim" ] || { echo "rank 1 of the run to kill was not found"; cat "$out/killed.log"; exit 1; }
kill -9 "$victim"
status=0
timeout 120 tail --pid="$launcher" -f /dev/null || status=$?
[ "$status" = 0 ] || { echo "the job did not end within 120 s of rank 1's death"; exit 1; }
wait "$launcher" && { echo "the job with a killed rank exited 0"; exit 1; } || true
# Every rank is gone (mpirun ends the others; none is left waiting).
for _ in $(seq 600); do
    pgrep -f -- "$out/killed" >/dev/null || break
    sleep 0.1
done
if pgrep -f -- "$out/killed" >/dev/null; then
    echo "a rank of the killed job still runs 60 s after mpirun ended:"; ps -fp "$(pgrep -d, -f -- "$out/killed")"; exit 1
fi
newest="$(ls "$out/killed"/checkpoint_*.h5 | sort | tail -n 1)"
step="$(basename "$newest" .h5)"; step=$((10#${step#checkpoint_}))
run_quietly "$W" run advection --restart "$newest" --steps $((step + 3)) --quiet --output "$out/killed"
grep -q "now at step $((step + 3))" "$out/last.log" || { cat "$out/last.log"; exit 1; }
echo "MPI cases: bitwise on 1, 2, 4 ranks, restart 2 -> 4, a signal stops every rank together, errors and a killed rank end the job"
