"""Checks that two runs' outputs hold the same bits: every dump (and,
with --checkpoints, every checkpoint) of the first folder exists in the
second with the same datasets, every value equal bit for bit.

    same-dumps.py REFERENCE OTHER [--checkpoints] [--from-step N]

Exits 1 naming the file, dataset and first differing index otherwise.
"""

import sys
from pathlib import Path

import h5py
import numpy as np


def datasets(path):
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: found.__setitem__(name, np.array(obj))
            if isinstance(obj, h5py.Dataset)
            else None
        )
    return found


def step_of(path):
    return int(path.stem.rsplit("_", 1)[1])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    reference, other = Path(args[0]), Path(args[1])
    from_step = 0
    for a in sys.argv[1:]:
        if a.startswith("--from-step="):
            from_step = int(a.split("=", 1)[1])
    patterns = ["*_[0-9]*.h5"]
    files = sorted(
        p
        for pattern in patterns
        for p in reference.glob(pattern)
        if (("--checkpoints" in sys.argv) or not p.name.startswith("checkpoint_"))
        and step_of(p) >= from_step
    )
    if not files:
        sys.exit(f"{reference} holds no dump from step {from_step} on")
    compared = 0
    for path in files:
        twin = other / path.name
        if not twin.exists():
            sys.exit(f"{twin} is missing ({path} exists)")
        a, b = datasets(path), datasets(twin)
        if sorted(a) != sorted(b):
            sys.exit(f"{path.name}: datasets {sorted(a)} vs {sorted(b)}")
        for name in a:
            x, y = a[name], b[name]
            if x.dtype != y.dtype or x.shape != y.shape:
                sys.exit(f"{path.name}/{name}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}")
            if x.dtype.kind == "f":
                same = x.view(np.uint8).tobytes() == y.view(np.uint8).tobytes()
            else:
                same = np.array_equal(x, y)
            if not same:
                where = np.argwhere(x != y)
                first = tuple(where[0]) if len(where) else "(NaN payload)"
                sys.exit(f"{path.name}/{name} differs first at {first}: {x[first] if len(where) else ''} vs {y[first] if len(where) else ''}")
            compared += x.size
    print(f"{len(files)} file(s), {compared} values: the same bits in {other} as in {reference}")


main()
