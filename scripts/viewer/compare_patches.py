"""Checks what ParaView showed of a dump series written per rank
(paraview_sees_patches.py's report) against the same run's whole-domain
dumps, read with h5py.

    python compare_patches.py REPORT.json PER_RANK.xmf=WHOLE_DIR ...

For every document (`CASE.xmf` for the cell-centred fields,
`CASE_xface.xmf` ... for a flow's staggered components): the default
reader returned one multi-block dataset per time; its times are the
`time` attributes of the whole run's dumps, all of them, in order; at each
time every block is a patch's piece of the document's location (its first
value on the whole field's points, as many as the patch group's datasets
of that location hold: a patch's cells, or at faces one more plane where
the patch ends on a wall) and the blocks together cover every point of the
whole field exactly once; each block's cell arrays are the whole dump's
datasets of that location over the block's points, bit for bit. The rendered image must show the
data (at least 32 distinct colours, a tenth of the pixels not the
background's). Prints one line per document and
"patches check: ok N documents, M blocks" at the end; exits non-zero with
the reason at the first mismatch.
"""
import glob
import json
import os
import sys

import h5py
import numpy


def fail(message):
    print("patches check FAILED: " + message)
    sys.exit(1)


def whole_dumps(directory, case):
    """(time, path) of the whole run's dumps, in step order."""
    paths = sorted(p for p in glob.glob(os.path.join(directory, case + "_*.h5"))
                   if ".rank" not in os.path.basename(p))
    dumps = []
    for path in paths:
        with h5py.File(path, "r") as f:
            dumps.append((float(f.attrs["time"]), path))
    return dumps


LOCATIONS = {"": "CellCentre", "_xface": "XFace", "_yface": "YFace", "_zface": "ZFace"}


def case_and_location(document):
    """The case and the location of a document's fields, from its name."""
    stem = os.path.basename(document)[: -len(".xmf")]
    for suffix, location in LOCATIONS.items():
        if suffix and stem.endswith(suffix):
            return stem[: -len(suffix)], location
    return stem, "CellCentre"


def location_of(dataset):
    value = dataset.attrs["location"]
    return value.decode() if isinstance(value, bytes) else str(value)


def main():
    with open(sys.argv[1]) as f:
        report = json.load(f)
    documents = blocks_checked = 0
    for pair in sys.argv[2:]:
        document, whole_dir = pair.split("=", 1)
        case, location = case_and_location(document)
        seen = report.get(document)
        if seen is None or "error" in seen:
            fail(f"{document}: ParaView did not open it ({seen})")
        dumps = whole_dumps(whole_dir, case)
        if seen["times"] != [t for t, _ in dumps]:
            fail(f"{document}: ParaView's times {seen['times']}, the whole run's {[t for t, _ in dumps]}")
        rank_files = glob.glob(os.path.join(os.path.dirname(document), case + "_*.rank*.h5"))
        for (time, path), step in zip(dumps, seen["steps"]):
            where = f"{document} at t = {time}"
            if step["class"] != "vtkMultiBlockDataSet":
                fail(f"{where}: ParaView returned a {step['class']}, not one multi-block dataset")
            # The points of each patch's piece of this location, as its
            # rank file's datasets hold them (x, y, z).
            patch_cells = []
            for rank_file in rank_files:
                with h5py.File(rank_file, "r") as f:
                    if float(f.attrs["time"]) != time:
                        continue
                    for group in f.values():
                        pieces = [d for d in group.values() if location_of(d) == location]
                        if not pieces:
                            fail(f"{rank_file}: {group.name} holds no {location} field")
                        patch_cells.append(tuple(reversed(pieces[0].shape[:3])))
            with h5py.File(path, "r") as whole:
                names = sorted(n for n in whole.keys() if location_of(whole[n]) == location)
                if not names:
                    fail(f"{path}: no {location} dataset in the whole dump")
                shape = whole[names[0]].shape[:3]  # (nz, ny, nx)
                spacing = numpy.asarray(whole[names[0]].attrs["spacing"], dtype=float)
                centre = numpy.asarray(whole[names[0]].attrs["origin"], dtype=float)
                covered = numpy.zeros(shape, dtype=int)
                if len(step["blocks"]) != len(patch_cells):
                    fail(f"{where}: {len(step['blocks'])} blocks, the rank files hold {len(patch_cells)} patches")
                for k, block in enumerate(step["blocks"]):
                    dims = block["dimensions"]
                    cells = [max(d - 1, 1) for d in dims]
                    start = []
                    for axis in range(3):
                        if shape[2 - axis] == 1:
                            start.append(0)
                            continue
                        first = block["bounds"][2 * axis] + 0.5 * block["spacing"][axis]
                        index = (first - centre[axis]) / spacing[axis]
                        if abs(index - round(index)) > 1e-6:
                            fail(f"{where}: block {k}'s first cell centre {first} on axis {axis} is not on the grid's cells")
                        start.append(int(round(index)))
                    if tuple(cells) not in patch_cells:
                        fail(f"{where}: block {k} has {cells} cells, no patch of the rank files does")
                    window = tuple(slice(start[a], start[a] + cells[a]) for a in (2, 1, 0))
                    covered[window] += 1
                    if sorted(block["arrays"]) != names:
                        fail(f"{where}: block {k} has arrays {sorted(block['arrays'])}, the whole dump {names}")
                    for name in names:
                        expected = numpy.asarray(whole[name][window]).ravel()
                        values = numpy.asarray(block["arrays"][name]["values"])
                        if values.shape != expected.shape or not numpy.array_equal(values, expected):
                            fail(f"{where}: block {k} (cells {cells} from {start}) shows other values of {name} than the whole dump")
                    blocks_checked += 1
                if not numpy.all(covered == 1):
                    fail(f"{where}: the blocks cover {int(numpy.sum(covered > 0))} of {covered.size} cells, {int(numpy.sum(covered > 1))} more than once")
        image = seen.get("image", {})
        if image.get("distinct_colours", 0) < 32 or image.get("data_pixel_share", 0.0) < 0.1:
            fail(f"{document}: the rendering shows no data ({image})")
        documents += 1
        print(f"{document}: {len(seen['times'])} times, {len(seen['steps'][-1]['blocks'])} patches, "
              f"opened as {seen.get('representation_on_open')}, rendered coloured by "
              f"{image.get('coloured_by')} ({image.get('distinct_colours')} colours)")
    print(f"patches check: ok {documents} documents, {blocks_checked} blocks")


main()
