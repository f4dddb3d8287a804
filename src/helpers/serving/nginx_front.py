"""nginx in front of several Triton servers, as production runs it: limits, retries, failover.

Triton's HTTP port is never what clients talk to. Triton 2.51 (the server inside
``nvidia-pytriton`` 0.7.0) has no limit on the size of a request body: one JSON request of about
250 MB kills it with signal 11, and every request after that fails. A reverse proxy in front refuses
what no model could accept before any server reads it, limits how fast one client may send, and
spreads the requests over several servers, retrying one that failed on another.

:func:`front_config` writes that ``nginx.conf`` from a few numbers (the servers' ports, the largest
request the model accepts, the rate limit); :func:`audit_config` checks that every protection is
in it; :class:`NginxFront` checks it with ``nginx -t`` and runs nginx (Debian's package) as an
ordinary process on free loopback ports, not as the system service::

    with NginxFront([a.http_url, b.http_url], [a.grpc_url, b.grpc_url], max_body_bytes=limit) as front:
        triton_client.infer_http(front.http_url, "embedder", {"image": x}, "embedding")

It is a :class:`~helpers.core.processes.ManagedProcess`, stopped like the Triton server: context manager, ``atexit``
hook, finalizer, and a watchdog process that stops its process group if this Python process dies.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from helpers.core.processes import ManagedProcess
from helpers.serving.triton_client import LOOPBACK, check_loopback, http_request
from helpers.serving.triton_server import free_port

__all__ = [
    "JSON_BYTES_PER_VALUE",
    "REQUIRED",
    "NginxConfigError",
    "NginxFront",
    "NginxNotFoundError",
    "audit_config",
    "body_limit_bytes",
    "find_nginx",
    "front_config",
]

# The longest float32 in KServe v2 JSON: "-1.2345678e-05, " (Python's repr of a float32 widened to a
# float64 can take up to 24 characters, plus ", "). A limit sized with it admits any JSON request of
# max_batch_size images; binary requests (4 bytes per value) fit with room to spare.
JSON_BYTES_PER_VALUE = 26
_HEADROOM = 64 * 1024  # the JSON keys, names and shapes around the data

# What a front must contain, each with why: audit_config() refuses a config that lacks any of them.
REQUIRED: dict[str, str] = {
    r"client_max_body_size \d+;": "a body limit (Triton 2.51 crashes on huge bodies)",
    r"limit_req_zone \S+ zone=infer:\S+ rate=\d+r/s;": "a rate-limit zone",
    r"limit_req zone=infer burst=\d+ nodelay;": "the rate limit applied to inference",
    r"limit_req_status 429;": "429 Too Many Requests (not nginx's default 503) when limited",
    r"server \S+ max_fails=\d+ fail_timeout=\d+s;": "passive health checks on the upstreams",
    r"proxy_next_upstream error timeout http_502 http_503 non_idempotent;": (
        "retry a failed HTTP request (inference POSTs too) on the other server"
    ),
    r"grpc_next_upstream error timeout http_502 http_503 non_idempotent;": "the same for gRPC",
    r"listen \S+ http2;": "an HTTP/2 listener for gRPC",
    r"grpc_pass grpc://triton_grpc;": "gRPC proxied to the gRPC upstream",
    r"location /v2/repository \{ return 403; \}": "model control not exposed to clients",
}


class NginxNotFoundError(RuntimeError):
    """nginx is not installed (Debian/Ubuntu: ``apt-get install nginx``)."""


class NginxConfigError(ValueError):
    """The generated configuration misses a protection or ``nginx -t`` refuses it."""


def find_nginx() -> Path:
    """The ``nginx`` binary (on PATH or in ``/usr/sbin``), else :class:`NginxNotFoundError`."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )
    if found is None:
        raise NginxNotFoundError(
            "nginx is not installed: apt-get install nginx (tools/install_system_deps.sh does it)"
        )
    return Path(found)


def body_limit_bytes(max_batch_size: int, item_shape: Sequence[int]) -> int:
    """The largest request body a model accepts: ``max_batch_size`` items as KServe v2 JSON."""
    if max_batch_size < 1 or not item_shape or any(d < 1 for d in item_shape):
        raise ValueError(
            f"need max_batch_size >= 1 and positive dims, got {max_batch_size}, {item_shape}"
        )
    return max_batch_size * math.prod(item_shape) * JSON_BYTES_PER_VALUE + _HEADROOM


