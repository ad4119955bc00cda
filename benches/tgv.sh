#!/usr/bin/env bash
# The Taylor-Green vortex at Re = 1600 against the 512^3 DNS (issue 46):
# orders 2 and 4 on 32^3 and 64^3 (TGV_SIZES, default "32 64"), SSP-RK3,
# CFL 0.3, skew-symmetric convection, to t = 20, on TGV_THREADS threads
# (default 1), then one table (benches/tgv_compare.py): peak -dK/dt and its
# time, the L2 error of the -dK/dt curve, the numerical share of the
# dissipation, ms/step, cell updates/s. Outputs under target/tgv/.
# Run: bash benches/tgv.sh   (64^3 takes about 4 + 8 minutes on one core;
# TGV_SIZES=128 about 50 minutes for second order alone)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
cargo build --release --quiet -p watershed-cases --bin watershed
out=target/tgv
mkdir -p "$out"
dirs=()
for n in ${TGV_SIZES:-32 64}; do
    for order in 2 4; do
        dir="$out/o${order}_${n}"
        target/release/watershed run taylor-green --overwrite --quiet \
            --set dimensions=3 --set cells="$n" --set re=1600 --set end_time=20 \
            --set space_order="$order" --threads "${TGV_THREADS:-1}" \
            --output "$dir" > "$out/o${order}_${n}.log" 2>&1 || true
        cp "$out/o${order}_${n}.log" "$dir/run.log"
        dirs+=("$dir")
    done
done
python3 benches/tgv_compare.py cases/data/tgv-re1600/spectral_Re1600_512.gdiag "${dirs[@]}"
