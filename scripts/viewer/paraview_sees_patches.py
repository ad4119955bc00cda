"""What ParaView shows of a dump series written per rank, for a check.

Run by pvpython (Debian's ParaView, under xvfb-run):

    pvpython scripts/viewer/paraview_sees_patches.py REPORT.json PNG_DIR CASE.xmf...

Each XDMF document (its dumps are spatial collections of patches, each
patch's values in its rank's file) is opened as a user's File > Open does
(`OpenDataFile`, ParaView's default reader). For every time the reader
offers, the dataset it returns is recorded: its VTK class and, for each of
its blocks, the block's class, point dimensions, bounds, spacing and every
cell array's values. The last time is rendered coloured by the first
array (a slice through the middle in 3D), as paraview_sees.py renders a
whole dump, into PNG_DIR/CASE-patches.png, with the Surface
representation (the representation ParaView picked on opening is recorded
too: Outline for a dataset of patches). compare_patches.py checks the
report against the whole-domain dumps of the same run.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paraview import servermanager  # noqa: E402
from paraview.simple import CreateView, Delete, OpenDataFile, Show  # noqa: E402
from paraview_sees import describe, render, times_of  # noqa: E402


def blocks_of(data):
    """Every leaf dataset of a composite dataset, in the reader's order."""
    if not data.IsA("vtkCompositeDataSet"):
        return [data]
    leaves = []
    iterator = data.NewIterator()
    iterator.InitTraversal()
    while not iterator.IsDoneWithTraversal():
        leaves.append(iterator.GetCurrentDataObject())
        iterator.GoToNextItem()
    return leaves


def default_representation(reader):
    """The representation ParaView gives the reader's output when shown."""
    view = CreateView("RenderView")
    representation = Show(reader, view).Representation
    Delete(view)
    return str(representation).strip("'\"")


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
            reader.UpdatePipeline(time)
            data = servermanager.Fetch(reader)
            entry["steps"].append({
                "class": data.GetClassName(),
                "blocks": [describe(block) for block in blocks_of(data)],
            })
        if entry["steps"]:
            blocks = entry["steps"][-1]["blocks"]
            first = sorted(blocks[0]["arrays"])[0]
            bounds = [f(b["bounds"][k] for b in blocks)
                      for k in range(6) for f in [(min, max)[k % 2]]]
            # The array to colour by, over every block (render() picks by
            # the values' range).
            values = [v for b in blocks for v in b["arrays"][first]["values"]]
            described = {"arrays": {first: {"values": values}},
                         "data_dimension": blocks[0]["data_dimension"],
                         "bounds": bounds}
            case = os.path.basename(path)[: -len(".xmf")]
            # A dataset of patches opens as their outlines (ParaView's
            # default for composite image data, 2D too); the user picks
            # Surface, as here.
            entry["representation_on_open"] = default_representation(reader)
            entry["image"] = render(reader, entry["times"][-1], described,
                                    os.path.join(png_dir, case + "-patches.png"), "Surface")
        report[path] = entry
    with open(report_path, "w") as out:
        json.dump(report, out)


main()
