#!/usr/bin/env bash
# The Taylor-Green vortex at Re = 1600, Watershed against OpenFOAM on the
# same machine in the same run, serial and decomposed over 2 MPI ranks:
# Watershed's `taylor-green` (second order, SSP-RK3, CFL 0.3) on one patch,
# on 2 x 1 x 1 patches in one process and on them under mpirun, OpenFOAM's pimpleFoam
# (scripts/openfoam/taylor_green.py: second order, backward, PISO,
# maxCo 0.3) serial and on 2 slabs along x; N^3 cells (TGV_CELLS, default
# 32) to t = TGV_END (default 20), one thread per rank. Then one table
# (benches/tgv_compare.py) against the 512^3 DNS: peak -dK/dt and its
# time, the L2 error of the -dK/dt curve, ms/step and cell updates/s.
# Outputs under target/tgv-openfoam/.
# Run: bash benches/tgv_openfoam.sh   (installs apt's `openfoam` when missing;
# 32^3 takes about 4 minutes in all, TGV_CELLS=64 about 40)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
source scripts/mpi-tools.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
n="${TGV_CELLS:-32}"
end="${TGV_END:-20}"
out=target/tgv-openfoam
mkdir -p "$out"
# OpenFOAM from apt when missing (as root), as scripts/bench-cylinder.sh.
if ! command -v pimpleFoam > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openfoam > "$out/apt.log" 2>&1 || true
fi
if ! command -v pimpleFoam > /dev/null; then
    echo "pimpleFoam is not on PATH: install OpenFOAM (apt-get install openfoam)" >&2
    exit 1
fi
cargo build --release --quiet -p watershed-cases --features mpi --bin watershed
W=target/release/watershed
watershed_run() { # name ranks patches
    local dir="$out/$1"
    local args=(run taylor-green --overwrite --quiet --set dimensions=3 --set "cells=$n"
        --set re=1600 --set "end_time=$end" --set space_order=2 --set "patches=$3"
        --threads 1 --output "$dir")
    if [ "$2" = 1 ]; then
        "$W" "${args[@]}" > "$out/$1.log" 2>&1
    else
        mpirun --oversubscribe -np "$2" "$W" "${args[@]}" > "$out/$1.log" 2>&1
    fi
    cp "$out/$1.log" "$dir/run.log"
}
echo "== Watershed, ${n}^3, one process"
watershed_run "watershed_${n}_1rank" 1 1,1,1
echo "== Watershed, ${n}^3, one process on 2 x 1 x 1 patches (the layout's own cost)"
watershed_run "watershed_${n}_1rank_2patches" 1 2,1,1
echo "== Watershed, ${n}^3, 2 ranks (2 x 1 x 1 patches)"
watershed_run "watershed_${n}_2ranks" 2 2,1,1
echo "== OpenFOAM pimpleFoam, ${n}^3, serial"
python3 scripts/openfoam/taylor_green.py --cells "$n" --end-time "$end" --ranks 1 \
    --case "$out/openfoam_${n}_1rank"
echo "== OpenFOAM pimpleFoam, ${n}^3, 2 ranks (2 slabs along x)"
python3 scripts/openfoam/taylor_green.py --cells "$n" --end-time "$end" --ranks 2 \
    --case "$out/openfoam_${n}_2ranks"
python3 benches/tgv_compare.py cases/data/tgv-re1600/spectral_Re1600_512.gdiag \
    "$out/watershed_${n}_1rank" "$out/watershed_${n}_1rank_2patches" "$out/watershed_${n}_2ranks" \
    "$out/openfoam_${n}_1rank" "$out/openfoam_${n}_2ranks"
