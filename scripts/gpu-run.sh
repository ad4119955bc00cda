#!/usr/bin/env bash
# On a machine with a CUDA GPU and no Rust toolchain, from the checkout,
# after scripts/gpu-pack.sh made .devpack/pack.tar.xz elsewhere: runs the
# GPU tests (uncaptured, so their differences and skips show), the cases
# with --device gpu, the GPU benchmark (unless GPU_RUN_BENCH=0), then the
# rest of the suite. Logs go to $OUT (or ./gpu-run): env.txt, tests.log,
# cli.log, bench.log and summary.txt (a line per binary or run with its
# exit status, time and test counts). Exits 0; read summary.txt.
set -u
checkout="$PWD"
out="${OUT:-$checkout/gpu-run}"
mkdir -p "$out"
start=$(date +%s)
unpacked="$(mktemp -d)"
tar xJf .devpack/pack.tar.xz -C "$unpacked"
built_at="$(cat "$unpacked/built-at")"
if [ ! -e "$built_at" ]; then
    mkdir -p "$(dirname "$built_at")" && ln -s "$checkout" "$built_at"
fi
mkdir -p "$built_at/target/release"
cp "$unpacked/watershed" "$built_at/target/release/watershed"
nvrtc="$(find /usr/local /opt /usr/lib -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)"
[ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    lscpu | grep -E 'Model name|^CPU\(s\)'
    cc --version | head -n 1
    echo "nvrtc: ${nvrtc:-not found}"
} > "$out/env.txt" 2>&1
: > "$out/summary.txt"
: > "$out/tests.log"
run_binary() { # name, seconds, extra arguments
    local name=$1 limit=$2 began=$(date +%s) status
    shift 2
    echo "=== $name" >> "$out/tests.log"
    timeout "$limit" "$unpacked/bin/$name" --test-threads=8 "$@" >> "$out/tests.log" 2>&1
    status=$?
    echo "$name rc=$status $(($(date +%s) - began))s $(grep -a '^test result' "$out/tests.log" | tail -n 1)" >> "$out/summary.txt"
}
gpu_tests="fields__test__gpu fields__test__stream_progress fields__test__state_machine cases__test__gpu solvers__test__whole_step_graphs solvers__test__multigrid operators__test__bad_input exprgraph__test__placement operators__test__gpu_launch_on_host cases__test__cli"
for name in $gpu_tests; do
    run_binary "$name" 300 --nocapture
done
for case in heat advection exprlib-scalability wasatch-scalability taylor-green reacting-species lid-driven-cavity; do
    began=$(date +%s)
    echo "=== watershed run $case --device gpu" >> "$out/cli.log"
    timeout 300 "$built_at/target/release/watershed" run "$case" --device gpu --quiet \
        --output "$unpacked/output-$case" >> "$out/cli.log" 2>&1
    echo "watershed run $case --device gpu rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
done
# The cases whose steps can be replayed as CUDA graphs, replayed (their
# checks, replay counts and ms/step go to cli.log; compare the ms/step
# with the plain runs above).
for case in exprlib-scalability heat advection reacting-species wasatch-scalability; do
    began=$(date +%s)
    echo "=== watershed run $case --device gpu --cuda-graphs" >> "$out/cli.log"
    timeout 300 "$built_at/target/release/watershed" run "$case" --device gpu --cuda-graphs \
        --quiet --output "$unpacked/output-$case-graphs" >> "$out/cli.log" 2>&1
    echo "watershed run $case --device gpu --cuda-graphs rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
done
# Stream-ordered allocation of the memory a step needs only while it
# runs (the advection case checks every node's values, so it allocates
# check words each stage): compare its ms/step with the plain run above.
for case in advection reacting-species; do
    began=$(date +%s)
    echo "=== watershed run $case --device gpu --gpu-scratch stream-ordered" >> "$out/cli.log"
    timeout 300 "$built_at/target/release/watershed" run "$case" --device gpu \
        --gpu-scratch stream-ordered --quiet --output "$unpacked/output-$case-ordered" >> "$out/cli.log" 2>&1
    echo "watershed run $case --device gpu --gpu-scratch stream-ordered rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
