import json, sys

def nb(cells, path):
    out = []
    for kind, src in cells:
        src = src.strip("\n")
        lines = src.split("\n")
        source = [l + "\n" for l in lines[:-1]] + [lines[-1]]
        c = {"cell_type": kind, "metadata": {}, "source": source}
        if kind == "code":
            c["execution_count"] = None
            c["outputs"] = []
        out.append(c)
    doc = {"cells": out, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
           "language_info": {"name": "python", "version": "3.11"}}, "nbformat": 4, "nbformat_minor": 5}
    for i, c in enumerate(doc["cells"]):
        c["id"] = f"cell-{i:02d}"
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
