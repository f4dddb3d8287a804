"""tools/ladder.py: `make ladder MODEL=...`, chapter 10 on your own classifier."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import ladder as tool  # noqa: E402


def test_a_typo_fails_at_once_with_what_would_work(capsys):
    assert tool.main(["mobilenet_v3_smal"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'mobilenet_v3_smal'" in err and "module:function" in err


def test_the_guide_is_read_from_the_executed_page(tmp_path):
    cell = {
        "cell_type": "code",
        "source": [tool.GUIDE_CELL + ", generated from the ladder\n", "display(...)"],
        "outputs": [{"output_type": "display_data", "data": {"text/markdown": ["- on x: a"]}}],
    }
    nb = tmp_path / "out.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": []}, cell]}))
    assert tool.guide_lines(nb) == ["- on x: a"]
    cell["outputs"] = []  # the page stopped before its guide
    nb.write_text(json.dumps({"cells": [cell]}))
    with pytest.raises(ValueError, match="no decision guide"):
        tool.guide_lines(nb)
