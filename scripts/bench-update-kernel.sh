#!/usr/bin/env bash
# Where TransportSolver's update kernel loses to the hand-built graph's
# (issue 51's ratio >= 0.9): the kernels Watershed generated for one
# ExprLib equation (the graph's, the solver's before and after weights
# became uniform values; snapshots in scripts/update-kernel/kernels.c) and
# hand-written variants, compiled with the engine's flags (-O3
# -march=native -std=c11) and timed by scripts/update-kernel/main.c.
# Usage: scripts/bench-update-kernel.sh [ROUNDS] (default 60).
set -euo pipefail
here="$(cd "$(dirname "$0")/update-kernel" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${CC:-cc}" -O3 -march=native -std=c11 -c "$here/kernels.c" -o "$work/kernels.o"
"${CC:-cc}" -O2 -std=c11 "$here/main.c" "$work/kernels.o" -o "$work/update-kernel" -lm
"$work/update-kernel" "${1:-60}"
