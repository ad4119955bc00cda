#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what it needs
# (scripts/tools.sh), then unit, integration, property and doc tests of every
# crate. GPU tests run where a CUDA device exists and report "skipped" where
# not. Extra arguments go to `cargo test` (e.g. a test-name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh

# The HDF5 tests must check our files with h5py, not skip.
export WATERSHED_REQUIRE_H5PY=1
# Every generated CUDA kernel must compile to PTX with NVRTC, not skip.
export WATERSHED_REQUIRE_NVRTC=1

# The viewer test (ParaView opening every case's output) needs ParaView
# from apt; .ci/run asks for it with WATERSHED_VIEWER_TEST=1.
if [ "${WATERSHED_VIEWER_TEST:-}" = "1" ]; then
    source scripts/viewer-tools.sh
fi

# OpenMPI and libclang for the `mpi` feature. The workspace is built and
# tested once with it (every feature a test needs), so that the MPI checks
# below reuse that build instead of building the engine a second time.
source scripts/mpi-tools.sh
features=(--features watershed/mpi)

cargo test --workspace "${features[@]}" "$@"

echo "==> the light build (no default features: no cudarc, GPU requests are clear errors; the system HDF5)"
source scripts/system-hdf5.sh
cargo test -p watershed-fields --no-default-features --test without_cuda "$@"
# Clippy lints the light build here: the libraries and programs, and the
# one test written for it (the other tests, examples and benches have no
# code that depends on the features, and .ci/run lints every target of
# the default build with the `mpi` feature): between them every `cfg` of
# the code is linted.
cargo clippy --workspace --no-default-features --lib --bins -- -D warnings
cargo clippy -p watershed-fields --no-default-features --test without_cuda -- -D warnings

echo "==> MPI: the halo exchange, decomposed transport and the watershed program across 1, 2 and 4 ranks (the mpi feature; mpirun --oversubscribe)"
# The examples and the program, as the workspace's tests built them
# (nothing is compiled again; scripts/mpi/cases.sh asks for the same).
cargo build --workspace "${features[@]}" --examples --bins
for ranks in 1 2 4; do
    mpirun --oversubscribe -np "$ranks" target/debug/examples/mpi_halo
    mpirun --oversubscribe -np "$ranks" target/debug/examples/mpi_transport
    mpirun --oversubscribe -np "$ranks" target/debug/examples/mpi_flow
    mpirun --oversubscribe -np "$ranks" target/debug/examples/mpi_poisson
    mpirun --oversubscribe -np "$ranks" target/debug/examples/mpi_reductions
done
# The watershed program under mpirun: bitwise dumps and checkpoints,
# a restart on another rank count, errors and a killed rank.
bash scripts/mpi/cases.sh

echo "==> GPU tests (shown uncaptured so that skips are visible)"
cargo test --workspace "${features[@]}" --test gpu -- --nocapture 2>&1 | grep -E "skipped|test result" || true

if [ -z "${WATERSHED_EMULATE_GPUS:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
    # No GPU here: the GPU tests run again on emulated GPUs (the device
    # layer played on the host, kernels compiled for the CPU, streams
    # deferred so that a missing event gives a wrong result; see
    # fields/src/gpu/emulated.rs), so every GPU path runs and must give
    # the CPU's bits.
    echo "==> GPU tests on two emulated GPUs (WATERSHED_EMULATE_GPUS=2)"
    export WATERSHED_EMULATE_GPUS=2
    # One invocation over the workspace: the features are those of the
    # run above, so nothing is built again.
    cargo test --workspace "${features[@]}" --test gpu --test state_machine --test placement \
        --test execution --test bad_input --test whole_step_graphs \
        --test multigrid --test cli --test stream_progress "$@"
    unset WATERSHED_EMULATE_GPUS
fi
