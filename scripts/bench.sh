#!/usr/bin/env bash
# Runs every benchmark in release mode and prints its figures. Record them,
# with the machine and date, in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
cargo bench --workspace "$@"
