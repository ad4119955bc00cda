# Sourced by scripts/test.sh when WATERSHED_VIEWER_TEST=1 (.ci/run sets
# it): makes sure ParaView's Python client and a virtual X server are here
# for the viewer test (cases/tests/viewer.rs), which opens every case's
# output with ParaView's default reader and renders it.
#
#   pvpython   Debian's ParaView 5.11 (apt: paraview, python3-paraview)
#   xvfb-run   a virtual X server for rendering (apt: xvfb, xauth)
#
# They come from apt, so this needs root; about 2 minutes and 500 MB the
# first time. Where apt or root is missing the viewer test is skipped with
# a message saying so (WATERSHED_VIEWER_TEST=skip), never silently.

_viewer_ready() {
    command -v pvpython >/dev/null 2>&1 && command -v xvfb-run >/dev/null 2>&1
}

if ! _viewer_ready; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing ParaView and xvfb with apt for the viewer test (first run only)" >&2
        _viewer_start=$SECONDS
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            paraview python3-paraview xvfb xauth >/dev/null
        echo "==> ParaView installed in $((SECONDS - _viewer_start)) s" >&2
    else
        echo "==> viewer test skipped: ParaView (pvpython) and xvfb-run are missing, and installing them needs apt-get as root; install paraview, python3-paraview, xvfb and xauth to run it" >&2
        export WATERSHED_VIEWER_TEST=skip
    fi
fi
if [ "${WATERSHED_VIEWER_TEST:-}" = "1" ] && ! _viewer_ready; then
    echo "==> the ParaView installation did not provide pvpython and xvfb-run" >&2
    return 1 2>/dev/null || exit 1
fi
