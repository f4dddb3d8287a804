"""The watchdog program that :mod:`helpers.core.processes` starts beside every managed child process.

Run as ``python -I -S process_watchdog.py GRACE_S`` (no site, no environment: it imports nothing
of the course). It reads one line, the process-group id to guard, then blocks reading its standard
input, whose only writer is the Python process that started it. When that process ends, however
it ends (even by SIGKILL), the kernel closes the pipe, the read returns, and the watchdog stops the
group: SIGTERM, up to ``GRACE_S`` seconds, then SIGKILL. It ignores SIGINT, so a Ctrl-C in the
notebook's process group does not stop it; the parent kills it after stopping the group itself.
"""

import os
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["stop_group"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(pgid: int, grace_s: float, running: Callable[[], bool]) -> None:
    """SIGTERM process group ``pgid``, wait up to ``grace_s`` while ``running()``, then SIGKILL
    what is left (children may outlive a leader that exited)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> None:
    """Wait for the parent to end, then stop the process group it named."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return
    pgid, grace = int(line), float(sys.argv[1])
    while sys.stdin.buffer.read(4096):
        pass
    stop_group(pgid, grace, lambda: _group_alive(pgid))


if __name__ == "__main__":
    main()
