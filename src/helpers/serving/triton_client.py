"""Talk to a Triton server on this machine: raw HTTP (like ``curl``), KServe v2 bodies, the clients.

Every function takes a ``127.0.0.1:PORT`` address and refuses any other host: these helpers talk
to a server you started, not someone else's. Bodies may be deliberately wrong, to test failures.
"""

from __future__ import annotations

import http.client
import importlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core.processes import LOOPBACK

__all__ = [
    "LOOPBACK",
    "TritonRequestError",
    "check_loopback",
    "connect",
    "http_request",
    "infer",
    "infer_binary_body",
    "infer_json_body",
    "model_stats",
    "request_tensors",
    "scrape_metrics",
]


class TritonRequestError(RuntimeError):
    """An HTTP request the server answered with an error status (``status`` and ``message`` attributes)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


@dataclass
class HttpResponse:
    """A raw HTTP answer: status, reason, protocol version, headers and body."""

    status: int
    reason: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def status_line(self) -> str:
        """E.g. ``HTTP/1.1 200 OK``."""
        return f"{self.version} {self.status} {self.reason}"

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body.decode("utf-8"))

    def error_message(self) -> str:
        """The ``error`` field Triton puts in failed answers (or the raw body)."""
        try:
            return str(self.json().get("error", self.body.decode("utf-8", "replace")))
        except (ValueError, AttributeError):
            return self.body.decode("utf-8", "replace")


def check_loopback(url: str) -> tuple[str, int]:
    """``(host, port)`` of a ``127.0.0.1:PORT`` or ``localhost:PORT`` address, else ``ValueError``
    (IPv6 loopback too: the servers these helpers start listen on 127.0.0.1 only)."""
    if "://" in url:
        raise ValueError(f"{url!r}: give HOST:PORT without a scheme, e.g. 127.0.0.1:8000")
    host, _, port = url.rpartition(":")
    if host.startswith("[") or ":" in host:
        raise ValueError(
            f"{url!r}: IPv6 addresses are not supported; the course's servers listen on IPv4 "
            "loopback only: use 127.0.0.1:PORT"
        )
    if host not in (LOOPBACK, "localhost") or not (port.isascii() and port.isdigit()):
        raise ValueError(
            f"{url!r}: these helpers only talk to a server on this machine (127.0.0.1:PORT)"
        )
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"{url!r}: port {int(port)} is not in 1..65535 (use 127.0.0.1:PORT)")
    return host, int(port)


def http_request(
    url: str,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> HttpResponse:
    """One raw HTTP request to ``url`` (``127.0.0.1:PORT``), like ``curl -i``; never raises on 4xx/5xx."""
    host, port = check_loopback(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = body.encode("utf-8") if isinstance(body, str) else body
        hdrs = dict(headers or {})
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        version = "HTTP/1.1" if resp.version == 11 else "HTTP/1.0"
        return HttpResponse(resp.status, resp.reason, version, dict(resp.getheaders()), resp.read())
    finally:
        conn.close()


def _datatype(name: str, array: np.ndarray) -> str:
    """The Triton datatype name of ``array`` (the KServe v2 ``datatype`` field)."""
    from tritonclient.utils import np_to_triton_dtype

    datatype = np_to_triton_dtype(array.dtype)
    if datatype is None:
        raise ValueError(f"input {name}: no Triton datatype for NumPy dtype {array.dtype}")
    return datatype


def _input(name: str, array: Any, datatype: str | None = None, **rest: Any) -> dict[str, Any]:
    """One KServe v2 input: name, shape, datatype (the array's own unless given), then ``rest``."""
    shape, datatype = list(np.shape(array)), datatype or _datatype(name, np.asarray(array))
    return {"name": name, "shape": shape, "datatype": datatype, **rest}


def infer_json_body(inputs: Mapping[str, np.ndarray], datatype: str | None = None) -> str:
    """A KServe v2 JSON inference request (``datatype`` overrides the arrays' own, to test errors)."""
    parts = [_input(n, a, datatype, data=np.ravel(a).tolist()) for n, a in inputs.items()]
    return json.dumps({"inputs": parts})


def infer_binary_body(inputs: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """``(body, headers)`` of a KServe v2 request with tensors as raw bytes after the JSON header
    (Triton's extension): far smaller and faster than JSON for images."""
    arrays = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
    parts = [_input(n, a, parameters={"binary_data_size": a.nbytes}) for n, a in arrays.items()]
    header = json.dumps({"inputs": parts}).encode("utf-8")
    return header + b"".join(a.tobytes() for a in arrays.values()), {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }


def request_tensors(
    client_module: Any, inputs: Mapping[str, np.ndarray], output: str
) -> tuple[list[Any], list[Any]]:
    """The ``InferInput`` list and the requested output for one ``client.infer`` call of
    ``client_module``: ``tritonclient.http`` (raw bytes, Triton's binary extension) or ``.grpc``."""
    reqs = []
    for name, array in inputs.items():
        array = np.ascontiguousarray(array)
        reqs.append(client_module.InferInput(name, list(array.shape), _datatype(name, array)))
        reqs[-1].set_data_from_numpy(array)
    return reqs, [client_module.InferRequestedOutput(output)]


def connect(protocol: str, url: str) -> tuple[Any, Any]:
    """``(tritonclient.<protocol> module, a client of url)`` for ``protocol`` "http" or "grpc"."""
    if protocol not in ("http", "grpc"):
        raise ValueError(f"protocol is 'http' or 'grpc', got {protocol!r}")
    module = importlib.import_module(f"tritonclient.{protocol}")
    return module, module.InferenceServerClient(url=url)


def infer(
    protocol: str, url: str, model: str, inputs: Mapping[str, np.ndarray], output: str
) -> np.ndarray:
    """One inference with ``tritonclient.<protocol>`` ("http": binary tensors, or "grpc");
    returns ``output`` as NumPy."""
    module, client = connect(protocol, url)
    try:
        reqs, outputs = request_tensors(module, inputs, output)
        return client.infer(model, reqs, outputs=outputs).as_numpy(output)
    finally:
        client.close()


def model_stats(
    url: str,
    model: str,
    *,
    min_requests: int = 0,
    timeout_s: float = 10.0,
) -> dict[str, float]:
    """Server-side counters of ``model`` since it loaded.

    ``requests`` answered, ``inferences`` (images: a batch-4 request counts 4), ``executions``,
    ``avg_batch`` (inferences per execution), mean ``queue_ms`` and ``compute_ms`` per request,
    ``batch_sizes`` ({batch size: executions}). Triton adds an execution's whole compute time to
    every request it carried (``compute_ms / avg_batch`` is the time per image), and counts a
    request just after answering it: ``min_requests`` reads again, for at most ``timeout_s``,
    until that many are counted.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        resp = http_request(url, "GET", f"/v2/models/{model}/stats", timeout=10)
        if resp.status != 200:
            raise TritonRequestError(resp.status, resp.error_message())
        stats = resp.json()["model_stats"][0]
        counted = int(stats["inference_stats"]["success"]["count"])
        if counted >= min_requests or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    st, n = stats["inference_stats"], counted
    inferences, executions = int(stats["inference_count"]), int(stats["execution_count"])
    return {
        "requests": n,
        "inferences": inferences,
        "executions": executions,
        "avg_batch": inferences / max(executions, 1),
        "queue_ms": int(st["queue"]["ns"]) / max(n, 1) / 1e6,
        "compute_ms": int(st["compute_infer"]["ns"]) / max(n, 1) / 1e6,
        "batch_sizes": {
            int(b["batch_size"]): int(b["compute_infer"]["count"])
            for b in stats.get("batch_stats", [])
        },
    }


def scrape_metrics(url: str, model: str | None = None) -> dict[str, float]:
    """Triton's Prometheus metrics at ``url`` (its ``--metrics-port``), summed per metric name:
    cumulative counters since load. With ``model``, only samples labelled ``model="<model>"``
    (all versions together)."""
    resp = http_request(url, "GET", "/metrics", timeout=10)
    if resp.status != 200:
        raise TritonRequestError(resp.status, resp.body.decode("utf-8", "replace")[:200])
    out: dict[str, float] = {}
    for line in resp.body.decode("utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        if model is not None and f'model="{model}"' not in labels:
            continue
        out[name] = out.get(name, 0.0) + float(value)
    return out
