"""The ExprLib test of the thesis (section 5.2) in Devito, the CPU anchor of
docs/benchmarks.md: N PDEs on an n^3 grid, forward Euler, 7-point Laplacian
with Gamma = 0.1, float64, in one Devito Operator (Devito fuses the
equations into one loop nest and shares common subexpressions).

Variants: diffusion; independent sources (+ exp(phi_i)); coupled sources
(+ sum_j exp(phi_j)). Prints million PDE-point updates per second (median
of repeats), for the thread count in OMP_NUM_THREADS.

Run (the benchmark script does this): DEVITO_LANGUAGE=openmp
OMP_NUM_THREADS=1 python benches/devito_exprlib.py diffusion 64 30 20
"""
import os
import sys
import time

import numpy as np
from devito import Eq, Grid, Operator, TimeFunction, configuration
from sympy import exp

variant = sys.argv[1] if len(sys.argv) > 1 else "diffusion"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 64
pdes = int(sys.argv[3]) if len(sys.argv) > 3 else 30
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20

configuration["log-level"] = "ERROR"
grid = Grid(shape=(n, n, n), extent=(1.0, 1.0, 1.0), dtype=np.float64)
phis = [TimeFunction(name=f"phi{i}", grid=grid, space_order=2, dtype=np.float64) for i in range(pdes)]
x, y, z = [np.linspace(0, 1, n) for _ in range(3)]
X, Y, Z = np.meshgrid(x, y, z, indexing="ij")
for i, phi in enumerate(phis):
    phi.data[0] = 0.1 * np.sin(2 * np.pi * (X + 0.1 * i)) * np.cos(2 * np.pi * Y) + 0.05 * Z
dt = 1e-6
gamma = 0.1
if variant == "coupled":
    source = sum(exp(p) for p in phis)
equations = []
for phi in phis:
    rhs = gamma * phi.laplace
    if variant == "independent":
        rhs = rhs + exp(phi)
    elif variant == "coupled":
        rhs = rhs + source
    equations.append(Eq(phi.forward, phi + dt * rhs))
op = Operator(equations)
op.apply(time_M=1, dt=dt)  # compile and warm up
times = []
for _ in range(3):
    start = time.perf_counter()
    op.apply(time_M=steps, dt=dt)
    times.append((time.perf_counter() - start) / (steps + 1))
per_step = sorted(times)[1]
print(f"devito {variant} n={n} pdes={pdes} threads={os.environ.get('OMP_NUM_THREADS', '?')}: "
      f"{per_step * 1e3:.2f} ms/step, {pdes * n**3 / per_step / 1e6:.0f} Mpts/s")
