#!/usr/bin/env bash
# Checks the README's "Use Watershed from your own crate": makes a fresh
# crate in a temporary folder from the section's Cargo.toml and src/main.rs
# blocks (the dependency's path pointed at this checkout), builds it from
# nothing, runs it, and checks the dumps it wrote with h5py. Prints the
# build's wall time.
#
#   scripts/own-crate.sh                              the README's light build (system HDF5)
#   scripts/own-crate.sh --features hdf5-static       another choice of features
#   scripts/own-crate.sh --release                    a release build
#
# The light build needs the system HDF5 (scripts/system-hdf5.sh installs
# Debian's libhdf5-dev as root).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
features=""
profile="debug"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --features) features="$2"; shift 2 ;;
        --release) profile="release"; shift ;;
        *) echo "own-crate.sh: unknown argument $1 (use --features LIST, --release)" >&2; exit 2 ;;
    esac
done
source "$root/scripts/tools.sh"

if [[ ",$features," != *",hdf5-static,"* ]]; then
    source "$root/scripts/system-hdf5.sh"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/crate/src" "$work/run"
"$WATERSHED_PYTHON" - "$root/README.md" "$work/crate" "$root" "$features" <<'PY'
import re, sys
readme, crate, root, features = sys.argv[1:5]
text = open(readme).read()
start = text.index("## Use Watershed from your own crate")
end = text.index("\n## ", start + 1)
section = text[start:end]
toml = re.search(r"```toml\n(.*?)```", section, re.S)
rust = re.search(r"```rust[^\n]*\n(.*?)```", section, re.S)
if not toml or not rust:
    sys.exit("own-crate.sh: the README's own-crate section lacks its toml or rust block")
manifest = toml.group(1)
dependency = 'watershed = { path = "../watershed", default-features = false }'
if dependency not in manifest:
    sys.exit("own-crate.sh: the README's Cargo.toml no longer has the line " + dependency)
extra = ", features = [%s]" % ", ".join('"%s"' % f for f in features.split(",") if f) if features else ""
manifest = manifest.replace(dependency, 'watershed = { path = "%s", default-features = false%s }' % (root, extra))
open(crate + "/Cargo.toml", "w").write(manifest)
open(crate + "/src/main.rs", "w").write(rust.group(1))
PY

flags=()
[ "$profile" = "release" ] && flags+=(--release)
echo "==> building the README's own crate from nothing (features: ${features:-none}, $profile)"
started=$(date +%s)
( cd "$work/crate" && CARGO_TARGET_DIR="$work/target" cargo build --quiet "${flags[@]}" )
built=$(( $(date +%s) - started ))
echo "==> built in ${built} s"

started=$EPOCHREALTIME
( cd "$work/run" && "$work/target/$profile/my-heat" ) | tee "$work/printed.txt"
ran=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
echo "==> ran in ${ran} s"
grep -q "11 dumps in heat-output/heat.xmf" "$work/printed.txt"
"$WATERSHED_PYTHON" - "$work/run/heat-output" <<'PY'
import h5py, numpy, sys, os
folder = sys.argv[1]
xmf = open(os.path.join(folder, "heat.xmf")).read()
for step in range(11):
    assert "heat_%08d.h5" % step in xmf, step
with h5py.File(os.path.join(folder, "heat_00000010.h5"), "r") as f:
    t = f["T"][...]
    assert t.shape == (1, 32, 32), t.shape
    assert abs(f.attrs["time"] - 1.0) < 1e-12, f.attrs["time"]
    x = (numpy.arange(32) + 0.5) / 32
    worst = numpy.abs(t[0] - (1 - x)[None, :]).max()
    assert worst < 1e-3, worst
print("==> h5py: 11 dumps in the XDMF; T at t = 1 is 1 - x within %.1e" % worst)
PY
echo "==> the README's own crate builds (${built} s, features: ${features:-none}, $profile), runs (${ran} s) and writes readable dumps"
