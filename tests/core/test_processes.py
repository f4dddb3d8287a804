"""helpers.core.processes: a child process group that is always stopped, whatever happens to its parent."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from helpers.core import processes

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]


class Sleeper(processes.ManagedProcess):
    """The smallest managed process: a Python that prints a line and sleeps."""

    command = SLEEPER
    prefix = "sleeper-"

    def kept_files(self):
        return ("out.log",)

    def start(self):
        self.make_workdir(self.prefix)
        self.launch(self.command, output=self.workdir / "out.log")
        deadline = time.monotonic() + 20
        while "up" not in self.kept("out.log") and time.monotonic() < deadline:
            time.sleep(0.02)
        return self


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while processes.alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes.alive(pids)


def test_stop_kills_the_group_keeps_the_log_and_removes_the_folder():
    with Sleeper() as s:
        pids, folder = s.processes(), s.workdir
        assert s.is_alive() and pids and folder.is_dir()
    assert not s.is_alive() and _wait_gone(pids) == [] and not folder.exists()
    assert "up" in s.kept("out.log")  # the log outlives the folder
    assert s.stop() is not None or not s.is_alive()  # stop() again is harmless


EXITING = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from test_processes import Sleeper

    s = Sleeper().start()  # still referenced at exit
    os.kill(s._watchdog.pid, signal.SIGKILL)  # so that only the exit hook can stop it
    print(json.dumps([s.workdir.as_posix(), *s.processes()]), flush=True)
""")


def test_exit_hook_stops_processes_alive_at_exit(tmp_path):
    script = tmp_path / "exiting.py"
    script.write_text(EXITING)
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [sys.executable, str(script), here], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    folder, *pids = json.loads(proc.stdout.splitlines()[-1])
    left = _wait_gone(pids, timeout=3)
    for pid in left:  # the check failed: do not leak the process
        os.kill(pid, signal.SIGKILL)
    assert pids and left == [] and not os.path.exists(folder)


def test_finalizer_stops_forgotten_processes():
    s = Sleeper().start()
    pids = s.processes()
    del s
    gc.collect()  # the finalizer of a forgotten object stops its group
    assert _wait_gone(pids) == []


def test_launch_needs_a_folder_first():
    import pytest

    with pytest.raises(RuntimeError, match="make_workdir"):
        processes.ManagedProcess().launch(SLEEPER)


CHILD = textwrap.dedent("""
    import json, os, signal, sys, time
    from helpers.core import processes

    class Stubborn(processes.ManagedProcess):  # ignores SIGTERM: only the watchdog's SIGKILL stops it
        grace_s = 0.5
        def start(self):
            code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                    "print('ready', flush=True); time.sleep(300)")
            self.make_workdir("stubborn-")
            self.launch([sys.executable, "-c", code], output=self.workdir / "out.log")
            while "ready" not in self.kept("out.log"):
                time.sleep(0.02)
            return self

    s = Stubborn().start()
    print(json.dumps([s.pid, s._watchdog.pid]), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_watchdog_stops_a_group_that_ignores_sigterm_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr[-1500:]
    stubborn, watchdog = json.loads(proc.stdout.splitlines()[-1])
    assert _wait_gone([stubborn, watchdog], timeout=20) == []


STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(300)",
]


class Stubborn(Sleeper):
    """A managed process that ignores SIGTERM."""

    command = STUBBORN
    prefix = "stubborn-"
    grace_s = 0.3


def test_stop_kills_a_group_that_ignores_sigterm():
    """Catches M26 (``_stop`` without its SIGKILL after the grace period): ``stop()`` of a
    live parent must not leave a process that ignores SIGTERM running."""
    with Stubborn() as s:
        pids = s.processes()
        assert pids
    left = _wait_gone(pids, timeout=3)
    for pid in left:  # the check failed: do not leak the process
        os.kill(pid, signal.SIGKILL)
    assert left == []
