"""What the OpenFOAM peer scripts (dfg_cylinder.py, taylor_green.py) share:
writing a case file under OpenFOAM's header, the second-order schemes both
cases run with, and the location of Debian's OpenFOAM."""

import os

HEADER = """FoamFile
{{
    version 2.0;
    format ascii;
    class {cls};
    object {obj};
}}
"""

# Second order in space (central, Gauss linear) and time (backward).
SECOND_ORDER_SCHEMES = """ddtSchemes { default backward; }
gradSchemes { default Gauss linear; }
divSchemes
{
    default none;
    div(phi,U) Gauss linear;
    div((nuEff*dev2(T(grad(U))))) Gauss linear;
}
laplacianSchemes { default Gauss linear corrected; }
interpolationSchemes { default linear; }
snGradSchemes { default corrected; }
"""


def write(path, cls, obj, body):
    """Writes `body` to `path` under a FoamFile header of class `cls` and
    object `obj`, creating the folders it needs."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(HEADER.format(cls=cls, obj=obj))
        f.write(body)


def find_debian_openfoam():
    """Debian's packages find their etc/ through WM_PROJECT_DIR."""
    if "WM_PROJECT_DIR" not in os.environ and os.path.isdir("/usr/share/openfoam/etc"):
        os.environ["WM_PROJECT_DIR"] = "/usr/share/openfoam"
