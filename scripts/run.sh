#!/usr/bin/env bash
# Builds the `watershed` program in release mode and runs it. Without
# arguments it lists the cases; `scripts/run.sh run CASE` runs one (once
# cases exist). Installs what the build needs (scripts/tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
if [ "$#" -eq 0 ]; then
    set -- list
fi
cargo run --release --quiet -p watershed-cases --bin watershed -- "$@"