def _servers(urls: Sequence[str], max_fails: int, fail_timeout_s: int) -> str:
    lines = []
    for url in urls:
        check_loopback(url)
        lines.append(f"        server {url} max_fails={max_fails} fail_timeout={fail_timeout_s}s;")
    return "\n".join(lines)


def front_config(
    http_upstreams: Sequence[str],
    grpc_upstreams: Sequence[str],
    *,
    http_port: int,
    grpc_port: int,
    max_body_bytes: int,
    rate_per_s: int,
    burst: int,
    prefix: str | Path,
    max_fails: int = 1,
    fail_timeout_s: int = 10,
    user: str | None = None,
) -> str:
    """The ``nginx.conf`` of a front for Triton servers (see the module docstring)."""
    if not http_upstreams or not grpc_upstreams:
        raise ValueError("give at least one HTTP and one gRPC upstream (127.0.0.1:PORT)")
    if max_body_bytes < 1 or rate_per_s < 1 or burst < 0 or max_fails < 1 or fail_timeout_s < 1:
        raise ValueError("max_body_bytes, rate_per_s, max_fails, fail_timeout_s must be positive")
    p = Path(prefix)
    user_line = f"user {user};\n" if user else ""
    return f"""# nginx.conf written by helpers.serving.nginx_front: a front for Triton servers
{user_line}worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 1024; }}

http {{
    log_format front '$status $request_method $uri upstream=$upstream_addr '
                     'upstream_status=$upstream_status bytes=$request_length';
    access_log {p}/access.log front;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;

    # 1. No request larger than the model can take: max_batch_size images as JSON. nginx answers
    #    413 from the Content-Length header, before reading the body; no server ever sees it.
    client_max_body_size {max_body_bytes};
    client_body_buffer_size {max_body_bytes};  # a whole request in memory: retried as is

    # 2. At most {rate_per_s} inference requests per second per client address, bursts of {burst}.
    limit_req_zone $binary_remote_addr zone=infer:1m rate={rate_per_s}r/s;
    limit_req_status 429;

    # 3. Two servers, one model repository. A server that fails max_fails times is left out for
    #    fail_timeout (passive health checks: real requests are the probes).
    upstream triton_http {{
{_servers(http_upstreams, max_fails, fail_timeout_s)}
        keepalive 32;
    }}
    upstream triton_grpc {{
{_servers(grpc_upstreams, max_fails, fail_timeout_s)}
    }}

    server {{
        listen {LOOPBACK}:{http_port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_connect_timeout 2s;
        proxy_read_timeout 60s;
        # 4. A request that failed on one server is sent to the other. Inference is idempotent
        #    (same input, same output, no state changed), so POSTs may be retried too.
        proxy_next_upstream error timeout http_502 http_503 non_idempotent;
        proxy_next_upstream_tries 2;

        location = /front/health {{ return 200 "front up\\n"; }}
        location /v2/repository {{ return 403; }}
        location ~ ^/v2/models/[^/]+(/versions/[0-9]+)?/infer$ {{
            limit_req zone=infer burst={burst} nodelay;
            proxy_pass http://triton_http;
        }}
        location /v2 {{ proxy_pass http://triton_http; }}
        location / {{ return 404; }}
    }}

    server {{
        listen {LOOPBACK}:{grpc_port} http2;
        client_max_body_size {max_body_bytes};  # the gRPC message-size limit
        grpc_connect_timeout 2s;
        grpc_read_timeout 60s;
        grpc_next_upstream error timeout http_502 http_503 non_idempotent;
        grpc_next_upstream_tries 2;
        location /inference.GRPCInferenceService/RepositoryModelLoad {{ return 403; }}
        location /inference.GRPCInferenceService/RepositoryModelUnload {{ return 403; }}
        location /inference.GRPCInferenceService/ModelInfer {{
            limit_req zone=infer burst={burst} nodelay;
            grpc_pass grpc://triton_grpc;
        }}
        location / {{ grpc_pass grpc://triton_grpc; }}
    }}
}}
"""


def audit_config(text: str) -> list[str]:
    """What a front config lacks from :data:`REQUIRED` (empty when every protection is there)."""
    flat = re.sub(r"\s+", " ", text)
    return [why for pattern, why in REQUIRED.items() if not re.search(pattern, flat)]


