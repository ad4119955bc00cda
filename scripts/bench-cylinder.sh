#!/usr/bin/env bash
# The DFG cylinder benchmark (Schafer & Turek 1996) in Watershed and in
# OpenFOAM, one after the other on this machine: Watershed's `cylinder`
# case (an immersed body on a Cartesian grid) at three resolutions and
# OpenFOAM's pimpleFoam on a body-fitted O-grid at three
# (scripts/openfoam/dfg_cylinder.py), for 2D-1 and, with `2D-2` as the
# first argument, 2D-2. Prints the coefficients, the steps and the wall
# time of each run; record them, with the machine and date, in
# docs/benchmarks.md. OpenFOAM comes from apt (`openfoam`, installed here
# when missing and root); without it only Watershed runs.
#
#   scripts/bench-cylinder.sh [2D-1|2D-2] [WATERSHED_CELLS...]
#
# OPENFOAM_CELLS sets OpenFOAM's resolutions (cells per side of the square
# around the cylinder; default 16 32 64 for 2D-1, 16 32 for 2D-2, whose
# finest would take half an hour here).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
benchmark="${1:-2D-1}"
shift || true
cells=("${@:-32 64 128}")
read -r -a cells <<< "${cells[*]}"
end_time=8
if [ "$benchmark" = "2D-2" ]; then end_time=10; fi
cargo build --release -p watershed-cases --bin watershed
out=target/bench/cylinder
mkdir -p "$out"
for n in "${cells[@]}"; do
    echo "== Watershed $benchmark, $n cells across"
    start=$SECONDS
    ./target/release/watershed run cylinder --set "benchmark=$benchmark" --set "cells=$n" \
        --set "end_time=$end_time" --output "$out/watershed-$benchmark-$n" --overwrite --quiet \
        --threads 1 | grep -E "^(steps|check|==)" || true
    echo "wall $((SECONDS - start)) s (the whole command)"
done
if ! command -v pimpleFoam > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openfoam > "$out/apt.log" 2>&1 || true
fi
if command -v pimpleFoam > /dev/null; then
    default_cells="16 32 64"
    if [ "$benchmark" = "2D-2" ]; then default_cells="16 32"; fi
    for n in ${OPENFOAM_CELLS:-$default_cells}; do
        echo "== OpenFOAM $benchmark, $n cells per side of the square around the cylinder"
        python3 scripts/openfoam/dfg_cylinder.py --benchmark "$benchmark" --cells "$n" \
            --end-time "$end_time" --case "$out/openfoam-$benchmark-$n"
    done
else
    echo "OpenFOAM (pimpleFoam) is not installed: only Watershed ran"
fi
