"""helpers.core.subprocess_run: a benchmark target in a fresh process, with its own environment variables."""

from __future__ import annotations

import os

import pytest

from helpers.core import subprocess_run as sb

ECHO = "helpers.core.subprocess_run:echo_environment"


def test_child_sees_its_environment_and_not_inherited_mlir_vars(monkeypatch):
    monkeypatch.setenv("ONEFLOW_MLIR_FUSE_FORWARD_OPS", "1")  # set in the parent: must not leak
    res = sb.run_in_subprocess(
        ECHO,
        {
            "names": [
                "ONEFLOW_MLIR_ENABLE_ROUND_TRIP",
                "ONEFLOW_MLIR_FUSE_FORWARD_OPS",
                "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION",
            ]
        },
        env=sb.BN_FOLDING_ENV,
        timeout_s=60,
    )
    out = res["result"]
    assert out["pid"] != os.getpid() and not out["oneflow_imported"]
    assert out["env"] == {
        "ONEFLOW_MLIR_ENABLE_ROUND_TRIP": "1",
        "ONEFLOW_MLIR_FUSE_FORWARD_OPS": None,
        "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION": "1",
    }
    assert res["env"] == sb.BN_FOLDING_ENV and res["wall_s"] > 0
    kept = sb.run_in_subprocess(
        ECHO, {"names": ["ONEFLOW_MLIR_FUSE_FORWARD_OPS"]}, clear_mlir_vars=False
    )
    assert kept["result"]["env"]["ONEFLOW_MLIR_FUSE_FORWARD_OPS"] == "1"


@pytest.mark.parametrize(
    "target", ["no_colon", "a:b:c", ":f", "helpers.nope:f", "helpers.core.subprocess_run:nothing"]
)
def test_bad_targets_fail_before_starting(target):
    with pytest.raises(ValueError, match="target|import|no function"):
        sb.run_in_subprocess(target)


def test_bad_arguments():
    with pytest.raises(TypeError, match="JSON"):
        sb.run_in_subprocess(ECHO, {"names": object()})
    with pytest.raises(TypeError, match="environment variables"):
        sb.run_in_subprocess(ECHO, {"names": []}, env={"X": 1})
    with pytest.raises(ValueError, match="timeout_s"):
        sb.run_in_subprocess(ECHO, {"names": []}, timeout_s=0)


def test_child_exception_comes_back_with_traceback():
    with pytest.raises(RuntimeError, match="TypeError: names must be a list"):
        sb.run_in_subprocess(ECHO, {"names": "PATH"}, timeout_s=60)


def test_child_crash_and_timeout():
    with pytest.raises(RuntimeError, match="exited with code"):
        sb.run_in_subprocess("os:abort", timeout_s=60)
    with pytest.raises(TimeoutError, match="did not finish within 2 s"):
        sb.run_in_subprocess(ECHO, {"names": [], "delay_s": 30}, timeout_s=2)
