"""tools/check_disk.sh: the setup stops with a clear message, before pip, when the disk cannot hold the install."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(venv: Path, need_gb: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_MIN_FREE_GB=need_gb)
    return subprocess.run(["bash", str(ROOT / "tools" / "check_disk.sh"), str(venv)], capture_output=True,
                          text=True, env=env, timeout=60)


def test_enough_room_passes(tmp_path: Path) -> None:
    out = run(tmp_path, "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout


def test_too_little_room_stops_with_the_reason_and_a_way_out(tmp_path: Path) -> None:
    out = run(tmp_path, "1000000")  # a petabyte: no machine running this has it free
    assert out.returncode == 1
    assert "not enough free disk" in out.stdout and "VENV=" in out.stdout


def test_zero_skips_the_check(tmp_path: Path) -> None:
    assert run(tmp_path, "0").returncode == 0


def test_the_makefile_checks_before_installing() -> None:
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP):", 1)[1]
    assert recipe.index("check_disk.sh") < recipe.index("$(PIP) install")
