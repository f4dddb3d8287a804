"""Chapter 10's ladder on your own classifier: ``make ladder MODEL=name-or-module:function``.

Executes ``notebooks/10_capstone.ipynb`` with ``COURSE_MODEL`` set (a torchvision classifier's
name, or ``package.module:function`` for your own builder, called with ``num_classes=``), keeps the
executed notebook in ``results/local/ladder/<model>.ipynb`` (open it to read every table) and prints
the page's decision guide for that model on this machine. The model's name is checked first, so a
typo fails at once with the list of what would work.

    .venv/bin/python tools/ladder.py mobilenet_v3_small [--fewest]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

GUIDE_CELL = "# Bookkeeping: the decision guide"


def guide_lines(notebook: Path) -> list[str]:
    """The decision guide's lines from an executed chapter 10 notebook."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "".join(cell["source"]).startswith(GUIDE_CELL):
            for out in cell.get("outputs", []):
                text = out.get("data", {}).get("text/markdown")
                if text:
                    return ["".join(text)]
    raise ValueError(f"{notebook}: no decision guide in its outputs (did it run to the end?)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a torchvision classifier's name, or package.module:function")
    parser.add_argument("--fewest", action="store_true", help="the fewest rounds (a quick look)")
    args = parser.parse_args(argv)
    from helpers.workload import models

    try:
        models.resolve_builder(args.model)
    except ValueError as err:
        print(f"ladder: {err}", file=sys.stderr)
        return 2
    out_dir = ROOT / "results" / "local" / "ladder"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / (re.sub(r"[^\w.-]+", "_", args.model) + ".ipynb")
    env = {**os.environ, "COURSE_MODEL": args.model}  # every S.arch of the page
    if args.fewest:
        env["COURSE_FEWEST"] = "1"
    print(f"chapter 10 on {args.model}: executing into {out.relative_to(ROOT)} (minutes)")
    cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute"]
    cmd += ["--ExecutePreprocessor.timeout=3600", "--output", str(out)]
    done = subprocess.run(
        [*cmd, str(ROOT / "notebooks" / "10_capstone.ipynb")], cwd=ROOT / "notebooks", env=env
    )
    if done.returncode != 0:
        print(f"ladder: the page stopped with an error; the traceback is in {out}", file=sys.stderr)
        return done.returncode
    print(f"\nThe decision guide for {args.model} on this machine:\n")
    print("\n".join(guide_lines(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
