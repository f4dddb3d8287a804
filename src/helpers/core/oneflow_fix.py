"""A fix for a race in OneFlow 0.9.0's ``nn.Graph`` launcher, loaded before OneFlow starts.

The race (``oneflow/core/vm/lazy_job_instruction_policy.h``, still so upstream): each graph call's
``LaunchLazyJob`` hands the job to the graph's runtime and only *then* records it in the lazy-job
stream's queue (``EnqueueNNGraph``); the job's last kernel removes that entry (``DequeueNNGraph``:
an unchecked ``queue_.pop()``). A small graph on a busy machine can finish while the launcher
waits for a CPU between the two steps: ``pop()`` on an empty ``std::queue`` is undefined (a
segfault, ``free(): invalid pointer``, an ``UNIMPLEMENTED`` abort, a crash at exit, or a launcher
waiting forever). The window lies inside one C++ call: no Python lock closes it.

The fix replaces both functions (liboneflow calls them through its PLT, so a library loaded with
``RTLD_GLOBAL`` first takes their place): a job that finishes before its launch was recorded is
counted, and its late ``EnqueueNNGraph`` consumes the count instead of adding an entry nobody
removes. It is compiled once with the machine's C++ compiler (about 2 s) and cached.
:func:`install` (called by ``environment.import_oneflow``) does nothing for another OneFlow
build or with ``COURSE_ONEFLOW_FIX=0``; :func:`status` says what happened.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

__all__ = ["install", "status", "counters"]

# The manylinux wheel of oneflow==0.9.0 (requirements.txt): its liboneflow, whose
# LazyJobStreamPolicy is {vtable, std::queue<std::weak_ptr<NNGraphIf>> queue_, std::mutex mutex_,
# std::condition_variable cond_} (mutex at 0x58, condition variable at 0x80, read from its
# DequeueNNGraph). Another build may lay it out differently: the fix is then not loaded.
LIBONEFLOW = "liboneflow-6f2d67ec.so"

SOURCE = r"""
// OneFlow 0.9.0: LazyJobStreamPolicy::{Enqueue,Dequeue}NNGraph, safe when a job finishes before its
// launch was enqueued (see helpers/core/oneflow_fix.py). Test hook: $COURSE_LAZYJOB_TEST_DELAY_US
// sleeps before each enqueue, which widens the race window so that it is hit on every call.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>

namespace oneflow {
class NNGraphIf;
namespace vm {

struct LazyJobStreamPolicyLayout {
  void* vtable;
  std::queue<std::weak_ptr<NNGraphIf>> queue_;
  std::mutex mutex_;
  std::condition_variable cond_;
};
static_assert(offsetof(LazyJobStreamPolicyLayout, mutex_) == 0x58, "OneFlow 0.9.0 layout");
static_assert(offsetof(LazyJobStreamPolicyLayout, cond_) == 0x80, "OneFlow 0.9.0 layout");

// Guarded by the policy's mutex_: OneFlow 0.9.0 has one lazy-job launcher stream, on "cpu" for
// every graph (instructions_builder.cpp), so one policy object.
static long g_finished_early = 0;  // jobs finished whose EnqueueNNGraph has not come yet
static long g_launches = 0;
static long g_early_total = 0;

class __attribute__((visibility("default"))) LazyJobStreamPolicy {
 public:
  void EnqueueNNGraph(const std::shared_ptr<NNGraphIf>& nn_graph);
  void DequeueNNGraph();
};

void LazyJobStreamPolicy::EnqueueNNGraph(const std::shared_ptr<NNGraphIf>& nn_graph) {
  static const long delay_us = [] {
    const char* v = std::getenv("COURSE_LAZYJOB_TEST_DELAY_US");
    return v ? std::atol(v) : 0L;
  }();
  if (delay_us > 0) { std::this_thread::sleep_for(std::chrono::microseconds(delay_us)); }
  auto* self = reinterpret_cast<LazyJobStreamPolicyLayout*>(this);
  std::unique_lock<std::mutex> lock(self->mutex_);
  ++g_launches;
  if (g_finished_early > 0) {  // this launch's job is already done: nothing left to wait for
    --g_finished_early;
    return;
  }
  self->queue_.emplace(nn_graph);
}

void LazyJobStreamPolicy::DequeueNNGraph() {
  auto* self = reinterpret_cast<LazyJobStreamPolicyLayout*>(this);
  std::unique_lock<std::mutex> lock(self->mutex_);
  if (self->queue_.empty()) {  // finished before its launcher enqueued it (OneFlow would pop())
    ++g_finished_early;
    ++g_early_total;
  } else {
    self->queue_.pop();
  }
  self->cond_.notify_all();
}

}  // namespace vm
}  // namespace oneflow

