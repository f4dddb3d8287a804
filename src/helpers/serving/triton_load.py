"""Load a Triton server you own with a bounded number of concurrent clients, and measure it.

Both :func:`perf_analyzer` and :func:`counted_run` (an exact number of requests, answers and
failures counted) refuse anything but a loopback address and bound levels, clients and seconds.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helpers.serving.triton_client import check_loopback, connect, request_tensors

__all__ = [
    "counted_run",
    "find_perf_analyzer",
    "perf_analyzer",
]

MAX_CONCURRENCY = 64
MAX_LEVELS = 12


def find_perf_analyzer() -> tuple[Path, dict[str, str]]:
    """``perf_analyzer`` (from ``tritonclient``) and its environment (the CUDA 12 pip packages'
    ``libcudart.so.12`` on the library path); ``FileNotFoundError`` names what is missing."""
    beside = Path(sys.executable).parent / "perf_analyzer"
    exe = beside if beside.exists() else shutil.which("perf_analyzer")
    if exe is None:
        raise FileNotFoundError(
            "perf_analyzer not found (tritonclient 2.50 on Linux x86-64 has it)"
        )
    env, libs = dict(os.environ), [os.environ.get("LD_LIBRARY_PATH", "")]
    with contextlib.suppress(ImportError):
        import nvidia.cuda_runtime as cr  # type: ignore[import-not-found]

        libs += [str(Path(b) / "lib") for b in cr.__path__ if any(Path(b).glob("lib/libcudart*"))]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, reversed(libs)))
    probe = subprocess.run(
        [str(exe), "--version"], env=env, capture_output=True, text=True, timeout=30
    )
    if "error while loading shared libraries" in probe.stderr:
        missing = probe.stderr.split("shared libraries:")[1].split(":")[0].strip()
        hint = {
            "libb64.so.0d": "install the Debian package libb64-0d (tools/install_system_deps.sh)",
            "libcudart.so.12": "install nvidia-cuda-runtime-cu12 (comes with torch's CUDA 12 build)",
        }
        raise FileNotFoundError(
            f"perf_analyzer cannot start: {missing} missing; {hint.get(missing, 'install it')}"
        )
    return Path(exe), env


def perf_analyzer(
    url: str,
    model: str,
    concurrencies: Sequence[int],
    *,
    protocol: str = "grpc",
    measurement_ms: int = 1000,
    model_version: str | None = None,
) -> list[dict[str, float]]:
    """Run ``perf_analyzer`` on ``model`` at each concurrency; rows of throughput and latency (ms).

    perf_analyzer repeats ``measurement_ms`` windows until three in a row agree within 50% (at
    most 10 windows); on a busy machine they may never agree: then this raises ``RuntimeError``
    with its message. ``model_version``: the version whose server-side statistics it reads.
    """
    check_loopback(url)
    if not 1 <= len(concurrencies) <= MAX_LEVELS or not all(
        1 <= c <= MAX_CONCURRENCY for c in concurrencies
    ):
        raise ValueError(f"give 1..{MAX_LEVELS} concurrency levels in 1..{MAX_CONCURRENCY}")
    if not 100 <= measurement_ms <= 10_000:
        raise ValueError(f"measurement_ms must be in 100..10000, got {measurement_ms}")
    exe, env = find_perf_analyzer()
    rows = []
    for c in concurrencies:
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"perf_{os.getpid()}_{model}_{c}.csv"
        options = {"-m": model, "-u": url, "-i": protocol, "--concurrency-range": f"{c}:{c}"}
        options |= {"--measurement-interval": measurement_ms, "--max-trials": 10}
        options |= {"--stability-percentage": 50, "-f": out, "-x": model_version}
        cmd = [str(exe), *(str(v) for kv in options.items() if kv[1] is not None for v in kv)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or not out.exists():
            last = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            raise RuntimeError(
                f"perf_analyzer failed (exit {proc.returncode}): {' '.join(last[-2:])}"
            )
        for r in csv.DictReader(io.StringIO(out.read_text())):
            rows.append(
                {
                    "concurrency": int(r["Concurrency"]),
                    "throughput": float(r["Inferences/Second"]),
                    "p50_ms": float(r["p50 latency"]) / 1e3,
                    "p99_ms": float(r["p99 latency"]) / 1e3,
                    "server_queue_ms": float(r["Server Queue"]) / 1e3,
                    "server_compute_ms": float(r["Server Compute Infer"]) / 1e3,
                }
            )
        out.unlink()
    return rows


@dataclass
class CountedRun:
    """A fixed number of requests: how many were sent, answered and failed, and the answers."""

    sent: int
    answered: int
    failed: int
    outputs: list[np.ndarray]
    first_errors: list[str]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """One table row."""
        return {k: getattr(self, k) for k in ("sent", "answered", "failed", "seconds")}


def counted_run(
    url: str,
    model: str,
    inputs: Mapping[str, np.ndarray],
    output: str,
    *,
    total: int,
    concurrency: int,
    protocol: str = "http",
    at: tuple[int, Any] | None = None,
) -> CountedRun:
    """Send exactly ``total`` requests from ``concurrency`` clients, each tried once; count answers
    and failures. ``at=(n, action)`` calls ``action()`` once, from a load thread, when ``n``
    requests have been answered (e.g. kill a server mid-load). At most 10,000 requests, 120 s."""
    check_loopback(url)
    if not 1 <= total <= 10_000 or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"need 1 <= total <= 10000 and 1 <= concurrency <= {MAX_CONCURRENCY}")
    module, first = connect(protocol, url)
    clients = [first] + [connect(protocol, url)[1] for _ in range(concurrency - 1)]
    reqs, outs = request_tensors(module, inputs, output)
    run = CountedRun(sent=0, answered=0, failed=0, outputs=[], first_errors=[], seconds=0.0)
    actions, lock = [at] if at else [], threading.Lock()
    deadline = time.perf_counter() + 120.0

    def worker(client: Any) -> None:
        while time.perf_counter() < deadline:
            with lock:
                if run.sent >= total:
                    return
                run.sent += 1
            try:
                result = client.infer(model, reqs, outputs=outs).as_numpy(output)
            except Exception as exc:  # counted and reported
                with lock:
                    run.failed += 1
                    if len(run.first_errors) < 3:
                        run.first_errors.append(repr(exc)[:300])
                continue
            with lock:
                run.answered += 1
                run.outputs.append(result)
                due = actions.pop() if actions and run.answered >= actions[0][0] else None
            if due:
                due[1]()

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(deadline - time.perf_counter(), 0) + 30)
    for client in clients:
        client.close()
    run.seconds = time.perf_counter() - start
    return run
