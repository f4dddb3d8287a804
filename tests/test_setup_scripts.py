"""tools/check_disk.sh and tools/rerun_on_crash.sh, the two scripts `make setup` and `make test` lean on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(venv: Path, need_gb: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_MIN_FREE_GB=need_gb)
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "check_disk.sh"), str(venv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


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


# tools/rerun_on_crash.sh: a native crash (death by signal) is run once more; a failed test never is.
RERUN = ["bash", str(ROOT / "tools" / "rerun_on_crash.sh")]


def test_a_failed_test_run_is_not_retried(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    out = subprocess.run(
        RERUN + ["bash", "-c", f"echo x >> {count}; exit 1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and count.read_text().count("x") == 1


def test_a_crash_is_run_once_more_and_its_result_kept(tmp_path: Path) -> None:
    flag = tmp_path / "crashed-once"
    script = f"if [ -e {flag} ]; then exit 0; fi; touch {flag}; kill -ABRT $$"
    out = subprocess.run(RERUN + ["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "died from signal 6 (ABRT)" in out.stderr and "once more" in out.stderr


def test_a_second_crash_fails(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    out = subprocess.run(
        RERUN + ["bash", "-c", f"echo x >> {count}; kill -ABRT $$"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 134 and count.read_text().count("x") == 2
    assert "again" in out.stderr


def test_make_test_runs_pytest_through_the_rerun_wrapper() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest: setup", 1)[1].split("\n\n", 1)[0]
    assert "tools/rerun_on_crash.sh $(PY) -m pytest" in recipe
