# Sourced by scripts/test.sh and scripts/own-crate.sh: makes sure the system
# HDF5 (library, headers, pkg-config file) is there for the builds without
# the `hdf5-static` feature (the light build of a user's crate, and the
# suite's `--no-default-features` checks). As root it installs Debian's
# libhdf5-dev with apt-get; otherwise it says what to install.
if ! pkg-config --exists hdf5 2>/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing the system HDF5 (libhdf5-dev, pkg-config) for the builds without hdf5-static" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libhdf5-dev pkg-config >/dev/null
    else
        echo "the builds without the hdf5-static feature link the system HDF5, which pkg-config cannot find: install libhdf5-dev and pkg-config (Debian, Ubuntu; needs root) or set HDF5_DIR" >&2
        return 1 2>/dev/null || exit 1
    fi
fi
