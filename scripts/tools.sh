# Sourced by the other scripts: makes sure the tools the build and the tests
# need are present, without root, and exports where they are.
#
#   CMake >= 3.26  the bundled static HDF5 build needs it (Debian 12 has 3.25)
#   h5py           the tests check our HDF5 files with an independent reader
#   libnvrtc       NVIDIA's run-time CUDA compiler (PyPI nvidia-cuda-nvrtc):
#                  the tests compile every generated CUDA kernel to PTX; it
#                  needs neither a GPU nor a driver
#
# Both come from PyPI into .tools/venv (a virtual environment in the
# checkout, ignored by git), created on first use and reused afterwards.

_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_tools="$_root/.tools"
_venv="$_tools/venv"

_version_at_least() { # $1 >= $2 ?
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

# The directory holding libnvrtc.so.13 inside the virtual environment.
_nvrtc_dir() {
    local found
    found="$(find "$_venv/lib" -name 'libnvrtc.so.13' -path '*nvidia*' 2>/dev/null | head -n 1)"
    [ -n "$found" ] && dirname "$found"
}

_ensure_python_env() {
    if [ -x "$_venv/bin/python" ] && "$_venv/bin/python" -c "import cmake, h5py" 2>/dev/null \
        && [ -n "$(_nvrtc_dir)" ]; then
        return 0
    fi
    echo "==> installing CMake >= 3.26, h5py and NVRTC into $_venv (first run only)" >&2
    mkdir -p "$_tools"
    if ! python3 -m venv "$_venv" 2>/dev/null; then
        echo "==> python3 -m venv is unavailable; using virtualenv from PyPI" >&2
        python3 -m pip install --quiet --user virtualenv
        python3 -m virtualenv --quiet "$_venv"
    fi
    "$_venv/bin/python" -m pip install --quiet --disable-pip-version-check "cmake>=3.26" h5py \
        "nvidia-cuda-nvrtc>=13,<14"
}

_ensure_python_env

# Prefer a system CMake that is new enough; otherwise the real binary from
# the PyPI package (not its Python wrapper script).
if command -v cmake >/dev/null 2>&1 && _version_at_least "$(cmake --version | head -n 1 | awk '{print $3}')" 3.26; then
    CMAKE="$(command -v cmake)"
else
    CMAKE="$("$_venv/bin/python" -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))')"
fi
export CMAKE
export PATH="$(dirname "$CMAKE"):$PATH"
export WATERSHED_PYTHON="$_venv/bin/python"
# cudarc loads libnvrtc through the dynamic loader's search path.
_nvrtc="$(_nvrtc_dir)"
if [ -n "$_nvrtc" ]; then
    export LD_LIBRARY_PATH="$_nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
