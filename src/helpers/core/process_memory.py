"""Peak memory of a process tree, sampled in a thread (``conftest.py`` under nbval, ``make fullcpu``).

The tree's figure sums each process's PSS (a page shared by ``n`` processes counts ``1/n`` in
each; ``/proc/<pid>/smaps_rollup``). A sum of RSS counts a shared page once per process: forked
workers sharing a model's weights would add up to more memory than the machine has. Where PSS
cannot be read (another OS, another user's process) a process counts with its RSS.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["Sampler", "TreeMemory"]


class Sampler:
    """Calls :meth:`sample` every ``every`` seconds in a daemon thread, and once more at the end.

    Use as a context manager, or ``start()`` and ``stop()``; subclasses write ``sample()``.
    """

    def __init__(self, every: float) -> None:
        if every <= 0:
            raise ValueError("a sampling interval must be positive seconds")
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def start(self) -> Sampler:
        """Start sampling in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> Sampler:
        """Stop sampling (after one last sample)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        return self

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TreeMemory(Sampler):
    """Peak memory of process ``pid`` and its descendants, sampled every ``every`` s.

    ``peak``: the largest sum of PSS over the tree (bytes); ``peak_children``: the same without
    ``pid`` itself; ``largest``: the largest single descendant; ``peak_rss``: the largest sum of
    RSS (an upper bound); ``pss``: False if any process was counted with its RSS instead;
    ``peak_at``: when the tree reached ``peak`` (``time.time()``; 0.0 before a sample);
    ``load_max``: the highest 1-minute load average seen.
    """

    def __init__(self, pid: int | None = None, every: float = 0.5) -> None:
        import psutil  # noqa: F401 - fail here, not in the sampling thread

        super().__init__(every)
        self.pid = os.getpid() if pid is None else pid
        self.peak = self.peak_children = self.largest = self.peak_rss = 0
        self.peak_at = 0.0
        self.pss = True
        self.load_max = 0.0

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        pss, rss = {}, {}
        for p in procs:
            try:
                rss[p.pid] = p.memory_info().rss
            except psutil.Error:  # it ended between the listing and the reading
                continue
            try:
                pss[p.pid] = p.memory_full_info().pss
            except psutil.NoSuchProcess:  # it ended meanwhile: its last reading
                pss[p.pid] = rss[p.pid]
            except (psutil.Error, AttributeError):  # no PSS here: count its RSS
                pss[p.pid] = rss[p.pid]
                self.pss = False
        total = sum(pss.values())
        own = pss.pop(self.pid, 0)
        if total > self.peak:
            self.peak, self.peak_at = total, time.time()
        self.peak_children = max(self.peak_children, total - own)
        self.largest = max(self.largest, max(pss.values(), default=0))
        self.peak_rss = max(self.peak_rss, sum(rss.values()))
        self.load_max = max(self.load_max, os.getloadavg()[0])
