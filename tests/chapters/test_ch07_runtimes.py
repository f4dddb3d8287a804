"""Chapter 7's companion (helpers.chapters.ch07_runtimes), and chapter 7 run with another embedder.

The chapter invites "your own model" (``COURSE_EMBEDDER``); the last test runs the whole page under
nbval with ``COURSE_EMBEDDER=resnet18``. It takes minutes, so it runs only when asked:
``COURSE_TEST_OTHER_EMBEDDER=1 python -m pytest tests/chapters/test_ch07_runtimes.py -k another``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.chapters import ch07_runtimes as ch07
from helpers.core.subprocess_run import run_in_subprocess
from helpers.measure.measurement import Measurement

ROOT = Path(__file__).resolve().parents[2]


def test_build_embedder_gives_unit_vectors_for_the_case_study_and_another_model(torch_mod):
    x = torch_mod.randn(3, 3, 32, 32)
    for arch, width in (("mobilenet_v2", 0.25), ("resnet18", 1.0)):
        emb = ch07.build_embedder(arch, 16, width).eval()
        with torch_mod.no_grad():
            out = emb(x)
        assert out.shape == (3, 16), arch
        np.testing.assert_allclose(out.norm(dim=1).numpy(), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="no model 'not_a_net'"):
        ch07.build_embedder("not_a_net", 16)


def test_network_of_measures_a_backbone_the_course_has_not(capsys):
    from helpers.core import precision

    x = torch.randn(4, 3, 32, 32)
    net = ch07.build_embedder("mobilenet_v2", 16, 0.25).eval()
    assert ch07.network_of(net, "mobilenet_v2", x) == "mobilenet_v2"
    assert capsys.readouterr().out == ""  # in the course's table: nothing measured
    own = ch07.build_embedder("shufflenet_v2_x0_5", 16).eval()
    precision.MEASURED_ACCUMULATION.pop("shufflenet_v2_x0_5", None)
    assert ch07.network_of(own, "shufflenet_v2_x0_5", x) == "shufflenet_v2_x0_5"
    assert "accumulation" in capsys.readouterr().out  # the measurement, shown
    assert precision.MEASURED_ACCUMULATION["shufflenet_v2_x0_5"] >= 1


def _run(rows_ms: dict[str, float]) -> dict:
    return {"rows": {k: {"median_s": v / 1e3, "contended": False} for k, v in rows_ms.items()}}


def test_policy_table_reads_paired_rounds_and_says_inconclusive():
    passive = [
        _run({"a": 12.0, "b": 1.00}),
        _run({"a": 12.5, "b": 1.02}),
        _run({"a": 11.8, "b": 0.99}),
    ]
    spin = [_run({"a": 2.4, "b": 1.01}), _run({"a": 2.3, "b": 0.98}), _run({"a": 2.5, "b": 1.00})]
    table = ch07.policy_table(
        {"PASSIVE": passive, "spinning": spin}, base="PASSIVE", other="spinning"
    )
    rows = {r["call"]: r for r in table.rows}
    assert rows["a"]["spinning vs PASSIVE"].endswith("faster")  # about 5x, every round
    assert rows["b"]["spinning vs PASSIVE"].startswith("inconclusive")  # the A/A-like row
    assert rows["a"]["PASSIVE ms"] == pytest.approx(12.0)
    with pytest.raises(ValueError, match="same number"):
        ch07.policy_table(
            {"PASSIVE": passive, "spinning": spin[:2]}, base="PASSIVE", other="spinning"
        )


@pytest.mark.slow
def test_embedder_timings_reads_back_the_policy_of_its_process(tmp_path, torch_mod):
    from helpers.deploy import export
    from helpers.workload import models

    emb = ch07.build_embedder("mobilenet_v2", 8, 0.25).eval()
    x = np.random.default_rng(0).normal(size=(4, 3, 32, 32)).astype(np.float32)
    models.calibrate_batchnorm(emb, torch_mod.from_numpy(x))
    np.savez(tmp_path / "weights.npz", **models.state_dict_numpy(emb))
    np.save(tmp_path / "inputs.npy", x)
    export.export_onnx(emb, torch_mod.from_numpy(x[:2]), tmp_path / "embedder_simplified.onnx")
    job = dict(arch="mobilenet_v2", dim=8, width=0.25, work_dir=str(tmp_path), threads=1)
    job |= dict(batches=[1, 4], warmup=1, repeats=2)
    # a spinning session in a PASSIVE process: each setting is read back from its own source
    # (the session's options, the process's environment), not derived from the other
    out = run_in_subprocess(
        "helpers.chapters.ch07_runtimes:embedder_timings",
        dict(job, spinning=True),
        env={"OMP_WAIT_POLICY": "PASSIVE"},
        unset=["OMP_WAIT_POLICY"],
        timeout_s=300,
    )["result"]
    assert out["policy"] == "PASSIVE" and out["ort_spinning"] == "1" and out["torch_threads"] == 1
    assert set(out["rows"]) == {
        "PyTorch eager, batch 1",
        "PyTorch eager, batch 4",
        "ONNX Runtime, batch 1",
        "ONNX Runtime, batch 4",
    }
    assert all(r["median_s"] > 0 for r in out["rows"].values())


def test_a_policy_table_of_measurements_uses_per_round_ratios():
    """Mutation guard: a table built from the rounds' medians, not from each policy's mean."""
    passive = [_run({"a": v}) for v in (10.0, 30.0, 10.0)]  # one slow round
    spin = [_run({"a": v}) for v in (5.0, 30.0, 5.0)]  # the same slow round
    row = ch07.policy_table({"P": passive, "S": spin}, base="P", other="S").rows[0]
    m = Measurement("x", [0.010, 0.030, 0.010])
    assert row["P ms"] == pytest.approx(m.median * 1e3)
    assert row["S vs P"].startswith("2.00x")  # rounds 1 and 3 say 2x; round 2 says 1x


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("COURSE_TEST_OTHER_EMBEDDER"),
    reason="minutes: set COURSE_TEST_OTHER_EMBEDDER=1 to run chapter 7 with resnet18",
)
def test_chapter_7_runs_with_another_embedder(tmp_path):
    env = dict(
        os.environ,
        COURSE_EMBEDDER="resnet18",
        COURSE_MODE="quick",
        PYTHONHASHSEED="0",
        OMP_WAIT_POLICY="PASSIVE",
        COURSE_RESULTS_DIR=str(tmp_path / "results"),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            str(ROOT / "notebooks" / "07_onnx_runtimes.ipynb"),
            "--nbval-lax",
            "--nbval-cell-timeout=900",
            "-p",
            "no:cacheprovider",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