extern "C" __attribute__((visibility("default"))) void course_lazyjob_counters(long* out) {
  out[0] = oneflow::vm::g_launches;
  out[1] = oneflow::vm::g_early_total;
}
"""

_FLAGS = ["-O2", "-shared", "-fPIC", "-std=c++14", "-fvisibility=hidden"]
_state: dict[str, Any] = {"loaded": False, "reason": "install() not called yet"}


def _liboneflow() -> Path | None:
    spec = find_spec("oneflow")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent.parent / "oneflow.libs" / LIBONEFLOW
    return path if path.exists() else None


def _build() -> Path:
    """The compiled fix, built on first use in the first writable cache folder (atomically:
    several processes may race to build it)."""
    digest = hashlib.sha256((SOURCE + " ".join(_FLAGS)).encode()).hexdigest()[:12]
    name = f"oneflow_lazyjob_fix-{digest}.so"
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folders = [Path(sys.prefix) / "share" / "fast-inference-course", home / "fast-inference-course"]
    for folder in folders:
        if (folder / name).exists():
            return folder / name
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise RuntimeError("no C++ compiler (c++ or g++) found")
    errors = []
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                src, out = Path(tmp) / "fix.cpp", Path(tmp) / name
                src.write_text(SOURCE)
                proc = subprocess.run(
                    [cxx, *_FLAGS, "-o", str(out), str(src)],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"{cxx} failed: {proc.stderr.strip()[-1500:]}")
                os.replace(out, folder / name)
            return folder / name
        except OSError as exc:  # not writable: try the next folder
            errors.append(f"{folder}: {exc}")
    raise RuntimeError("cannot write the compiled fix: " + "; ".join(errors))


def install() -> dict[str, Any]:
    """Load the fix before ``import oneflow`` (liboneflow binds the two functions when it loads);
    idempotent; returns :func:`status`. Never raises: without the fix OneFlow still runs, with
    the rare crash described above."""
    if _state["loaded"] or _state.get("tried"):
        return status()
    _state["tried"] = True
    if os.environ.get("COURSE_ONEFLOW_FIX", "1").strip() == "0":
        _state["reason"] = "disabled by COURSE_ONEFLOW_FIX=0"
    elif not sys.platform.startswith("linux"):
        _state["reason"] = "not Linux (OneFlow 0.9.0 wheels are Linux only)"
    elif "oneflow" in sys.modules:
        _state["reason"] = "OneFlow was imported before the fix could be loaded"
    elif _liboneflow() is None:
        _state["reason"] = (
            f"no {LIBONEFLOW} (not the oneflow==0.9.0 wheel this fix was written for)"
        )
    else:
        try:
            path = _build()
            _state["lib"] = ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
            _state.update(loaded=True, path=str(path), reason="loaded")
        except Exception as exc:  # a missing compiler must not stop the course
            _state["reason"] = f"could not build or load it: {exc}"
    return status()


def status() -> dict[str, Any]:
    """``{"loaded": bool, "reason": str, "path": str (when loaded)}``."""
    return {k: v for k, v in _state.items() if k in ("loaded", "reason", "path")}


def counters() -> dict[str, int] | None:
    """Graph launches seen by the fix, and how many of them finished before being enqueued."""
    if not _state["loaded"]:
        return None
    out = (ctypes.c_long * 2)()
    _state["lib"].course_lazyjob_counters(out)
    return {"launches": int(out[0]), "finished_before_enqueue": int(out[1])}
