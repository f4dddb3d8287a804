"""helpers.core.subprocess_run: a function run in a fresh process, with its own environment variables.

The targets are standard-library functions (``os:getenv``, ``os:getpid``, ``signal:pause``), so the
tests need no helper of their own inside the package.
"""

from __future__ import annotations

import os

import pytest

from helpers.core import subprocess_run as sr

GETENV = "os:getenv"


def test_child_is_a_new_process():
    res = sr.run_in_subprocess("os:getpid", timeout_s=60)
    assert isinstance(res["result"], int) and res["result"] != os.getpid()
    assert res["env"] == {} and res["wall_s"] > 0


def test_env_is_added_and_unset_is_not_inherited(monkeypatch):
    monkeypatch.setenv("COURSE_TEST_INHERITED", "parent")  # set here: the child inherits it...
    assert sr.run_in_subprocess(GETENV, {"key": "COURSE_TEST_INHERITED"})["result"] == "parent"
    res = sr.run_in_subprocess(  # ...unless it is unset
        GETENV, {"key": "COURSE_TEST_INHERITED"}, unset=["COURSE_TEST_INHERITED"]
    )
    assert res["result"] is None
    res = sr.run_in_subprocess(  # env is added after unset: it always wins
        GETENV,
        {"key": "COURSE_TEST_INHERITED"},
        env={"COURSE_TEST_INHERITED": "child"},
        unset=("COURSE_TEST_INHERITED",),
    )
    assert res["result"] == "child" and res["env"] == {"COURSE_TEST_INHERITED": "child"}


@pytest.mark.parametrize(
    "target", ["no_colon", "a:b:c", ":f", "helpers.nope:f", "helpers.core.subprocess_run:nothing"]
)
def test_bad_targets_fail_before_starting(target):
    with pytest.raises(ValueError, match="target|import|no function"):
        sr.run_in_subprocess(target)


def test_bad_arguments():
    with pytest.raises(TypeError, match="JSON"):
        sr.run_in_subprocess(GETENV, {"key": object()})
    with pytest.raises(TypeError, match="environment variables"):
        sr.run_in_subprocess(GETENV, {"key": "X"}, env={"X": 1})
    with pytest.raises(TypeError, match="non-empty variable names"):
        sr.run_in_subprocess(GETENV, {"key": "X"}, unset="X")
    with pytest.raises(TypeError, match="non-empty variable names"):
        sr.run_in_subprocess(GETENV, {"key": "X"}, unset=["X", ""])
    with pytest.raises(ValueError, match="timeout_s"):
        sr.run_in_subprocess(GETENV, {"key": "X"}, timeout_s=0)


def test_child_exception_comes_back_with_traceback():
    with pytest.raises(
        RuntimeError, match="raised in the subprocess(.|\n)*TypeError: str expected"
    ):
        sr.run_in_subprocess(GETENV, {"key": 1}, timeout_s=60)


def test_child_crash_and_timeout():
    with pytest.raises(RuntimeError, match="exited with code"):
        sr.run_in_subprocess("os:abort", timeout_s=60)
    with pytest.raises(TimeoutError, match="did not finish within 2 s"):
        sr.run_in_subprocess("signal:pause", timeout_s=2)  # waits for a signal that never comes
