"""Setup for the GPU checks: the course's ``src`` on ``sys.path`` and a recorder for measured numbers.

These tests run with a bare ``python3`` (torch, numpy, pytest; no course package, no OneFlow), so
the helpers they use (precision, measure.timer, comparison: none of them needs OneFlow) are
imported from ``src``. ``GPU_CHECK_RECORD=path.json`` (set by ``tools/gpu_check.sh``) collects the
numbers each test measured, for the summary.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

# cuBLAS is deterministic only with a fixed workspace configuration, read when PyTorch first sizes
# its workspace: set it before any test touches CUDA (precision.deterministic() needs it).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@pytest.fixture
def record(request: pytest.FixtureRequest):
    """``record(key=value, ...)``: numbers this test measured, written to $GPU_CHECK_RECORD."""
    path = os.environ.get("GPU_CHECK_RECORD")
    values: dict[str, Any] = {}
    yield values.update
    if path and values:
        target = Path(path)
        data = json.loads(target.read_text()) if target.exists() else {}
        data[request.node.name] = values
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