def _nginx_test(nginx: Path, conf: Path, prefix: Path) -> str:
    """``nginx -t`` on ``conf``; returns its output, raises :class:`NginxConfigError` if refused."""
    proc = subprocess.run(
        [str(nginx), "-t", "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        raise NginxConfigError(f"nginx -t refused {conf}:\n{proc.stderr.strip()}")
    return proc.stderr.strip()


class NginxFront(ManagedProcess):
    """nginx on free loopback ports in front of the given Triton servers (see :func:`front_config`)."""

    def __init__(
        self,
        http_upstreams: Sequence[str],
        grpc_upstreams: Sequence[str],
        *,
        max_body_bytes: int,
        rate_per_s: int = 5000,
        burst: int = 200,
        max_fails: int = 1,
        fail_timeout_s: int = 10,
        startup_timeout: float = 20.0,
    ) -> None:
        self.http_upstreams = list(http_upstreams)
        self.grpc_upstreams = list(grpc_upstreams)
        self.settings = dict(
            max_body_bytes=int(max_body_bytes),
            rate_per_s=int(rate_per_s),
            burst=int(burst),
            max_fails=int(max_fails),
            fail_timeout_s=int(fail_timeout_s),
        )
        super().__init__()
        self.startup_timeout = float(startup_timeout)
        self.http_port = self.grpc_port = 0
        self.config_text = ""
        self.test_output = ""
        front_config(  # refuse bad settings now, not at start()
            self.http_upstreams,
            self.grpc_upstreams,
            http_port=1,
            grpc_port=2,
            prefix="/x",
            **self.settings,
        )

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` of the HTTP front (what ``tritonclient.http`` takes)."""
        return f"{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` of the gRPC front (HTTP/2, what ``tritonclient.grpc`` takes)."""
        return f"{LOOPBACK}:{self.grpc_port}"

    def kept_files(self) -> tuple[str, ...]:
        """The access and error logs outlive :meth:`stop`."""
        return ("access.log", "error.log")

    def access_log(self) -> list[str]:
        """One line per request: status, method, path, the upstream(s) tried and their statuses."""
        return self.kept("access.log").splitlines()

    def wait_for_log(self, since: int, timeout_s: float = 10.0) -> list[str]:
        """The access-log lines after the first ``since``, waiting until there is one.

        nginx writes a request's line when it has finished with the connection; a request refused
        from its headers (413) is logged only after nginx has closed that connection.
        """
        deadline = time.monotonic() + timeout_s
        while len(lines := self.access_log()) <= since and time.monotonic() < deadline:
            time.sleep(0.05)
        return lines[since:]

    def error_log(self) -> str:
        """nginx's error log (refused requests, upstreams that failed)."""
        return self.kept("error.log")

    def start(self) -> NginxFront:
        """Write the config, check it (:func:`audit_config`, ``nginx -t``), start nginx, wait for it."""
        if self.is_alive():
            raise RuntimeError(f"front already running (pid {self.proc.pid})")
        nginx = find_nginx()
        workdir = self.make_workdir("nginx-")
        self.http_port = free_port()
        self.grpc_port = free_port()
        while self.grpc_port == self.http_port:
            self.grpc_port = free_port()
        self.config_text = front_config(
            self.http_upstreams,
            self.grpc_upstreams,
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
        try:
            missing = audit_config(self.config_text)
            if missing:
                raise NginxConfigError(f"the front config lacks: {'; '.join(missing)}")
            self.test_output = _nginx_test(nginx, conf, workdir)
        except BaseException:
            self.stop()
            raise
        cmd = [str(nginx), "-p", str(workdir), "-c", str(conf)]
        cmd += ["-e", str(workdir / "error.log"), "-g", "daemon off;"]
        self.launch(cmd, output=workdir / "stderr.log")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.error_log()
                self.stop()
                raise NginxConfigError(f"nginx exited with code {self.proc.returncode}:\n{log}")
            try:
                if http_request(self.http_url, "GET", "/front/health", timeout=2).status == 200:
                    return self
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nginx did not answer within {self.startup_timeout:.0f} s")

    def __repr__(self) -> str:
        state = (
            f"pid {self.proc.pid}, http {self.http_url}, grpc {self.grpc_url}"
            if self.is_alive()
            else "stopped"
        )
        return f"NginxFront({len(self.http_upstreams)} servers, {state})"
