"""Scratch folders for a chapter's files (checkpoints, exported weights) that never outlive the kernel.

A folder from :func:`scratch_dir` is removed when the process that made it exits, or earlier by
:func:`remove_scratch`. A killed kernel (nbval uses SIGKILL) cannot clean up, so each folder's
name starts with its process id (``<tmp>/inference-course-scratch-<uid>/<pid>-<prefix>...``) and
the next :func:`scratch_dir` call, in any process, removes those of processes that are gone.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = [
    "scratch_dir",
    "remove_scratch",
]

_LIVE: set[Path] = set()
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_OWNED = re.compile(r"^(\d+)-")


def scratch_root() -> Path:
    """``<tmp>/inference-course-scratch-<uid>``: one root per user, since a root made by one
    participant of a shared hub (mode 0700) would refuse everybody else's folders."""
    return Path(tempfile.gettempdir()) / f"inference-course-scratch-{os.getuid()}"


def _owned_by(folder: Path) -> int | None:
    """The process id a scratch folder's name starts with (None for anything else)."""
    m = _OWNED.match(folder.name)
    return int(m.group(1)) if m and folder.parent == scratch_root() else None


def sweep_stale() -> list[Path]:
    """Remove the scratch folders whose process is gone (killed kernels); returns what was removed."""
    import psutil

    root = scratch_root()
    removed = []
    for child in root.iterdir() if root.is_dir() else ():
        owner = _owned_by(child)
        if child.is_dir() and owner not in (None, os.getpid()) and not psutil.pid_exists(owner):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def scratch_dir(prefix: str) -> Path:
    """A new empty folder under the system temp dir, removed at interpreter exit.

    ``prefix`` names it (``ch01-`` gives ``/tmp/inference-course-scratch-0/4242-ch01-abc123``);
    letters, digits, ``_.-`` only. Folders left by processes that no longer exist are removed first.
    """
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(
            f"scratch prefix must be 1-40 letters, digits, '_', '.' or '-', got {prefix!r}"
        )
    sweep_stale()
    root = scratch_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{prefix}", dir=root))
    _LIVE.add(path)
    return path


def remove_scratch(path: str | Path) -> None:
    """Remove a folder made by :func:`scratch_dir` in this process now (idempotent); refuses any other path."""
    p = Path(path)
    if _owned_by(p) != os.getpid():
        raise ValueError(f"{p} was not made by scratch_dir in this process; refusing to delete it")
    shutil.rmtree(p, ignore_errors=True)
    _LIVE.discard(p)


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
