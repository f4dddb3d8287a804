"""Scratch folders for a chapter's files (checkpoints, exported weights) that never outlive the kernel.

A chapter that writes a 40 MB checkpoint into ``tempfile.mkdtemp()`` and forgets it leaves one such
folder behind per run; on a shared machine (a workshop hub, a CI runner) they add up. A folder from
:func:`scratch_dir` is removed when the Python process that made it exits (the notebook's kernel
shuts down, a test session ends), or earlier with :func:`remove_scratch`.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

_LIVE: set[Path] = set()
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


def scratch_dir(prefix: str) -> Path:
    """A new empty folder under the system temp dir, removed at interpreter exit.

    ``prefix`` names it (``ch01-`` gives ``/tmp/ch01-abc123``); letters, digits, ``_.-`` only.
    """
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(f"scratch prefix must be 1-40 letters, digits, '_', '.' or '-', got {prefix!r}")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _LIVE.add(path)
    return path


def remove_scratch(path: str | Path) -> None:
    """Remove a folder made by :func:`scratch_dir` now (idempotent); refuses any other path."""
    p = Path(path)
    if p not in _LIVE:
        raise ValueError(f"{p} was not made by scratch_dir in this process; refusing to delete it")
    shutil.rmtree(p, ignore_errors=True)
    _LIVE.discard(p)


def live_scratch() -> list[Path]:
    """The scratch folders this process made and has not removed yet."""
    return sorted(_LIVE)


@atexit.register
def _cleanup() -> None:
    # Only the process that made a folder removes it: a forked child exiting must not delete
    # the parent's files out from under it.
    if os.getpid() != _OWNER_PID:
        return
    for p in list(_LIVE):
        shutil.rmtree(p, ignore_errors=True)
    _LIVE.clear()


_OWNER_PID = os.getpid()
