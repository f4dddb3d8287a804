"""Load a Triton server you own with a bounded number of concurrent clients, and measure it.

:func:`load_sweep` is a small closed-loop load generator: ``concurrency`` threads, each with its
own client, send one request, wait for the answer, send the next, for a fixed time. It reports
requests per second and the latency distribution per concurrency level, like Triton's
``perf_analyzer`` (wrapped by :func:`perf_analyzer` where its libraries are present). Both refuse
anything but a loopback address and bound the number of levels, clients and seconds: this is a
measurement of your own server, not a load test of someone else's.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helpers.measure.measurement import percentile
from helpers.serving.triton_client import check_loopback, request_tensors

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_LEVELS",
    "MAX_SECONDS_PER_LEVEL",
    "CountedRun",
    "LoadPoint",
    "closed_loop",
    "counted_run",
    "find_perf_analyzer",
    "load_sweep",
    "perf_analyzer",
    "plot_load_sweep",
]

MAX_CONCURRENCY = 64
MAX_LEVELS = 12
MAX_SECONDS_PER_LEVEL = 30.0


@dataclass
class LoadPoint:
    """What one concurrency level measured: latencies of the requests completed in the window."""

    concurrency: int
    latencies_s: list[float]
    duration_s: float
    errors: int = 0
    label: str = ""

    @property
    def throughput(self) -> float:
        """Completed requests per second."""
        return len(self.latencies_s) / self.duration_s

    @property
    def p50(self) -> float:
        """Median latency (s)."""
        return statistics.median(self.latencies_s)

    @property
    def p99(self) -> float:
        """99th-percentile latency (s), linearly interpolated between the nearest ranks."""
        return percentile(sorted(self.latencies_s), 99)

    def as_dict(self) -> dict[str, Any]:
        """One table row: label, concurrency, requests, errors, throughput, p50 and p99 in ms."""
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "requests": len(self.latencies_s),
            "errors": self.errors,
            "throughput": self.throughput,
            "p50_ms": self.p50 * 1e3,
            "p99_ms": self.p99 * 1e3,
        }


def _client(
    protocol: str, url: str, model: str, inputs: Mapping[str, np.ndarray], output: str
) -> tuple[Any, Any]:
    """A client and a zero-argument function sending one inference with it."""
    if protocol == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod
    client = mod.InferenceServerClient(url=url)
    reqs, out = request_tensors(mod, inputs, output)
    return client, lambda: client.infer(model, reqs, outputs=out)


def closed_loop(
    url: str,
    model: str,
    inputs: Mapping[str, np.ndarray],
    output: str,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.3,
    protocol: str = "grpc",
    label: str = "",
) -> LoadPoint:
    """``concurrency`` clients sending back-to-back requests for ``warmup_s + duration_s`` seconds."""
    check_loopback(url)
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol must be 'grpc' or 'http', got {protocol!r}")
    if not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be an int in 1..{MAX_CONCURRENCY}, got {concurrency!r}")
    if not 0 < duration_s <= MAX_SECONDS_PER_LEVEL:
        raise ValueError(f"duration_s must be in (0, {MAX_SECONDS_PER_LEVEL}], got {duration_s}")
    inputs = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
    clients = [_client(protocol, url, model, inputs, output) for _ in range(concurrency)]
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    first_error: list[str] = []
    barrier = threading.Barrier(concurrency + 1)
    window: dict[str, float] = {}

    def worker(i: int) -> None:
        send = clients[i][1]
        barrier.wait()
        while True:
            t0 = time.perf_counter()
            if t0 >= window["end"]:
                return
            try:
                send()
            except Exception as exc:  # noqa: BLE001 - counted and reported, the load keeps going
                errors[i] += 1
                if not first_error:
                    first_error.append(repr(exc))
                continue
            t1 = time.perf_counter()
            if t0 >= window["start"] and t1 <= window["end"]:
                latencies[i].append(t1 - t0)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    window["start"], window["end"] = now + warmup_s, now + warmup_s + duration_s
    barrier.wait()
    for t in threads:
        t.join(timeout=duration_s + warmup_s + 60)
    for client, _ in clients:
        client.close()
    flat = [x for lat in latencies for x in lat]
    if not flat:
        raise RuntimeError(
            f"no request to {model} completed in {duration_s} s at concurrency {concurrency}"
            + (f"; first error: {first_error[0]}" if first_error else "")
        )
    return LoadPoint(concurrency, flat, duration_s, errors=sum(errors), label=label)


def load_sweep(
    url: str,
    model: str,
    inputs: Mapping[str, np.ndarray],
    output: str,
    concurrencies: Sequence[int],
    *,
    duration_s: float = 1.0,
    warmup_s: float = 0.3,
    protocol: str = "grpc",
    label: str = "",
    progress: bool = True,
) -> list[LoadPoint]:
    """:func:`closed_loop` at each concurrency (at most 12 levels, 64 clients, 30 s per level)."""
    if not concurrencies or len(concurrencies) > MAX_LEVELS:
        raise ValueError(f"give 1..{MAX_LEVELS} concurrency levels, got {len(concurrencies)}")
    levels: Any = concurrencies
    if progress:
        from tqdm.auto import tqdm

        levels = tqdm(concurrencies, desc=label or model, leave=False)
    return [
        closed_loop(
            url,
            model,
            inputs,
            output,
            concurrency=c,
            duration_s=duration_s,
            warmup_s=warmup_s,
            protocol=protocol,
            label=label or model,
        )
        for c in levels
    ]


# --------------------------------------------------------------------------------------------- perf_analyzer


def _cudart_dir() -> Path | None:
    """The folder of ``libcudart.so.12`` from the CUDA 12 pip packages (``nvidia-cuda-runtime-cu12``)."""
    try:
        import nvidia.cuda_runtime as cr  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in getattr(cr, "__path__", []):
        lib = Path(base) / "lib"
        if any(lib.glob("libcudart.so.12*")):
            return lib
    return None


def find_perf_analyzer() -> tuple[Path, dict[str, str]]:
    """``perf_analyzer`` (installed by ``tritonclient``) and the environment it runs in.

    Raises ``FileNotFoundError`` saying what is missing: the binary, ``libcudart.so.12``
    (CUDA 12 pip packages) or ``libb64`` (Debian package ``libb64-0d``).
    """
    exe = Path(sys.executable).parent / "perf_analyzer"
    if not exe.exists():
        found = shutil.which("perf_analyzer")
        if found is None:
            raise FileNotFoundError(
                "perf_analyzer not found (it comes with tritonclient 2.50 on Linux x86-64)"
            )
        exe = Path(found)
    env = dict(os.environ)
    cudart = _cudart_dir()
    if cudart is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(cudart), env.get("LD_LIBRARY_PATH")])
        )
    probe = subprocess.run(
        [str(exe), "--version"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if "error while loading shared libraries" in probe.stderr:
        missing = (
            probe.stderr.split("error while loading shared libraries:")[1].split(":")[0].strip()
        )
        hint = {
            "libb64.so.0d": "install the Debian package libb64-0d (tools/install_system_deps.sh)",
            "libcudart.so.12": "install nvidia-cuda-runtime-cu12 (comes with torch's CUDA 12 build)",
        }
        raise FileNotFoundError(
            f"perf_analyzer cannot start: {missing} missing; {hint.get(missing, 'install it')}"
        )
    return exe, env


def perf_analyzer(
    url: str,
    model: str,
    concurrencies: Sequence[int],
    *,
    protocol: str = "grpc",
    measurement_ms: int = 1000,
    stability_percent: int = 50,
    max_trials: int = 10,
    timeout_s: float = 120.0,
    model_version: str | None = None,
) -> list[dict[str, float]]:
    """Run ``perf_analyzer`` on ``model`` at each concurrency; rows of throughput and latency (ms).

    perf_analyzer repeats ``measurement_ms`` windows until three in a row agree within
    ``stability_percent`` (at most ``max_trials`` windows); on a busy machine it may never agree, and
    then this raises ``RuntimeError`` with its message.
    """
    check_loopback(url)
    if (
        not concurrencies
        or len(concurrencies) > MAX_LEVELS
        or not all(1 <= c <= MAX_CONCURRENCY for c in concurrencies)
    ):
        raise ValueError(f"give 1..{MAX_LEVELS} concurrency levels in 1..{MAX_CONCURRENCY}")
    if not 100 <= measurement_ms <= 10_000:
        raise ValueError(f"measurement_ms must be in 100..10000, got {measurement_ms}")
    exe, env = find_perf_analyzer()
    rows = []
    for c in concurrencies:
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"perf_{os.getpid()}_{model}_{c}.csv"
        cmd = [
            str(exe),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "--concurrency-range",
            f"{c}:{c}",
            "--measurement-interval",
            str(measurement_ms),
            "--max-trials",
            str(max_trials),
            "--stability-percentage",
            str(stability_percent),
            "-f",
            str(out),
        ]
        if model_version is not None:  # -x: the version whose server-side statistics are read
            cmd += ["-x", str(model_version)]
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if proc.returncode != 0 or not out.exists():
            last = [
                line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()
            ][-2:]
            raise RuntimeError(f"perf_analyzer failed (exit {proc.returncode}): {' '.join(last)}")
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


def plot_load_sweep(results: Mapping[str, Sequence[LoadPoint]], title: str = "") -> Any:
    """Two panels over client concurrency: throughput, and p50 (solid) / p99 (dashed) latency."""
    if not results or any(not pts for pts in results.values()):
        raise ValueError(
            "nothing to plot: give {label: [LoadPoint, ...]} with at least one point each"
        )
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    for i, (label, pts) in enumerate(results.items()):
        c = [p.concurrency for p in pts]
        left.plot(c, [p.throughput for p in pts], "o-", color=f"C{i}", label=label)
        right.plot(c, [p.p50 * 1e3 for p in pts], "o-", color=f"C{i}")
        right.plot(c, [p.p99 * 1e3 for p in pts], "s--", color=f"C{i}", alpha=0.6)
    ticks = sorted({p.concurrency for pts in results.values() for p in pts})
    for ax, ylabel in ((left, "requests / s"), (right, "latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    left.set_title("throughput")
    right.set_title("latency per request: p50 (solid), p99 (dashed)")
    left.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


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
        return {
            "sent": self.sent,
            "answered": self.answered,
            "failed": self.failed,
            "seconds": self.seconds,
        }


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
    timeout_s: float = 120.0,
) -> CountedRun:
    """Send exactly ``total`` requests from ``concurrency`` clients; count answers and failures.

    ``at=(n, action)`` calls ``action()`` once, from the load's own thread pool, when ``n``
    requests have been answered (e.g. kill a server mid-load). Bounded: at most 10,000 requests,
    64 clients and ``timeout_s`` seconds; every request is tried once, never retried here.
    """
    check_loopback(url)
    if not 1 <= total <= 10_000 or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"need 1 <= total <= 10000 and 1 <= concurrency <= {MAX_CONCURRENCY}")
    inputs = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
    clients = [_client(protocol, url, model, inputs, output) for _ in range(concurrency)]
    lock = threading.Lock()
    state = {"next": 0, "answered": 0, "failed": 0, "fired": at is None}
    outputs: list[np.ndarray] = []
    errors: list[str] = []
    deadline = time.perf_counter() + timeout_s

    def worker(i: int) -> None:
        send = clients[i][1]
        while time.perf_counter() < deadline:
            with lock:
                if state["next"] >= total:
                    return
                state["next"] += 1
            try:
                result = send().as_numpy(output)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    state["failed"] += 1
                    if len(errors) < 3:
                        errors.append(repr(exc)[:300])
                continue
            fire = False
            with lock:
                state["answered"] += 1
                outputs.append(result)
                if not state["fired"] and state["answered"] >= at[0]:
                    state["fired"] = fire = True
            if fire:
                at[1]()

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(deadline - time.perf_counter(), 0) + 30)
    for client, _ in clients:
        client.close()
    return CountedRun(
        sent=state["next"],
        answered=state["answered"],
        failed=state["failed"],
        outputs=outputs,
        first_errors=errors,
        seconds=time.perf_counter() - start,
    )
