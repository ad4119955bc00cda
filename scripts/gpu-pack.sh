#!/usr/bin/env bash
# Packs what a GPU machine without a Rust toolchain needs to run the GPU
# checks: every test binary (release), the `watershed` program and the GPU
# benchmark, stripped, into .devpack/pack.tar.xz (ignored by git; about
# 50 MB). Run scripts/gpu-run.sh from the checkout on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
root="$PWD"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin" .devpack
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        package = m["package_id"].split("#")[0].rsplit("/", 1)[-1]
        print(package + "__" + m["target"]["kind"][0] + "__" + m["target"]["name"], m["executable"])
' | while read -r name executable; do cp "$executable" "$staging/bin/$name"; done
cargo build --release --quiet -p watershed-cases --bin watershed
cp target/release/watershed "$staging/watershed"
bench="$(cargo bench -p watershed-cases --bench gpu --no-run 2>&1 | sed -n 's/.*Executable benches\/gpu.rs (\(.*\))/\1/p')"
cp "$bench" "$staging/gpubench"
strip "$staging"/bin/* "$staging/watershed" "$staging/gpubench"
# The tests find the program and their data through the paths they were
# built at: gpu-run.sh links this one to the checkout there.
echo "$root" > "$staging/built-at"
tar cJf .devpack/pack.tar.xz -C "$staging" .
echo "==> .devpack/pack.tar.xz: $(du -h .devpack/pack.tar.xz | cut -f1), $(ls "$staging/bin" | wc -l) test binaries"
