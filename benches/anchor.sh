#!/usr/bin/env bash
# The CPU anchor of issue 11: the ExprLib test (30 PDEs, 64^3, forward
# Euler, f64) through Devito (PyPI, OpenMP, gcc -O3 -march=native) and
# through Watershed (hand-built fused graph and TransportSolver, generated
# C), 1 and 2 threads. ANCHOR_ROUNDS rounds (default 3) each run every
# variant through Devito and Watershed in turn, so that the VM's drifts
# reach both; the table at the end gives each column's median over the
# rounds and the ratios of those medians. The interpreter runs once, after
# the rounds, for reference. Raw lines: target/anchor.log.
# Watershed solves the script's equations, Gamma = 0.1 everywhere
# (WATERSHED_GAMMA); ANCHOR_GAMMA=field runs the ExprLib case's Gamma field
# instead (a harder problem than Devito's: earlier tables until 2026-11-22).
# Variants: diffusion, independent, coupled (each equation's source writes
# sum_j exp(phi_j) out; Watershed's CSE computes it once) and coupled-shared
# (one source expression every equation reads); Devito's coupled script,
# which shares the sum by its own CSE, is the yardstick of both.
# Run: bash benches/anchor.sh  (installs Devito into .tools/devito on first use)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
venv=.tools/devito
if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import devito" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet devito
fi
cargo bench -p watershed-cases --bench solvers --no-run 2>/dev/null
bin=$(ls -t target/release/deps/solvers-* | grep -v '\.d$' | head -n 1)
variants=${WATERSHED_VARIANTS:-diffusion,independent,coupled,coupled-shared}
rounds=${ANCHOR_ROUNDS:-3}
gamma=${ANCHOR_GAMMA:-0.1}
log=target/anchor.log
: > "$log"
watershed() {
    WATERSHED_BACKEND=$1 WATERSHED_GAMMA=$gamma WATERSHED_SECTIONS=exprlib WATERSHED_CELLS=64 WATERSHED_STEPS=7 \
        WATERSHED_VARIANTS=$2 "$bin" --bench | grep -E "^\| $2" | sed "s/^/watershed $1 /"
}
for round in $(seq 1 "$rounds"); do
    echo "round $round of $rounds" >&2
    for variant in ${variants//,/ }; do
        for threads in 1 2; do
            DEVITO_LANGUAGE=openmp OMP_NUM_THREADS=$threads "$venv/bin/python" \
                benches/devito_exprlib.py "${variant%-shared}" 64 30 10 | sed "s/^devito ${variant%-shared} /devito $variant /" | tee -a "$log"
        done
        watershed c "$variant" | tee -a "$log"
    done
done
for variant in ${variants//,/ }; do
    watershed interpreter "$variant" | tee -a "$log"
done
python3 - "$log" "$rounds" "$gamma" <<'EOF'
import re, statistics, sys
from collections import defaultdict
log, rounds, gamma = sys.argv[1], sys.argv[2], sys.argv[3]
cols = defaultdict(list)  # (variant, threads, column) -> Mpts/s values
for line in open(log):
    m = re.match(r"devito ([\w-]+) n=\d+ pdes=\d+ threads=(\d+): .*, (\d+) Mpts/s", line)
    if m:
        cols[(m[1], int(m[2]), "devito")].append(float(m[3]))
        continue
    m = re.match(r"watershed (\w+) \| ([\w-]+) \| 64\^3 \| (\d+) \|", line)
    if m:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        # graph ms, stepping graph ms, solver ms, then the Mpts/s columns.
        graph, solver = float(cells[6]), float(cells[7])
        cols[(m[2], int(m[3]), f"graph {m[1]}")].append(graph)
        cols[(m[2], int(m[3]), f"solver {m[1]}")].append(solver)
med = {k: statistics.median(v) for k, v in cols.items()}
print(f"\nMedians of {rounds} rounds, million PDE-point updates per second (64^3, 30 PDEs, f64, Watershed's Gamma: {gamma})\n")
print("| variant | threads | Devito | graph (C) | solver (C) | graph / Devito | solver / Devito | solver (interpreter) | Devito spread | solver spread |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for variant in ["diffusion", "independent", "coupled", "coupled-shared"]:
    for threads in (1, 2):
        d = med.get((variant, threads, "devito"))
        g = med.get((variant, threads, "graph c"))
        s = med.get((variant, threads, "solver c"))
        if d is None or g is None or s is None:
            continue
        i = med.get((variant, threads, "solver interpreter"), float("nan"))
        spread = lambda k: "{:.0f}-{:.0f}".format(min(cols[k]), max(cols[k]))
        print(f"| {variant} | {threads} | {d:.0f} | {g:.0f} | {s:.0f} | {g / d:.2f} | {s / d:.2f} | {i:.0f} "
              f"| {spread((variant, threads, 'devito'))} | {spread((variant, threads, 'solver c'))} |")
EOF