done
# Every stream wait and event record made, even those that order
# nothing (the baseline of the elision): compare the ms/step and the
# "GPU calls" line with the plain runs above.
for case in exprlib-scalability taylor-green; do
    began=$(date +%s)
    echo "=== WATERSHED_GPU_KEEP_ALL_CALLS=1 watershed run $case --device gpu" >> "$out/cli.log"
    WATERSHED_GPU_KEEP_ALL_CALLS=1 timeout 300 "$built_at/target/release/watershed" run "$case" \
        --device gpu --quiet --output "$unpacked/output-$case-all-calls" >> "$out/cli.log" 2>&1
    echo "WATERSHED_GPU_KEEP_ALL_CALLS=1 watershed run $case --device gpu rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
done
# Decomposed runs on one GPU (forty-second session): each field's seams
# are copied on the GPU and handed between a patch's graphs there, so
# the "GPU calls" line should show next to nothing copied between
# devices; compare the ms/step of 2 patches with one patch's.
for run in "exprlib-scalability --set cells=64 --set patches=1,1,1" \
    "exprlib-scalability --set cells=64 --set patches=2,1,1" \
    "exprlib-scalability --set cells=64 --set patches=2,2,1" \
    "taylor-green --set dimensions=3 --set cells=64 --set patches=1,1,1 --steps 20" \
    "taylor-green --set dimensions=3 --set cells=64 --set patches=2,1,1 --steps 20"; do
    began=$(date +%s)
    echo "=== watershed run $run --device gpu" >> "$out/cli.log"
    # shellcheck disable=SC2086
    timeout 300 "$built_at/target/release/watershed" run $run --device gpu --quiet \
        --output "$unpacked/output-decomposed" --overwrite >> "$out/cli.log" 2>&1
    echo "watershed run $run --device gpu rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
done
# A decomposed flow's Poisson solve on the GPU against the CPU's
# (forty-third session): the multigrid on patches now runs on the GPU of
# a flow placed there, with 11-13 times the launches and 5-8 times the
# host waits; where does the GPU start to win? Compare the ms/step and
# the "Poisson solve on patches" line of each pair.
for cells in 32 128; do
    for device in gpu cpu; do
        run="taylor-green --set dimensions=3 --set cells=$cells --set patches=2,1,1 --steps 10"
        began=$(date +%s)
        echo "=== watershed run $run --device $device" >> "$out/cli.log"
        # shellcheck disable=SC2086
        timeout 300 "$built_at/target/release/watershed" run $run --device "$device" --quiet \
            --output "$unpacked/output-poisson-on-patches" --overwrite >> "$out/cli.log" 2>&1
        echo "watershed run $run --device $device rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
    done
done
# A GPU timeline: the ExprLib case traced, its kernels and copies on a
# track per stream (open trace-exprlib.json in Perfetto).
began=$(date +%s)
echo "=== watershed run exprlib-scalability --device gpu --trace" >> "$out/cli.log"
timeout 300 "$built_at/target/release/watershed" run exprlib-scalability --device gpu --steps 20 \
    --quiet --trace "$out/trace-exprlib.json" --output "$unpacked/output-exprlib-trace" >> "$out/cli.log" 2>&1
echo "watershed run exprlib-scalability --device gpu --trace rc=$? $(($(date +%s) - began))s" >> "$out/summary.txt"
if [ "${GPU_RUN_BENCH:-1}" != 0 ]; then
    timeout 600 "$unpacked/gpubench" > "$out/bench.log" 2>&1
    echo "gpu bench rc=$? at $(($(date +%s) - start))s" >> "$out/summary.txt"
fi
for binary in "$unpacked"/bin/*; do
    name="$(basename "$binary")"
    case " $gpu_tests " in *" $name "*) continue ;; esac
    run_binary "$name" 300
done
echo "done at $(($(date +%s) - start))s" >> "$out/summary.txt"
rm -rf "$unpacked"
