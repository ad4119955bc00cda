#!/usr/bin/env bash
# Builds the `watershed` program in release mode and runs it. Without
# arguments it runs the lid-driven cavity end to end (Re = 100, 64 x 64, to
# steady state) into output/lid-driven-cavity, replacing an earlier run of
# it: HDF5 dumps, the XDMF series for ParaView, PNG plots, a summary.
# With arguments they go to the program (`scripts/run.sh list`,
# `scripts/run.sh run heat --convergence`, ...). Installs what the build
# needs (scripts/tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
if [ "$#" -eq 0 ]; then
    set -- run lid-driven-cavity --overwrite --dump-interval 1
fi
cargo run --release --quiet -p watershed-cases --bin watershed -- "$@"
