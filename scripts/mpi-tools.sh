# Sourced by scripts/test.sh: makes sure OpenMPI (library, headers, mpirun)
# and libclang (for the `mpi` crate's bindings) are there for the `mpi`
# feature's build and its multi-rank checks. As root it installs Debian's
# libopenmpi-dev, openmpi-bin and libclang-dev with apt-get, and lets
# mpirun run as root (OpenMPI refuses to otherwise); without root it says
# what to install.
# mpicc and mpirun alone are not enough: ParaView's packages bring them
# (openmpi-bin) without the headers, so the check compiles an #include.
_mpi_ready() {
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 \
        && echo '#include <mpi.h>' | mpicc -E -x c - >/dev/null 2>&1 \
        && ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1
}
if ! _mpi_ready; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing OpenMPI and libclang (libopenmpi-dev, openmpi-bin, libclang-dev) for the mpi feature" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin libclang-dev >/dev/null
    else
        echo "the mpi feature needs OpenMPI and libclang: install libopenmpi-dev, openmpi-bin and libclang-dev (Debian, Ubuntu; needs root)" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
if [ "$(id -u)" = "0" ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
