"""Scratch folders: made empty, removed on request or when the process that made them exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.core import scratch


def test_scratch_dir_is_new_empty_and_removable() -> None:
    p = scratch.scratch_dir("unit-")
    assert p.is_dir() and "-unit-" in p.name and not any(p.iterdir())
    (p / "f.bin").write_bytes(b"x" * 10)
    assert p in scratch._LIVE
    scratch.remove_scratch(p)
    assert not p.exists() and p not in scratch._LIVE
    scratch.remove_scratch(p)  # a second removal (stop() after a finalizer) is harmless


@pytest.mark.parametrize("prefix", ["", "../up", "a/b", "x" * 41, 3])
def test_bad_prefix_is_refused(prefix) -> None:
    with pytest.raises(ValueError, match="scratch prefix"):
        scratch.scratch_dir(prefix)


def test_remove_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not made by scratch_dir"):
        scratch.remove_scratch(tmp_path)
    assert tmp_path.exists()


def test_folder_is_removed_when_the_process_exits() -> None:
    code = "from helpers.core.scratch import scratch_dir\np = scratch_dir('exit-')\n(p / 'a').write_text('x')\nprint(p)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    made = Path(out.stdout.strip())
    assert "-exit-" in made.name
    assert not made.exists(), "the scratch folder outlived its process"


def test_a_forked_child_does_not_remove_its_parents_folder() -> None:
    code = (
        "import os, sys\nfrom helpers.core.scratch import scratch_dir\np = scratch_dir('fork-')\n"
        "pid = os.fork()\nif pid == 0:\n    sys.exit(0)\nos.waitpid(pid, 0)\nprint(p.exists())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "True"


def test_a_killed_process_folder_is_swept_by_the_next_call() -> None:
    code = "from helpers.core.scratch import scratch_dir\nimport os\np = scratch_dir('killed-')\nprint(p, flush=True)\nos.kill(os.getpid(), 9)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -9
    left = Path(out.stdout.strip())
    assert left.is_dir(), "a SIGKILLed process cannot clean up; the folder is expected to be left"
    mine = scratch.scratch_dir("sweeper-")
    assert not left.exists(), "the next scratch_dir call should remove a dead process's folder"
    assert mine.is_dir()
    scratch.remove_scratch(mine)


def test_a_live_process_folder_is_kept() -> None:
    ours = scratch.scratch_dir("live-")
    assert ours.name.startswith(f"{os.getpid()}-live-") and ours.parent == scratch.scratch_root()
    assert ours not in scratch.sweep_stale() and ours.is_dir()
    scratch.remove_scratch(ours)


def test_each_user_has_a_private_root():
    """A shared /tmp on a workshop hub: one participant's root must not lock out the next one."""
    root = scratch.scratch_root()
    assert root.name == f"inference-course-scratch-{os.getuid()}"
    scratch.scratch_dir("perm")
    assert root.stat().st_mode & 0o777 == 0o700 and root.stat().st_uid == os.getuid()
