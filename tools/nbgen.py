"""Write a notebook from a compact Python description (used by course authors, not by readers).

A source file holds cells separated by lines ``# %% [markdown]`` or ``# %%`` (optionally
``# %% tags=hide-input,...``), the same convention as Jupytext's percent format.
Usage: python tools/nbgen.py SOURCE.py NOTEBOOK.ipynb
"""

import re
import sys

import nbformat


def build(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    parts = re.split(r"^# %%(.*)$", source, flags=re.M)
    for header, body in zip(parts[1::2], parts[2::2]):
        body = body.strip("\n")
        header = header.strip()
        if header.startswith("[markdown]"):
            text = "\n".join(
                line[2:] if line.startswith("# ") else line.lstrip("#")
                for line in body.splitlines()
            )
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            cell = nbformat.v4.new_code_cell(body)
            m = re.search(r"tags=([\w,-]+)", header)
            if m:
                cell.metadata["tags"] = m.group(1).split(",")
            nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    nbformat.write(build(open(src, encoding="utf-8").read()), dst)
    print(f"wrote {dst}")
