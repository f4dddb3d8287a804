"""nginx in front of several Triton servers, as production runs it: an allow-list, limits, failover.

Clients never talk to Triton's own ports: Triton 2.51 (in ``nvidia-pytriton`` 0.7.0) answers every
API it has (model control, shared memory, tracing, logging, statistics) on the port that serves
inference, and reads a request body of any size (``--http-max-input-size`` came in 2.59): one
well-formed JSON request of about 250 MB can kill it. :func:`probe_admin` sends every
administrative request Triton knows through a front and reports which got through.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from helpers.core.processes import ManagedProcess
from helpers.serving.nginx_config import NginxConfigError, audit_config, front_config
from helpers.serving.triton_client import http_request
from helpers.serving.triton_server import free_ports

__all__ = [
    "NginxFront",
    "NginxNotFoundError",
    "find_nginx",
    "probe_admin",
]


_REGION = '{"key": "/r", "offset": 0, "byte_size": 64}'  # a shared-memory region to register
# Every administrative request of Triton's HTTP API (KServe v2 and Triton's extensions):
# (what, method, path, body). {m} is a served model's name.
ADMIN_HTTP: tuple[tuple[str, str, str, str | None], ...] = (
    ("server metadata", "GET", "/v2", None),
    ("repository index", "POST", "/v2/repository/index", "{}"),
    ("load a model", "POST", "/v2/repository/models/{m}/load", "{}"),
    ("unload a model", "POST", "/v2/repository/models/{m}/unload", "{}"),
    ("model configuration", "GET", "/v2/models/{m}/config", None),
    ("statistics, all models", "GET", "/v2/models/stats", None),
    ("statistics, one model", "GET", "/v2/models/{m}/stats", None),
    ("system shared memory", "GET", "/v2/systemsharedmemory/status", None),
    ("register shared memory", "POST", "/v2/systemsharedmemory/region/r/register", _REGION),
    ("CUDA shared memory", "GET", "/v2/cudasharedmemory/status", None),
    ("trace settings", "POST", "/v2/trace/setting", '{"trace_level": ["TIMESTAMPS"]}'),
    ("model trace settings", "GET", "/v2/models/{m}/trace/setting", None),
    ("logging settings", "POST", "/v2/logging", '{"log_verbose_level": 1}'),
    ("generate", "POST", "/v2/models/{m}/generate", "{}"),
    ("a path trick", "POST", "/v2/models/{m}/infer/../../../repository/index", "{}"),
    ("a doubled slash", "POST", "//v2/repository/index", "{}"),
)
# The same through gRPC: (what, tritonclient.grpc method, its arguments).
ADMIN_GRPC: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("server metadata", "get_server_metadata", ()),
    ("repository index", "get_model_repository_index", ()),
    ("load a model", "load_model", ("{m}",)),
    ("unload a model", "unload_model", ("{m}",)),
    ("model configuration", "get_model_config", ("{m}",)),
    ("statistics", "get_inference_statistics", ()),
    ("system shared memory", "get_system_shared_memory_status", ()),
    ("register shared memory", "register_system_shared_memory", ("r", "/r", 64)),
    ("CUDA shared memory", "get_cuda_shared_memory_status", ()),
    ("trace settings", "get_trace_settings", ()),
    ("logging settings", "update_log_settings", ({"log_verbose_level": 1},)),
)


class NginxNotFoundError(RuntimeError):
    """nginx is not installed (Debian/Ubuntu: ``apt-get install nginx``)."""


def find_nginx() -> Path:
    """The ``nginx`` binary (on PATH or in ``/usr/sbin``), else :class:`NginxNotFoundError`."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found is None:
        raise NginxNotFoundError(
            "nginx is not installed: apt-get install nginx (tools/install_system_deps.sh does it)"
        )
    return Path(found)


