#!/usr/bin/env python3
"""The DFG cylinder benchmark (Schafer & Turek 1996, 2D-1 and 2D-2) in
OpenFOAM (pimpleFoam), the peer a user would pick instead of Watershed's
`cylinder` case: the same channel (0.41 x 2.2), cylinder (D = 0.1 at
(0.2, 0.2)), parabolic inflow, nu = 1e-3, on a body-fitted block mesh (an
O-grid of four blocks around the cylinder inside the square
[0.1, 0.3]^2, eight rectangular blocks around it).

    dfg_cylinder.py --benchmark 2D-1 --cells 32 --end-time 8 --case DIR

`--cells N` is the number of cells along each side of the square around
the cylinder (h = 0.2 / N there, graded finer towards the cylinder).
Prints one line per quantity (c_D, c_L of the last step; 2D-2: the largest
c_D and c_L over the whole periods after --statistics-from and St) and the
wall time of pimpleFoam. Needs blockMesh and pimpleFoam on PATH (Debian:
apt-get install openfoam).
"""

import argparse
import glob
import math
import os
import shutil
import subprocess
import sys
import time

from foam_files import SECOND_ORDER_SCHEMES, find_debian_openfoam, write


def block_mesh(n, dz):
    """The blockMeshDict text for `n` cells per side of the square."""
    h = 0.2 / n
    half = max(2, n // 2)
    across_top = max(2, round(0.11 / h))
    # Downstream: cells growing to 4x towards the outlet.
    downstream = max(4, round(1.9 / h / 2.5))
    radial = max(4, n // 2)
    xs, ys = [0.0, 0.1, 0.3, 2.2], [0.0, 0.1, 0.3, 0.41]
    counts_x, counts_y = [half, n, downstream], [half, n, across_top]
    grading_x = [1, 1, 4]
    r, c = 0.05, (0.2, 0.2)
    s = r / math.sqrt(2.0)
    cyl = [(c[0] - s, c[1] - s), (c[0] + s, c[1] - s), (c[0] + s, c[1] + s), (c[0] - s, c[1] + s)]
    points = [(x, y) for y in ys for x in xs] + cyl
    def p(i, j):
        return j * 4 + i
    def q(k):
        return 16 + k
    vertices = [f"({x} {y} 0)" for x, y in points] + [f"({x} {y} {dz})" for x, y in points]
    top = len(points)
    def hexa(a, b, cc, d):
        return f"({a} {b} {cc} {d} {a + top} {b + top} {cc + top} {d + top})"
    blocks = []
    for j in range(3):
        for i in range(3):
            if (i, j) == (1, 1):
                continue
            blocks.append(
                f"hex {hexa(p(i, j), p(i + 1, j), p(i + 1, j + 1), p(i, j + 1))} "
                f"({counts_x[i]} {counts_y[j]} 1) simpleGrading ({grading_x[i]} 1 1)"
            )
    # The O-grid: local y from the square inwards to the cylinder, graded
    # to 1/4 of the outer cell size at the cylinder.
    for a, b, cc, d in [
        (p(1, 1), p(2, 1), q(1), q(0)),
        (p(2, 1), p(2, 2), q(2), q(1)),
        (p(2, 2), p(1, 2), q(3), q(2)),
        (p(1, 2), p(1, 1), q(0), q(3)),
    ]:
        blocks.append(f"hex {hexa(a, b, cc, d)} ({n} {radial} 1) simpleGrading (1 0.25 1)")
    mids = [(c[0], c[1] - r), (c[0] + r, c[1]), (c[0], c[1] + r), (c[0] - r, c[1])]
    edges = []
    for k in range(4):
        a, b = q(k), q((k + 1) % 4)
        mx, my = mids[k]
        edges.append(f"arc {a} {b} ({mx} {my} 0)")
        edges.append(f"arc {a + top} {b + top} ({mx} {my} {dz})")
    def face(a, b):
        return f"({a} {b} {b + top} {a + top})"
    inlet = [face(p(0, j + 1), p(0, j)) for j in range(3)]
    outlet = [face(p(3, j), p(3, j + 1)) for j in range(3)]
    walls = [face(p(i, 0), p(i + 1, 0)) for i in range(3)] + [face(p(i + 1, 3), p(i, 3)) for i in range(3)]
    cylinder = [face(q((k + 1) % 4), q(k)) for k in range(4)]
    front_back = []
    for j in range(3):
        for i in range(3):
            if (i, j) == (1, 1):
                continue
            a, b, cc, d = p(i, j), p(i + 1, j), p(i + 1, j + 1), p(i, j + 1)
            front_back.append(f"({a} {d} {cc} {b})")
            front_back.append(f"({a + top} {b + top} {cc + top} {d + top})")
    for a, b, cc, d in [
        (p(1, 1), p(2, 1), q(1), q(0)),
        (p(2, 1), p(2, 2), q(2), q(1)),
        (p(2, 2), p(1, 2), q(3), q(2)),
        (p(1, 2), p(1, 1), q(0), q(3)),
    ]:
        front_back.append(f"({a} {d} {cc} {b})")
        front_back.append(f"({a + top} {b + top} {cc + top} {d + top})")
    def patch(name, kind, faces):
        return f"    {name}\n    {{\n        type {kind};\n        faces\n        (\n            " + "\n            ".join(faces) + "\n        );\n    }\n"
    return (
        "convertToMeters 1;\nvertices\n(\n    " + "\n    ".join(vertices) + "\n);\n"
        + "blocks\n(\n    " + "\n    ".join(blocks) + "\n);\n"
        + "edges\n(\n    " + "\n    ".join(edges) + "\n);\n"
        + "boundary\n(\n"
        + patch("inlet", "patch", inlet)
        + patch("outlet", "patch", outlet)
        + patch("walls", "wall", walls)
        + patch("cylinder", "wall", cylinder)
        + patch("frontAndBack", "empty", front_back)
        + ");\n"
    )


def setup(case, n, peak, end_time, dz):
    if os.path.exists(case):
        shutil.rmtree(case)
    H = 0.41
    table = " ".join(
        f"({y:.6f} ({4 * peak * y * (H - y) / H**2:.9f} 0 0))"
        for y in [H * k / 200 for k in range(201)]
    )
    write(f"{case}/system/blockMeshDict", "dictionary", "blockMeshDict", block_mesh(n, dz))
    write(f"{case}/0/U", "volVectorField", "U", f"""dimensions [0 1 -1 0 0 0 0];
internalField uniform (0 0 0);
boundaryField
{{
    inlet {{ type fixedProfile; profile table ({table}); direction (0 1 0); origin 0; }}
    outlet {{ type zeroGradient; }}
    walls {{ type noSlip; }}
    cylinder {{ type noSlip; }}
    frontAndBack {{ type empty; }}
}}
""")
    write(f"{case}/0/p", "volScalarField", "p", """dimensions [0 2 -2 0 0 0 0];
internalField uniform 0;
boundaryField
{
    inlet { type zeroGradient; }
    outlet { type fixedValue; value uniform 0; }
    walls { type zeroGradient; }
    cylinder { type zeroGradient; }
    frontAndBack { type empty; }
}
""")
    write(f"{case}/constant/transportProperties", "dictionary", "transportProperties",
          "transportModel Newtonian;\nnu 0.001;\n")
    write(f"{case}/constant/turbulenceProperties", "dictionary", "turbulenceProperties",
          "simulationType laminar;\n")
    mean = 2.0 / 3.0 * peak
    write(f"{case}/system/controlDict", "dictionary", "controlDict", f"""application pimpleFoam;
startFrom startTime;
startTime 0;
stopAt endTime;
endTime {end_time};
deltaT 1e-4;
adjustTimeStep yes;
maxCo 0.8;
writeControl runTime;
writeInterval {end_time};
writeFormat binary;
runTimeModifiable false;
functions
{{
    coefficients
    {{
        type forceCoeffs;
        libs ("libforces.so");
        writeControl timeStep;
        writeInterval 1;
        patches (cylinder);
        rho rhoInf;
        rhoInf 1;
        liftDir (0 1 0);
        dragDir (1 0 0);
        CofR (0.2 0.2 0);
        pitchAxis (0 0 1);
        magUInf {mean};
        lRef 0.1;
        Aref {0.1 * dz};
    }}
}}
""")
    write(f"{case}/system/fvSchemes", "dictionary", "fvSchemes", SECOND_ORDER_SCHEMES)
    write(f"{case}/system/fvSolution", "dictionary", "fvSolution", """solvers
{
    p { solver GAMG; smoother DIC; tolerance 1e-8; relTol 0.01; }
    pFinal { $p; relTol 0; }
    "(U|UFinal)" { solver smoothSolver; smoother symGaussSeidel; tolerance 1e-8; relTol 0; }
}
PIMPLE
{
    momentumPredictor yes;
    nOuterCorrectors 1;
    nCorrectors 2;
    nNonOrthogonalCorrectors 1;
}
""")


def coefficients(case):
    files = sorted(glob.glob(f"{case}/postProcessing/coefficients/*/*.dat"))
    if not files:
        raise SystemExit(f"no force coefficients under {case}/postProcessing/coefficients")
    header, rows = None, []
    for line in open(files[-1]):
        if line.startswith("#"):
            if "Cd" in line:
                header = line[1:].split()
            continue
        values = line.split()
        if values:
            rows.append([float(v) for v in values])
    if header is None:
        raise SystemExit(f"{files[-1]}: no header naming Cd")
    t, cd, cl = header.index("Time"), header.index("Cd"), header.index("Cl")
    return [(r[t], r[cd], r[cl]) for r in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", choices=["2D-1", "2D-2"], default="2D-1")
    parser.add_argument("--cells", type=int, default=32)
    parser.add_argument("--end-time", type=float, default=8.0)
    parser.add_argument("--statistics-from", type=float, default=6.0)
    parser.add_argument("--case", default="target/openfoam/dfg")
    args = parser.parse_args()
    find_debian_openfoam()
    for tool in ["blockMesh", "pimpleFoam"]:
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH: install OpenFOAM (apt-get install openfoam)")
    peak = 0.3 if args.benchmark == "2D-1" else 1.5
    setup(args.case, args.cells, peak, args.end_time, 0.01)
    with open(f"{args.case}/log.blockMesh", "w") as log:
        subprocess.run(["blockMesh", "-case", args.case], stdout=log, stderr=subprocess.STDOUT, check=True)
    cells = None
    for line in open(f"{args.case}/log.blockMesh"):
        if "nCells:" in line:
            cells = int(line.split("nCells:")[1].split()[0])
    start = time.perf_counter()
    with open(f"{args.case}/log.pimpleFoam", "w") as log:
        subprocess.run(["pimpleFoam", "-case", args.case], stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - start
    rows = coefficients(args.case)
    print(f"openfoam {args.benchmark} cells {cells} steps {len(rows)} wall {wall:.2f} s")
    if args.benchmark == "2D-1":
        t, cd, cl = rows[-1]
        print(f"c_D {cd:.5f}\nc_L {cl:.5f}\nt {t}")
    else:
        late = [r for r in rows if r[0] >= args.statistics_from]
        mean = sum(r[2] for r in late) / max(1, len(late))
        ups = [a[0] + (b[0] - a[0]) * (mean - a[2]) / (b[2] - a[2])
               for a, b in zip(late, late[1:]) if a[2] < mean <= b[2]]
        if len(ups) < 3:
            raise SystemExit("fewer than two whole periods of the lift: run longer")
        period = (ups[-1] - ups[0]) / (len(ups) - 1)
        inside = [r for r in late if ups[0] <= r[0] <= ups[-1]]
        print(f"c_D,max {max(r[1] for r in inside):.5f}\nc_L,max {max(r[2] for r in inside):.5f}")
        print(f"St {0.1 / (period * 2.0 / 3.0 * peak):.5f}")


if __name__ == "__main__":
    sys.exit(main())
