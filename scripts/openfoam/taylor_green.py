#!/usr/bin/env python3
"""The 3D Taylor-Green vortex at Re = 1600 in OpenFOAM (pimpleFoam), the
peer a user would pick instead of Watershed's `taylor-green` case, serial
or decomposed over MPI ranks: the same periodic cube [0, 2 pi]^3, the same
initial velocity u = sin x cos y cos z, v = -cos x sin y cos z, w = 0 and
pressure p = (cos 2x + cos 2y)(cos 2z + 2)/16, nu = 1/1600, on N^3
uniform hexahedra with cyclic sides; second order in space (Gauss
linear) and time (backward), PISO (two pressure corrections), GAMG for
the pressure, the time step adjusted to a Courant number.

    taylor_green.py --cells 32 --end-time 20 --ranks 2 --case DIR

Writes DIR/taylor-green_energy.csv in the columns of Watershed's own
(time, kinetic_energy, dissipation_rate, enstrophy_dissipation: K, -dK/dt
by centred differences of K, 2 nu Omega from the vorticity) and
DIR/run.log with pimpleFoam's wall time ("... ms/step; ... cell
updates/s"), so that benches/tgv_compare.py reads both programs' runs.
With --ranks R > 1 the mesh is cut into R slabs along x (decomposePar,
method simple) and pimpleFoam runs under mpirun. Needs blockMesh,
postProcess, decomposePar and pimpleFoam on PATH (Debian: apt-get install
openfoam) and, for --ranks, mpirun.
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import time

from foam_files import SECOND_ORDER_SCHEMES, find_debian_openfoam, write

NU = 1.0 / 1600.0
LENGTH = 2.0 * math.pi


def setup(case, n, end_time, courant, ranks):
    """Writes the case's mesh description, settings and function objects
    (the initial fields come after the mesh, from its cell centres)."""
    if os.path.exists(case):
        shutil.rmtree(case)
    length = LENGTH
    write(f"{case}/system/blockMeshDict", "dictionary", "blockMeshDict", f"""
convertToMeters 1;
vertices
(
    (0 0 0) ({length} 0 0) ({length} {length} 0) (0 {length} 0)
    (0 0 {length}) ({length} 0 {length}) ({length} {length} {length}) (0 {length} {length})
);
blocks ( hex (0 1 2 3 4 5 6 7) ({n} {n} {n}) simpleGrading (1 1 1) );
edges ();
boundary
(
    xMinus {{ type cyclic; neighbourPatch xPlus; faces ((0 4 7 3)); }}
    xPlus {{ type cyclic; neighbourPatch xMinus; faces ((1 2 6 5)); }}
    yMinus {{ type cyclic; neighbourPatch yPlus; faces ((0 1 5 4)); }}
    yPlus {{ type cyclic; neighbourPatch yMinus; faces ((3 7 6 2)); }}
    zMinus {{ type cyclic; neighbourPatch zPlus; faces ((0 3 2 1)); }}
    zPlus {{ type cyclic; neighbourPatch zMinus; faces ((4 5 6 7)); }}
);
mergePatchPairs ();
""")
    h = length / n
    first_dt = courant * h / 2.0
    fields_lib = 'libs ("libfieldFunctionObjects.so");'
    write(f"{case}/system/controlDict", "dictionary", "controlDict", f"""
application pimpleFoam;
startFrom startTime;
startTime 0;
stopAt endTime;
endTime {end_time};
deltaT {first_dt};
adjustTimeStep yes;
maxCo {courant};
writeControl runTime;
writeInterval {end_time};
purgeWrite 0;
writeFormat ascii;
writePrecision 12;
timePrecision 12;
runTimeModifiable false;
functions
{{
    vorticity {{ type vorticity; {fields_lib} executeControl timeStep; writeControl writeTime; }}
    speedSquared {{ type magSqr; {fields_lib} field U; result speedSquared; executeControl timeStep; writeControl writeTime; }}
    vorticitySquared {{ type magSqr; {fields_lib} field vorticity; result vorticitySquared; executeControl timeStep; writeControl writeTime; }}
    averages
    {{
        type volFieldValue;
        {fields_lib}
        fields (speedSquared vorticitySquared);
        operation volAverage;
        regionType all;
        writeFields false;
        executeControl timeStep;
        writeControl timeStep;
        writeInterval 1;
        log false;
    }}
}}
""")
    write(f"{case}/system/fvSchemes", "dictionary", "fvSchemes", SECOND_ORDER_SCHEMES)
    write(f"{case}/system/fvSolution", "dictionary", "fvSolution", """
solvers
{
    p { solver GAMG; smoother DICGaussSeidel; tolerance 1e-8; relTol 0.01; }
    pFinal { $p; relTol 0; }
    "(U|UFinal)" { solver smoothSolver; smoother symGaussSeidel; tolerance 1e-10; relTol 0; }
}
PIMPLE
{
    momentumPredictor yes;
    nOuterCorrectors 1;
    nCorrectors 2;
    nNonOrthogonalCorrectors 0;
    pRefCell 0;
    pRefValue 0;
}
""")
    write(f"{case}/system/decomposeParDict", "dictionary", "decomposeParDict", f"""
numberOfSubdomains {ranks};
method simple;
simpleCoeffs {{ n ({ranks} 1 1); delta 0.001; }}
""")
    write(f"{case}/constant/transportProperties", "dictionary", "transportProperties", f"""
transportModel Newtonian;
nu [0 2 -1 0 0 0 0] {NU!r};
""")
    write(f"{case}/constant/turbulenceProperties", "dictionary", "turbulenceProperties", """
