"""Worker processes that report on one queue, with timeouts: a stuck or crashed worker raises.
Chapter 5's two-process pipeline runs on :class:`WorkerPool`."""

from __future__ import annotations

import ast
import inspect
import os
import pickle
import queue as queue_mod
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from helpers.core import scratch
from helpers.core.checks import check_int

__all__ = ["WorkerPool"]


def unguarded_main_call() -> str | None:
    """``script.py:line`` when this call runs in a script's top-level code outside
    ``if __name__ == "__main__":``, else None (a notebook, a guarded script, an import).

    Workers started by ``spawn`` or ``forkserver`` run the main script again (as ``__mp_main__``)
    before their target: a pipeline started at its top level would start again in every worker,
    which multiprocessing stops with an error that only the worker's stderr shows.
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    frame = inspect.currentframe()
    while frame is not None and not (  # the main script's own top-level code
        frame.f_code.co_name == "<module>"
        and os.path.realpath(frame.f_code.co_filename) == os.path.realpath(path)
    ):
        frame = frame.f_back
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    if frame is None or any(
        isinstance(node, ast.If)
        and ast.unparse(node.test) == "__name__ == '__main__'"
        and node.lineno <= frame.f_lineno <= (node.end_lineno or node.lineno)
        for node in ast.walk(tree)
    ):
        return None
    return f"{path}:{frame.f_lineno}"


class WorkerPool:
    """Worker processes (spawn or forkserver) reporting on one queue: start-up, timeouts, errors.

    ``target(wid, payload_path, *args, out_q)`` runs in each of ``n`` processes of the
    multiprocessing context ``ctx``. ``payload`` (e.g. the model and the images) is pickled to a
    scratch file that every worker reads (a big start-up message would block the parent if a worker
    died while reading it). A worker puts ``("ready", wid, None)`` once started, then
    ``("result", wid, body)`` per item and ``("done", wid, None)`` at the end, or
    ``("error", wid, traceback_text)``. ``startup_timeout_s`` bounds the start-up (a fresh Python
    importing PyTorch); ``timeout_s`` bounds the wait for any next message. The processes and the
    file are cleaned up when the ``with`` block ends. It refuses to start from a script's
    unguarded top level (:func:`unguarded_main_call`), where every worker would run it again.
    """

    def __init__(
        self,
        ctx: Any,
        target: Callable[..., None],
        n: int,
        payload: Any,
        args: tuple[Any, ...],
        *,
        timeout_s: float = 60.0,
        startup_timeout_s: float = 180.0,
    ) -> None:
        why = "0 workers would mean no pipeline at all: use run_serial for the serial baseline"
        check_int("workers", n, why=why)
        if timeout_s <= 0 or startup_timeout_s <= 0:
            raise ValueError("timeouts must be positive seconds")
        self.n, self.payload = n, payload
        self.timeout_s, self.startup_timeout_s = timeout_s, startup_timeout_s
        self.startup_s = float("nan")
        self._queue = ctx.Queue()
        # removed on exit, or by the next scratch_dir call if this kernel is killed
        self._tmp = scratch.scratch_dir("pipeline-")
        self._path = f"{self._tmp}/payload.pkl"
        self._procs = [
            ctx.Process(
                target=target,
                daemon=True,
                name=f"pipeline-worker-{w}",
                args=(w, self._path, *args, self._queue),
            )
            for w in range(n)
        ]

    def __enter__(self) -> WorkerPool:
        where = unguarded_main_call()
        if where is not None:
            raise RuntimeError(
                f"worker processes are started from the top level of a script ({where}): "
                "each worker runs the script again before its own work, and would start the "
                'pipeline again. Put the script\'s work under `if __name__ == "__main__":`'
            )
        try:
            with open(self._path, "wb") as fh:
                pickle.dump(self.payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
            self._launched = time.time()
            for p in self._procs:
                p.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _get(self, timeout: float, waiting_for: str) -> tuple[str, int, Any]:
        deadline = time.time() + timeout
        while True:
            try:
                msg = self._queue.get(timeout=min(1.0, max(0.01, deadline - time.time())))
            except queue_mod.Empty:
                dead = [p for p in self._procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(
                        f"pipeline worker {dead[0].name} died (exit code {dead[0].exitcode}) "
                        f"while {waiting_for}, before it could report an error: its own "
                        "message went to the worker's stderr (the terminal that started "
                        "Python, or the Jupyter server's log)"
                    ) from None
                if time.time() >= deadline:
                    raise TimeoutError(
                        f"no pipeline worker reported within {timeout:.0f} s while {waiting_for}; "
                        "a worker is stuck (the run was stopped)"
                    ) from None
                continue
            if msg[0] == "error":
                raise RuntimeError(f"pipeline worker {msg[1]} failed:\n{msg[2]}")
            return msg

    def wait_ready(self) -> None:
        """Wait until every worker has started (``startup_s`` is how long that took)."""
        ready = 0
        while ready < self.n:
            kind, _, _ = self._get(self.startup_timeout_s, "starting the workers")
            ready += kind == "ready"
        self.startup_s = time.time() - self._launched

    def results(self) -> Iterator[Any]:
        """The body of every ``result`` message, until every worker is done."""
        done = count = 0
        while done < self.n:
            kind, _, body = self._get(self.timeout_s, f"waiting for results ({count} so far)")
            if kind == "result":
                count += 1
                yield body
            elif kind == "done":
                done += 1

    def __exit__(self, *exc: object) -> None:
        for p in (p for p in self._procs if p.pid is not None):
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        scratch.remove_scratch(self._tmp)