class NginxFront(ManagedProcess):
    """nginx on free loopback ports in front of the given Triton servers (:func:`front_config`);
    ``allow_list=False`` runs the old, open front, unaudited, to show the allow-list test failing."""

    def __init__(
        self,
        http_upstreams: Sequence[str],
        grpc_upstreams: Sequence[str],
        *,
        models: Sequence[str],
        max_body_bytes: int,
        rate_per_s: int = 5000,
        burst: int = 200,
        fail_timeout_s: int = 10,
        allow_list: bool = True,
    ) -> None:
        self.upstreams = (list(http_upstreams), list(grpc_upstreams))
        self.settings = dict(models=list(models), max_body_bytes=max_body_bytes, burst=burst)
        self.settings |= dict(rate_per_s=rate_per_s, fail_timeout_s=fail_timeout_s)
        self.settings |= dict(allow_list=allow_list)
        super().__init__()
        self.config_text = ""
        # refuse bad settings now, not at start()
        front_config(*self.upstreams, http_port=1, grpc_port=2, prefix="/x", **self.settings)

    def kept_files(self) -> tuple[str, ...]:
        """The access and error logs outlive :meth:`stop`."""
        return ("access.log", "error.log")

    def access_log(self) -> list[str]:
        """One line per request: status, method, path, the upstream(s) tried and their statuses."""
        return self.kept("access.log").splitlines()

    def wait_for_log(self, since: int, timeout_s: float = 10.0) -> list[str]:
        """The access-log lines after the first ``since``, waiting (``timeout_s``) for one: nginx
        logs a request once done with its connection (a 413 only after closing it)."""
        deadline = time.monotonic() + timeout_s
        while len(lines := self.access_log()) <= since and time.monotonic() < deadline:
            time.sleep(0.05)
        return lines[since:]

    def start(self) -> NginxFront:
        """Write the config, check it (:func:`audit_config`, ``nginx -t``), start nginx, wait for it."""
        if self.is_alive():
            raise RuntimeError(f"front already running (pid {self.proc.pid})")
        nginx = find_nginx()
        workdir = self.make_workdir("nginx-")
        self.http_port, self.grpc_port = free_ports(2)
        self.config_text = front_config(
            *self.upstreams,
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            prefix=workdir,
            # run as root (a container, CI): keep the workers as root so that they can write the
            # scratch folder; as anybody else nginx ignores `user` and stays that user
            user="root" if os.geteuid() == 0 else None,
            **self.settings,
        )
        conf = workdir / "nginx.conf"
        conf.write_text(self.config_text)
        cmd = [str(nginx), "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")]
        try:
            missing = audit_config(self.config_text) if self.settings["allow_list"] else []
            if missing:
                raise NginxConfigError(f"the front config lacks: {'; '.join(missing)}")
            check = subprocess.run([*cmd, "-t"], capture_output=True, text=True, timeout=30)
            if check.returncode != 0:
                raise NginxConfigError(f"nginx -t refused {conf}:\n{check.stderr.strip()}")
        except BaseException:
            self.stop()
            raise
        self.launch([*cmd, "-g", "daemon off;"], output=workdir / "stderr.log")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.kept("error.log")
                self.stop()
                raise NginxConfigError(f"nginx exited with code {self.proc.returncode}:\n{log}")
            try:
                if http_request(self.http_url, "GET", "/front/health", timeout=2).status == 200:
                    return self
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError("nginx did not answer within 20 s")

    def __repr__(self) -> str:
        return self.describe(f"{len(self.upstreams[0])} servers")


def probe_admin(front: NginxFront, model: str) -> list[dict[str, Any]]:
    """Send every request of :data:`ADMIN_HTTP` and :data:`ADMIN_GRPC` through ``front``: one row
    each with protocol, what, status (HTTP status or gRPC status name) and ``reached``, whether
    the front's access log shows it passed to a server."""
    import tritonclient.grpc as grpcclient

    def send(protocol: str, what: str, request: Callable[[], Any]) -> dict[str, Any]:
        start = len(front.access_log())
        try:
            answer = request()
            status = answer.status if protocol == "HTTP" else "OK"
        except grpcclient.InferenceServerException as exc:
            status = str(exc.status()).replace("StatusCode.", "")
        line = (front.wait_for_log(since=start) or ["-"])[-1]
        reached = re.search(r"upstream=[^-\s]", line) is not None  # passed to a server
        return {"protocol": protocol, "request": what, "status": status, "reached": reached}

    rows = []
    for what, method, path, body in ADMIN_HTTP:
        request = partial(http_request, front.http_url, method, path.format(m=model), body)
        rows.append(send("HTTP", what, partial(request, timeout=10)))
    client = grpcclient.InferenceServerClient(url=front.grpc_url)
    try:
        for what, name, args in ADMIN_GRPC:
            args = tuple(a.format(m=model) if isinstance(a, str) else a for a in args)
            rows.append(send("gRPC", what, partial(getattr(client, name), *args)))
    finally:
        client.close()
    return rows
