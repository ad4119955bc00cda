"""Checks that two runs' outputs hold the same bits: every dump (and,
with --checkpoints, every checkpoint) of the first folder exists in the
second with the same datasets, every value equal bit for bit. A dump the
second run wrote per rank (CASE_<step>.rank<r>.h5, --per-rank-files) is
put together from its ranks' patch groups (each at its `offset`, every
point exactly once: a face field's pieces hold one more plane where their
patch ends on a wall) and compared with the first's whole dump.

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


def assembled(paths, reference):
    """The whole-domain datasets of a dump per rank, from its rank files;
    `reference` gives the names and shapes."""
    whole = {name: np.zeros_like(values) for name, values in reference.items()}
    covered = {name: np.zeros(values.shape[:3], dtype=int) for name, values in reference.items()}
    ranks = None
    for path in paths:
        with h5py.File(path, "r") as f:
            if ranks is None:
                ranks = int(f.attrs["ranks"])
            elif int(f.attrs["ranks"]) != ranks:
                sys.exit(f"{path.name} says {int(f.attrs['ranks'])} ranks wrote the dump, another file {ranks}")
            for group in f.values():
                x0, y0, z0 = (int(v) for v in group.attrs["offset"])
                for name in group:
                    if name not in whole:
                        sys.exit(f"{path.name}/{group.name}/{name} is not a dataset of the whole dump")
                    # The piece's own points: the patch's cells, or of a
                    # face field one more plane where it ends on a wall.
                    nz, ny, nx = group[name].shape[:3]
                    window = (slice(z0, z0 + nz), slice(y0, y0 + ny), slice(x0, x0 + nx))
                    if whole[name][window].shape != group[name].shape:
                        sys.exit(f"{path.name}/{group.name}/{name} of shape {group[name].shape} from {(z0, y0, x0)} reaches beyond the whole dump's {whole[name].shape}")
                    whole[name][window] = np.array(group[name])
                    covered[name][window] += 1
    if ranks != len(paths):
        sys.exit(f"{paths[0].parent}: {len(paths)} rank file(s) of {paths[0].name}'s dump, it says {ranks} ranks")
    for name, count in covered.items():
        if not np.all(count == 1):
            sys.exit(f"{paths[0].name}: the patches cover {int(np.sum(count > 0))} of {count.size} cells of {name}, {int(np.sum(count > 1))} more than once")
    return whole


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
    found = [p for pattern in patterns for p in reference.glob(pattern)]
    if any(".rank" in p.name for p in found):
        sys.exit(
            f"{reference} holds dumps per rank (*.rank*.h5); the reference must be a run's whole dumps: give it as the first folder, the run per rank as the second"
        )
    files = sorted(
        p
        for p in found
        if (("--checkpoints" in sys.argv) or not p.name.startswith("checkpoint_"))
        and step_of(p) >= from_step
    )
    if not files:
        sys.exit(f"{reference} holds no dump from step {from_step} on")
    compared = 0
    per_rank_dumps = []
    for path in files:
        twin = other / path.name
        a = datasets(path)
        ranks = sorted(other.glob(f"{path.stem}.rank*.h5"))
        if twin.exists() and ranks:
            sys.exit(f"{other} holds {twin.name} and its dump per rank too")
        if twin.exists():
            b = datasets(twin)
        elif ranks:
            b = assembled(ranks, a)
            per_rank_dumps.append(path.name)
        else:
            sys.exit(f"{twin} is missing ({path} exists), and no file of it per rank")
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
    per_rank = f" ({len(per_rank_dumps)} dump(s) put together from their ranks' files)" if per_rank_dumps else ""
    print(f"{len(files)} file(s), {compared} values: the same bits in {other} as in {reference}{per_rank}")


main()
