#!/usr/bin/env bash
# The CPU anchor of issue 11, in one run: the ExprLib test (30 PDEs, 64^3,
# forward Euler, f64) through Devito (PyPI, OpenMP, gcc -O3 -march=native)
# and through Watershed (hand-built fused graph and TransportSolver, C
# kernels and the interpreter), 1 and 2 threads, interleaved.
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
variants=${WATERSHED_VARIANTS:-diffusion,independent,coupled}
for variant in ${variants//,/ }; do
    for threads in 1 2; do
        DEVITO_LANGUAGE=openmp OMP_NUM_THREADS=$threads "$venv/bin/python" benches/devito_exprlib.py "$variant" 64 30 10
    done
    for backend in c interpreter; do
        echo "watershed backend=$backend"
        WATERSHED_BACKEND=$backend WATERSHED_SECTIONS=exprlib WATERSHED_CELLS=64 WATERSHED_STEPS=7 \
            WATERSHED_VARIANTS=$variant "$bin" --bench | grep -E "^\| $variant"
    done
done
