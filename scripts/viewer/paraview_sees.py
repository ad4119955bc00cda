"""What ParaView shows of Watershed's output, written down for a check.

Run by pvpython (Debian's ParaView, under xvfb-run):

    pvpython scripts/viewer/paraview_sees.py REPORT.json PNG_DIR CASE.xmf...

Each XDMF document is opened exactly as a user's File > Open does
(`OpenDataFile`, which picks ParaView's default reader for `.xmf`). For
every time the reader offers, the dataset it returns is recorded: its VTK
class, point dimensions, bounds, spacing and every cell array's values.
The main document of each case (CASE.xmf, the cell-centred fields) is also
rendered at its last time, coloured by `speed` where the case has it (else
by its array with the widest range), as a slice through the middle for a
3D case, into PNG_DIR/CASE.png; the number of distinct colours in that
image is recorded. scripts/viewer/compare_with_hdf5.py checks the report
against the HDF5 files with h5py.
"""
import json
import os
import sys

from paraview import servermanager
from paraview.simple import (ColorBy, CreateView, GetDisplayProperties, OpenDataFile,
                             Render, SaveScreenshot, Show, Slice)
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkIOImage import vtkPNGReader
import numpy


def times_of(reader):
    values = reader.TimestepValues
    if values is None:
        return []
    if hasattr(values, "__len__"):
        return [float(t) for t in values]
    return [float(values)]


def dataset_at(reader, time):
    reader.UpdatePipeline(time)
    return servermanager.Fetch(reader)


def describe(data):
    arrays = {}
    cells = data.GetCellData() if hasattr(data, "GetCellData") else None
    for index in range(cells.GetNumberOfArrays() if cells else 0):
        array = cells.GetArray(index)
        arrays[cells.GetArrayName(index)] = {
            "components": array.GetNumberOfComponents(),
            "values": [float(v) for v in vtk_to_numpy(array).ravel()],
        }
    return {
        "class": data.GetClassName(),
        "dimensions": list(data.GetDimensions()) if hasattr(data, "GetDimensions") else None,
        "data_dimension": data.GetDataDimension() if hasattr(data, "GetDataDimension") else None,
        "bounds": list(data.GetBounds()) if hasattr(data, "GetBounds") else None,
        "spacing": list(data.GetSpacing()) if hasattr(data, "GetSpacing") else None,
        "arrays": arrays,
    }


def render(reader, time, described, png, representation=None):
    arrays = described["arrays"]
    if "speed" in arrays:
        name = "speed"
    else:
        def width(item):
            values = numpy.asarray(item[1]["values"])
            return float(values.max() - values.min()) if values.size else 0.0
        name = max(arrays.items(), key=width)[0]
    view = CreateView("RenderView")
    view.ViewSize = [320, 320]
    view.ViewTime = time
    view.OrientationAxesVisibility = 0
    source = reader
    if described["data_dimension"] == 3:
        bounds = described["bounds"]
        source = Slice(Input=reader)
        source.SliceType = "Plane"
        source.SliceType.Origin = [0.5 * (bounds[0] + bounds[1]), 0.5 * (bounds[2] + bounds[3]),
                                   0.5 * (bounds[4] + bounds[5])]
        source.SliceType.Normal = [0.0, 0.0, 1.0]
    display = Show(source, view)
    if representation is not None:
        display.Representation = representation
    ColorBy(display, ("CELLS", name))
    display.RescaleTransferFunctionToDataRange(True, False)
    view.CameraPosition = [0.0, 0.0, 1.0]
    view.CameraFocalPoint = [0.0, 0.0, 0.0]
    view.CameraViewUp = [0.0, 1.0, 0.0]
    view.ResetCamera()
    Render(view)
    SaveScreenshot(png, view, ImageResolution=[320, 320])
    image = vtkPNGReader()
    image.SetFileName(png)
    image.Update()
    pixels = vtk_to_numpy(image.GetOutput().GetPointData().GetScalars())
    pixels = pixels.reshape(len(pixels), -1)
    colours = len(numpy.unique(pixels, axis=0))
    # The background is the colour of a corner pixel.
    background = pixels[0]
    share = float(numpy.mean(numpy.any(pixels != background, axis=1)))
    return {"png": png, "coloured_by": name, "distinct_colours": colours,
            "data_pixel_share": share}


def main():
    report_path, png_dir = sys.argv[1], sys.argv[2]
    report = {}
    for path in sys.argv[3:]:
        reader = OpenDataFile(path)
        if reader is None:
            report[path] = {"error": "ParaView has no reader for it"}
            continue
        entry = {"reader": reader.GetXMLName(), "times": times_of(reader), "steps": []}
        for time in entry["times"]:
            entry["steps"].append(describe(dataset_at(reader, time)))
        name = os.path.basename(path)
        faces = ("_xface.xmf", "_yface.xmf", "_zface.xmf")
        if not name.endswith(faces) and entry["steps"]:
            # The main document (cell centres): render it.
            case = name[: -len(".xmf")]
            entry["image"] = render(reader, entry["times"][-1], entry["steps"][-1],
                                    os.path.join(png_dir, case + ".png"))
        report[path] = entry
    with open(report_path, "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()