simulationType laminar;
""")


def read_vectors(path):
    """The internal field of an ASCII volVectorField file."""
    text = open(path).read()
    start = text.index("internalField")
    body = text[start:]
    count_at = body.index("List<vector>") + len("List<vector>")
    rest = body[count_at:].lstrip()
    count = int(rest.split(None, 1)[0])
    open_at = rest.index("(")
    values = []
    for line in rest[open_at + 1:].splitlines():
        line = line.strip()
        if not line:
            continue
        if line == ")":
            break
        x, y, z = line.strip("()").split()
        values.append((float(x), float(y), float(z)))
        if len(values) == count:
            break
    if len(values) != count:
        raise SystemExit(f"{path}: {len(values)} cell centres read, {count} announced")
    return values


def write_initial_fields(case):
    """0/U and 0/p at the cell centres postProcess wrote to constant/C
    (without a time directory it writes there)."""
    centres = read_vectors(f"{case}/constant/C")
    velocity = [(math.sin(x) * math.cos(y) * math.cos(z), -math.cos(x) * math.sin(y) * math.cos(z), 0.0)
                for x, y, z in centres]
    pressure = [(math.cos(2 * x) + math.cos(2 * y)) * (math.cos(2 * z) + 2.0) / 16.0 for x, y, z in centres]
    cyclic = "boundaryField { \".*\" { type cyclic; } }\n"
    rows = "\n".join(f"({u!r} {v!r} {w!r})" for u, v, w in velocity)
    write(f"{case}/0/U", "volVectorField", "U",
          f"dimensions [0 1 -1 0 0 0 0];\ninternalField nonuniform List<vector> {len(velocity)}\n(\n{rows}\n);\n{cyclic}")
    rows = "\n".join(repr(p) for p in pressure)
    write(f"{case}/0/p", "volScalarField", "p",
          f"dimensions [0 2 -2 0 0 0 0];\ninternalField nonuniform List<scalar> {len(pressure)}\n(\n{rows}\n);\n{cyclic}")
    for name in ["C", "Cx", "Cy", "Cz"]:
        os.remove(f"{case}/constant/{name}")


def run(command, case, log_name):
    with open(f"{case}/log.{log_name}", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = open(f"{case}/log.{log_name}").read()[-2000:]
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}); the end of {case}/log.{log_name}:\n{tail}")


def averages(case):
    """(t, <|u|^2>, <|omega|^2>) per time step, from the function object."""
    directory = f"{case}/postProcessing/averages/0"
    files = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    if not files:
        raise SystemExit(f"no function-object output under {directory}")
    rows = []
    for line in open(f"{directory}/{files[0]}"):
        if line.startswith("#") or not line.strip():
            continue
        t, speed_squared, vorticity_squared = map(float, line.split()[:3])
        rows.append((t, speed_squared, vorticity_squared))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=32, help="cells per side (N of N^3)")
    parser.add_argument("--end-time", type=float, default=20.0)
    parser.add_argument("--courant", type=float, default=0.3, help="maxCo of pimpleFoam")
    parser.add_argument("--ranks", type=int, default=1, help="MPI ranks (slabs along x)")
    parser.add_argument("--case", default="target/openfoam/taylor-green")
    args = parser.parse_args()
    if args.cells < 4 or args.ranks < 1 or args.cells % args.ranks != 0:
        raise SystemExit(f"--cells {args.cells} and --ranks {args.ranks}: give at least 4 cells and a rank count that divides them")
    find_debian_openfoam()
    tools = ["blockMesh", "postProcess", "pimpleFoam"] + (["decomposePar", "mpirun"] if args.ranks > 1 else [])
    for tool in tools:
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH: install OpenFOAM (apt-get install openfoam) and, for --ranks, OpenMPI")
    case = args.case
    setup(case, args.cells, args.end_time, args.courant, args.ranks)
    run(["blockMesh", "-case", case], case, "blockMesh")
    run(["postProcess", "-case", case, "-func", "writeCellCentres"], case, "writeCellCentres")
    write_initial_fields(case)
    solver = ["pimpleFoam", "-case", case]
    if args.ranks > 1:
        run(["decomposePar", "-case", case], case, "decomposePar")
        solver = ["mpirun", "--oversubscribe", "-np", str(args.ranks)] + solver + ["-parallel"]
    start = time.perf_counter()
    run(solver, case, "pimpleFoam")
    wall = time.perf_counter() - start
    rows = averages(case)
    steps = len(rows)
    cells = args.cells ** 3
    # K = <|u|^2> / 2 and 2 nu Omega = nu <|omega|^2>, the initial state
    # (t = 0) from the analytical field: K = 1/8, Omega = 3/8 (the
    # function objects run after each step).
    history = [(0.0, 0.125, 0.375 * 2.0 * NU)] + [(t, s / 2.0, NU * w) for t, s, w in rows]
    with open(f"{case}/taylor-green_energy.csv", "w") as out:
        out.write("time,kinetic_energy,dissipation_rate,enstrophy_dissipation\n")
        for i, (t, k, dissipation) in enumerate(history):
            a, b = max(0, i - 1), min(len(history) - 1, i + 1)
            rate = -(history[b][1] - history[a][1]) / (history[b][0] - history[a][0])
            out.write(f"{t!r},{k!r},{rate!r},{dissipation!r}\n")
    per_step = 1000.0 * wall / max(steps, 1)
    summary = (f"pimpleFoam on {args.ranks} rank(s): {steps} steps of {cells} cells to t = {args.end_time} in "
               f"{wall:.2f} s: {per_step:.3f} ms/step; {cells * steps / wall:.3e} cell updates/s\n")
    with open(f"{case}/run.log", "w") as log:
        log.write(summary)
    sys.stdout.write(summary)


if __name__ == "__main__":
    main()
