"""`make lab` as a reader on a rented GPU runs it: as root, headless, on a chosen port, with a token.

The test starts the real target (``make lab``) in a process group of its own, polls JupyterLab's URL
with the token until it answers (bounded), then stops the group and checks no process survives.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
STAMP = VENV / ".course-installed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The clone's remembered settings (make setup VENV=..., make kernel) go to a scratch file in these tests.
SCRATCH_LOCAL_MK = Path(tempfile.gettempdir()) / f"course-test-local-{os.getpid()}.mk"


@pytest.fixture(autouse=True, scope="module")
def _forget_scratch_settings():
    yield
    SCRATCH_LOCAL_MK.unlink(missing_ok=True)


def make_lab(
    *args: str, dry: bool = False, **popen
) -> subprocess.Popen | subprocess.CompletedProcess:
    # -o: treat the install as done (this test is about the server, not about re-running setup)
    cmd = ["make", "-s", "-C", str(ROOT), "-o", str(STAMP), f"VENV={VENV}", "lab", *args]
    cmd.append(f"LOCAL_MK={SCRATCH_LOCAL_MK}")
    if dry:
        return subprocess.run(
            cmd[:2] + ["-n"] + cmd[2:], capture_output=True, text=True, timeout=60
        )
    return subprocess.Popen(cmd, **popen)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_cmdlines(pgid: int) -> list[list[str]]:
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid:
                found.append(p.info["cmdline"] or [])
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def test_lab_command_is_headless_and_root_safe() -> None:
    out = make_lab("LAB_IP=0.0.0.0", "LAB_PORT=8999", "LAB_TOKEN=abc", dry=True)
    assert out.returncode == 0, out.stderr
    assert "--no-browser" in out.stdout and "--ip=0.0.0.0" in out.stdout
    assert "--port=8999" in out.stdout and "--port-retries=0" in out.stdout
    assert 'id -u)" = 0 ] && echo --allow-root' in out.stdout
    assert "--IdentityProvider.token=$token" in out.stdout


@pytest.mark.slow
def test_make_lab_answers_with_its_token_and_leaves_nothing_running(tmp_path: Path) -> None:
    port, token = free_port(), "course-test-token"
    log = tmp_path / "lab.log"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), HOME=str(tmp_path))
    with open(log, "w") as fh:
        proc = make_lab(
            f"LAB_PORT={port}",
            f"LAB_TOKEN={token}",
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    pgid = proc.pid  # start_new_session: make leads its own group, Jupyter and its children join it
    url = f"http://127.0.0.1:{port}/api/status?token={token}"
    try:
        status, deadline = None, time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    status = resp.status
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        text = log.read_text()
        assert status == 200, f"JupyterLab did not answer on {url}:\n{text[-3000:]}"
        # the reader is told the URL with the token
        assert f"http://127.0.0.1:{port}/lab?token={token}" in text
        # and a wrong token is refused: the token is what guards the server
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token=wrong", timeout=5)
        assert err.value.code == 403
        if os.getuid() == 0:  # as root, Jupyter only runs with --allow-root: the server proves it
            server = [c for c in group_cmdlines(pgid) if "jupyter" in " ".join(c)]
            assert server and all("--allow-root" in c for c in server), server
    finally:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.5)
        survivors = group_alive(pgid)
        if survivors:
            os.killpg(pgid, signal.SIGKILL)
    assert not survivors, "a process of `make lab` survived SIGTERM"
    with socket.socket() as s:  # nothing listens on the port any more (TIME_WAIT is allowed)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_make_kernel_registers_the_course_settings(tmp_path: Path) -> None:
    """For a JupyterLab of another environment: the kernel spec carries the mode and OMP policy."""
    import json

    local = tmp_path / "local.mk"
    out = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "-o", str(STAMP), f"VENV={VENV}", "kernel", "MODE=full"]
        + [f"KERNEL_INSTALL=--prefix={tmp_path}", f"LOCAL_MK={local}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    folder = tmp_path / "share/jupyter/kernels/course"
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["argv"][0] == str(VENV / "bin" / "python")
    assert spec["env"] == {
        "COURSE_MODE": "full",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONHASHSEED": "0",
    }
    assert spec["display_name"] == "Course (fast-inference)"
    # remembered for make restore (how it was registered) and make doctor (where)
    remembered = local.read_text()
    assert f"KERNEL_ARGS ?= MODE=full KERNEL_INSTALL=--prefix={tmp_path}" in remembered
    assert f"KERNEL_SPEC ?= {folder}" in remembered


@pytest.mark.slow
def test_doctor_finds_the_kernel_a_recreated_instance_lost(tmp_path: Path) -> None:
    """make kernel, then the system disk goes (the spec folder deleted): make doctor says make restore."""
    import shutil

    local = tmp_path / "local.mk"
    base = ["make", "-s", "-C", str(ROOT), "-o", str(STAMP), f"VENV={VENV}", f"LOCAL_MK={local}"]
    env = dict(os.environ, COURSE_MIN_FREE_GB="1")
    run = dict(capture_output=True, text=True, timeout=300, env=env)
    made = subprocess.run([*base, "kernel", f"KERNEL_INSTALL=--prefix={tmp_path}"], **run)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "kernel [ok]" in subprocess.run([*base, "doctor"], **run).stdout
    shutil.rmtree(
        tmp_path / "share"
    )  # what re-creating the instance does to ~/.local/share/jupyter
    lost = subprocess.run([*base, "doctor"], **run).stdout
    assert "kernel [WARN]" in lost and "make restore" in lost, lost
