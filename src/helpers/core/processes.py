"""Child processes that are always stopped: a server or a proxy that a notebook starts and must not leak.

:class:`ManagedProcess` starts a command in a process group of its own (``start_new_session``: a
``setsid()`` done by ``subprocess``'s C code, no ``preexec_fn``, which can deadlock in a threaded
process such as a Jupyter kernel running PyTorch), with its output in a log file in a scratch
folder. Three safety nets stop the whole group: the context manager (also on exceptions), a
finalizer (``weakref.finalize``: when the object is garbage collected, and at interpreter exit for
those still alive), and a watchdog process (:mod:`helpers.core.process_watchdog`) that stops the
group when this Python process dies, even by SIGKILL. The Triton server and the nginx front use it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from helpers.core import scratch
from helpers.core.process_watchdog import stop_group

__all__ = [
    "ManagedProcess",
    "alive",
]

# Seconds a stopped group gets between SIGTERM and SIGKILL, unless its class says otherwise.
GRACE_S = 5.0
_WATCHDOG = Path(__file__).with_name("process_watchdog.py")


def alive(pids: Sequence[int]) -> list[int]:
    """The PIDs among ``pids`` that still run (zombies awaiting their parent's wait() count as gone)."""
    import psutil

    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
    return out


def _start_watchdog(grace_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(_WATCHDOG), str(grace_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,  # not in the kernel's process group: a Ctrl-C there leaves it be
    )


def _stop(
    proc: subprocess.Popen | None,
    watchdog: subprocess.Popen | None,
    workdir: Path | None,
    grace_s: float,
) -> None:
    """Stop the group of ``proc`` (SIGTERM, up to ``grace_s``, SIGKILL), then its watchdog (which
    must not signal a reused group id), and delete ``workdir``: what :meth:`ManagedProcess.stop`
    runs, and the finalizer of a forgotten process (or of one alive at interpreter exit)."""
    if proc is not None:
        stop_group(proc.pid, grace_s, lambda: proc.poll() is None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if watchdog is not None:
        watchdog.kill()  # nothing once it has exited
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            watchdog.communicate(timeout=10)  # reaps it and closes its stdin
    if workdir is not None:
        scratch.remove_scratch(workdir)


# Every server the course starts listens on loopback only.
LOOPBACK = "127.0.0.1"


class ManagedProcess:
    """One command in its own process group, with a scratch folder and a log, always stopped.

    Subclasses write ``start()``: :meth:`make_workdir`, :meth:`launch` the command, wait until it
    is ready. :meth:`stop` keeps the files named by :meth:`kept_files` (read with :meth:`kept`).
    """

    grace_s: float = GRACE_S
    http_port: int = 0  # a server's ports, where it serves on loopback
    grpc_port: int = 0

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self._watchdog: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None
        self._kept: dict[str, str] = {}

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` of the HTTP endpoint (what ``tritonclient.http`` takes)."""
        return f"{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` of the gRPC endpoint (what ``tritonclient.grpc`` takes)."""
        return f"{LOOPBACK}:{self.grpc_port}"

    def describe(self, what: str) -> str:
        """``Kind(what, pid 123, http 127.0.0.1:8000, grpc ...)``, or ``Kind(what, stopped)``."""
        state = f"pid {self.pid}, http {self.http_url}, grpc {self.grpc_url}"
        return f"{type(self).__name__}({what}, {state if self.is_alive() else 'stopped'})"

    @property
    def pid(self) -> int | None:
        """Process id of the running (or last) process, None before it started."""
        return self.proc.pid if self.proc is not None else None

    def is_alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def processes(self) -> list[int]:
        """PIDs of the live process and its children (its process group; zombies excluded)."""
        import psutil

        members = []
        for pid in psutil.pids() if self.proc is not None else ():
            with contextlib.suppress(OSError):  # gone, or not ours
                if os.getpgid(pid) == self.proc.pid:
                    members.append(pid)
        return alive(members)

    def make_workdir(self, prefix: str) -> Path:
        """A fresh scratch folder for this run (removed by :meth:`stop`, at exit, or by the next run)."""
        self.workdir = scratch.scratch_dir(prefix)
        return self.workdir

    def kept_files(self) -> Sequence[str]:
        """Names of files in the folder whose text :meth:`stop` keeps (logs)."""
        return ()

    def kept(self, name: str) -> str:
        """The text of ``workdir/name``: read live while running, kept after :meth:`stop`."""
        if self.workdir is not None and (self.workdir / name).exists():
            return (self.workdir / name).read_text(encoding="utf-8", errors="replace")
        return self._kept.get(name, "")

    def launch(
        self,
        cmd: Sequence[str],
        *,
        output: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen:
        """Start ``cmd`` in its own process group in :attr:`workdir`, guarded from the first moment."""
        if self.workdir is None:
            raise RuntimeError("make_workdir() first: the process runs in its own scratch folder")
        self._watchdog = _start_watchdog(self.grace_s)  # first, so it guards from the start
        try:
            with open(output or os.devnull, "wb") as out:
                self.proc = subprocess.Popen(
                    list(cmd),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=dict(env) if env is not None else None,
                    cwd=self.workdir,
                    start_new_session=True,  # its own process group; no preexec_fn (see above)
                )
        except BaseException:
            _stop(None, self._watchdog, None, self.grace_s)
            self._watchdog = None
            raise
        self._finalizer = weakref.finalize(
            self, _stop, self.proc, self._watchdog, self.workdir, self.grace_s
        )
        try:
            self._watchdog.stdin.write(f"{self.proc.pid}\n".encode())
            self._watchdog.stdin.flush()
        except OSError as exc:  # the watchdog died at once: do not run what nothing guards
            self.stop()
            raise RuntimeError(f"the watchdog process is not running: {exc}") from exc
        return self.proc

    def stop(self) -> int | None:
        """Stop the group (SIGTERM, :attr:`grace_s`, SIGKILL) and the watchdog, keep the logs,
        delete the folder; the exit code. Idempotent."""
        if self.workdir is not None:
            self._kept = {name: self.kept(name) for name in self.kept_files()}
        if self._finalizer is not None:
            self._finalizer()  # runs _stop once; a second call does nothing
        elif self.workdir is not None:  # launch() never started the process
            scratch.remove_scratch(self.workdir)
        self.workdir = self._watchdog = None
        return None if self.proc is None else self.proc.returncode

    def start(self) -> ManagedProcess:
        """Start the process and wait until it is ready (subclasses)."""
        raise NotImplementedError

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
