"""Checks what ParaView showed (paraview_sees.py's report) against the
HDF5 dumps themselves, read with h5py.

    python compare_with_hdf5.py REPORT.json

For every XDMF document in the report: the default reader returned one
image per time (vtkImageData or vtkUniformGrid, not a multi-block or
multi-piece dataset); its times are the `time` attributes of the case's
dumps, all of them, in order; at each time its cell arrays are exactly the
datasets of that dump at the document's location (CASE.xmf: the cell
centres; CASE_xface.xmf: the x faces, ...), with the same number of
components and the same values, bit for bit; the centre of its first cell
is the dataset's `origin` attribute along every resolved axis; a case with
one cell along an axis is an image of that dimension (a 2D case is 2D).
The rendered image of each main document must show the data: at least 32
distinct colours, and a tenth of the pixels not the background's (a 4:1
channel fills a fifth of a square view). Prints one line per document and "viewer check: ok N documents, M arrays" at the end;
exits non-zero with the reason at the first mismatch.
"""
import glob
import json
import os
import sys

import h5py
import numpy

LOCATION_OF_SUFFIX = {"_xface.xmf": "XFace", "_yface.xmf": "YFace", "_zface.xmf": "ZFace"}


def fail(message):
    print("viewer check FAILED: " + message)
    sys.exit(1)


def document_location(path):
    for suffix, location in LOCATION_OF_SUFFIX.items():
        if path.endswith(suffix):
            return path[: -len(suffix)], location
    return path[: -len(".xmf")], "CellCentre"


def dumps_of(stem):
    """(time, path) of every dump of the case, in step order."""
    directory, case = os.path.dirname(stem), os.path.basename(stem)
    found = []
    for path in glob.glob(os.path.join(directory, case + "_*.h5")):
        digits = path[len(os.path.join(directory, case + "_")): -len(".h5")]
        if digits.isdigit():
            with h5py.File(path, "r") as f:
                found.append((int(f.attrs["step"]), float(f.attrs["time"]), path))
    return [(time, path) for _, time, path in sorted(found)]


def check_document(path, entry):
    if "error" in entry:
        fail(f"{path}: {entry['error']}")
    stem, location = document_location(path)
    dumps = dumps_of(stem)
    if not dumps:
        fail(f"{path}: no dumps of the case beside it")
    times = entry["times"]
    expected_times = [t for t, _ in dumps]
    if len(times) != len(expected_times) or any(
        abs(a - b) > 1e-12 * max(1.0, abs(b)) for a, b in zip(times, expected_times)
    ):
        fail(f"{path}: ParaView's times {times} are not the dumps' {expected_times}")
    arrays = 0
    for (time, dump), seen in zip(dumps, entry["steps"]):
        where = f"{path} at t = {time} ({os.path.basename(dump)})"
        if seen["class"] not in ("vtkImageData", "vtkUniformGrid"):
            fail(f"{where}: the default reader returned a {seen['class']}, not one image")
        with h5py.File(dump, "r") as f:
            datasets = {
                name: f[name]
                for name in f
                if isinstance(f[name], h5py.Dataset) and f[name].attrs.get("location") == location
            }
            if set(datasets) != set(seen["arrays"]):
                fail(f"{where}: ParaView shows {sorted(seen['arrays'])}, the dump holds {sorted(datasets)} at {location}")
            for name, dataset in datasets.items():
                data = dataset[()]
                shape = data.shape
                components = shape[3] if data.ndim == 4 else 1
                array = seen["arrays"][name]
                if array["components"] != components:
                    fail(f"{where}: {name} has {array['components']} components in ParaView, {components} in the file")
                values = numpy.asarray(array["values"], dtype=numpy.float64)
                if values.size != data.size or not numpy.array_equal(values, data.ravel()):
                    fail(f"{where}: the values of {name} in ParaView differ from the dataset")
                # Resolved axes: ParaView's first cell centre is the dataset's origin.
                cells = [shape[2], shape[1], shape[0]]
                points = seen["dimensions"]
                for axis in range(3):
                    resolved = points[axis] > 1
                    if resolved != (cells[axis] > 1) and not (cells[axis] == 1 and not resolved):
                        fail(f"{where}: axis {axis} has {points[axis]} points for {cells[axis]} cells")
                    if resolved:
                        centre = seen["bounds"][2 * axis] + 0.5 * seen["spacing"][axis]
                        origin = float(dataset.attrs["origin"][axis])
                        if abs(centre - origin) > 1e-9 * max(1.0, abs(origin)):
                            fail(f"{where}: {name}'s first cell centre on axis {axis} is {centre} in ParaView, {origin} in the file")
                resolved_axes = sum(1 for c in cells if c > 1)
                if seen["data_dimension"] != resolved_axes:
                    fail(f"{where}: a {resolved_axes}D field shown as a {seen['data_dimension']}D image")
                arrays += 1
    image = entry.get("image")
    if location == "CellCentre":
        if image is None:
            fail(f"{path}: not rendered")
        check_image(path, image)
    return arrays


def check_image(path, image):
    if image["distinct_colours"] < 32:
        fail(f"{path}: the rendering {image['png']} coloured by {image['coloured_by']} has {image['distinct_colours']} distinct colours: it does not show the data")
    if image["data_pixel_share"] < 0.1:
        fail(f"{path}: the data covers {100 * image['data_pixel_share']:.0f}% of the rendering {image['png']}: it is not in view")


def main():
    with open(sys.argv[1]) as f:
        report = json.load(f)
    if not report:
        fail("the report lists no XDMF document")
    arrays = 0
    for path in sorted(report):
        n = check_document(path, report[path])
        shown = report[path].get("image")
        print(f"{path}: {len(report[path]['times'])} times, {n} arrays equal to the HDF5 datasets"
              + (f"; rendered coloured by {shown['coloured_by']}: {shown['distinct_colours']} colours" if shown else ""))
        arrays += n
    print(f"viewer check: ok {len(report)} documents, {arrays} arrays")


main()
