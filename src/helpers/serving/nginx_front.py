"""nginx in front of several Triton servers, as production runs it: an allow-list, limits, failover.

Clients never talk to Triton's own ports. Triton 2.51 (the server inside ``nvidia-pytriton``
0.7.0) answers every API it has on the port that serves inference: model control
(``/v2/repository``), shared-memory registration, tracing, logging settings, statistics. It has no
limit on the size of a request body either (``--http-max-input-size`` came in 2.59), and one
well-formed JSON request of about 250 MB can kill it (the production chapter shows when). A
reverse proxy in front passes only what clients need, refuses what no model could accept before
any server reads it, limits how fast one client may send, and spreads the requests over several
servers, retrying one that failed on another.

:func:`front_config` writes that ``nginx.conf`` from a few numbers (the servers' ports, the
models, the largest request they accept, the rate limit); :func:`audit_config` checks that every
protection is in each ``server`` block; :class:`NginxFront` checks it with ``nginx -t`` and runs
nginx (Debian's package) as an ordinary process on free loopback ports, not as the system
service; :func:`probe_admin` sends every administrative request Triton knows through a front and
reports which got through::

    with NginxFront([a.http_url, b.http_url], [a.grpc_url, b.grpc_url], models=["embedder"],
                    max_body_bytes=limit) as front:
        triton_client.infer_http(front.http_url, "embedder", {"image": x}, "embedding")

It is a :class:`~helpers.core.processes.ManagedProcess`, stopped like the Triton server: context
manager, ``atexit`` hook, finalizer, and a watchdog process that stops its process group if this
Python process dies.
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
from typing import Any

from helpers.core.processes import ManagedProcess
from helpers.serving.triton_client import LOOPBACK, check_loopback, http_request
from helpers.serving.triton_server import free_port

__all__ = [
    "NginxFront",
    "NginxNotFoundError",
    "body_limit_bytes",
    "find_nginx",
    "probe_admin",
]

# The longest float32 in KServe v2 JSON: "-1.2345678e-05, " (Python's repr of a float32 widened to
# a float64 can take up to 24 characters, plus ", "). A limit sized with it admits any JSON request
# of max_batch_size images; binary requests (4 bytes per value) fit with room to spare.
JSON_BYTES_PER_VALUE = 26
_HEADROOM = 64 * 1024  # the JSON keys, names and shapes around the data
_BODY_BUFFER = "256k"  # bodies larger than this wait in a temp file, not in RAM

# The gRPC methods clients need: inference, model metadata and readiness, health.
ALLOWED_GRPC = ("ModelInfer", "ModelMetadata", "ModelReady", "ServerLive", "ServerReady")
_GRPC_SERVICE = "/inference.GRPCInferenceService"

# What a front must contain, each with why, per place: the http block, each HTTP server block,
# each gRPC server block. audit_config() refuses a config that lacks any of them anywhere.
REQUIRED: dict[str, dict[str, str]] = {
    "http": {
        r"limit_req_zone \S+ zone=infer:\S+ rate=\d+r/s;": "a rate-limit zone",
        r"limit_req_status 429;": "429 Too Many Requests (not nginx's default 503)",
        r"client_body_timeout \d+s;": "a slow-client timeout on the request body",
        r"client_body_buffer_size \d+k;": "a small body buffer (larger bodies go to a temp file)",
    },
    "upstream": {
        r"^ ?(server \S+ max_fails=\d+ fail_timeout=\d+s; ?)+(keepalive \d+; ?)?$": (
            "passive health checks on every upstream server"
        ),
    },
    "http server": {
        r"client_max_body_size \d+;": "a body limit (Triton 2.51 reads a body of any size)",
        r"location / \{ return 403; \}": "the allow-list: every other path refused (403)",
        r"limit_req zone=infer burst=\d+ nodelay;": "the rate limit applied to inference",
        r"proxy_next_upstream error timeout http_502 http_503 non_idempotent;": (
            "retry a failed HTTP request (inference POSTs too) on the other server"
        ),
        r"error_page 403 @refused_403;": "refusals answered as JSON (403)",
        r"error_page 413 @refused_413;": "refusals answered as JSON (413)",
        r"error_page 429 @refused_429;": "refusals answered as JSON (429)",
    },
    "grpc server": {
        r"client_max_body_size \d+;": "a message-size limit on gRPC",
        r"location / \{ return 403; \}": "the gRPC allow-list: every other method refused",
        r"limit_req zone=infer burst=\d+ nodelay;": "the rate limit applied to gRPC inference",
        r"grpc_next_upstream error timeout http_502 http_503 non_idempotent;": (
            "retry a failed gRPC request on the other server"
        ),
        r"grpc_pass grpc://triton_grpc;": "gRPC proxied to the gRPC upstream",
    },
}
# A location that passes a whole prefix on undoes the allow-list.
_OPEN_LOCATION = re.compile(
    r"location (/|/v2|/v2/|/inference\.GRPCInferenceService/?) \{ (proxy|grpc)_pass"
)

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
    (
        "register shared memory",
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        '{"key": "/r", "offset": 0, "byte_size": 64}',
    ),
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


def _json_refusals() -> str:
    """Named locations that answer nginx's refusals as JSON, as Triton answers its own errors."""
    why = {
        403: "refused by the front: not an allowed endpoint",
        413: "refused by the front: request body larger than the model accepts",
        429: "refused by the front: too many requests, retry later",
        502: "the front: no server could answer, retry later",
        504: "the front: the server did not answer in time",
    }
    lines = [f"        error_page {code} @refused_{code};" for code in why]
    for code, text in why.items():
        lines.append(
            f"        location @refused_{code} {{ default_type application/json; "
            f'return {code} \'{{"error":"{text}"}}\\n\'; }}'
        )
    return "\n".join(lines)


def _grpc_refusals() -> str:
    """The same refusals as gRPC answers: HTTP 200 + ``grpc-status`` (7 denied, 8 exhausted)."""
    why = {
        403: (7, "refused by the front: not an allowed method"),
        413: (8, "refused by the front: message larger than the model accepts"),
        429: (8, "refused by the front: too many requests, retry later"),
    }
    lines = [f"        error_page {code} @grpc_{code};" for code in why]
    for code, (status, text) in why.items():
        lines.append(
            f"        location @grpc_{code} {{ default_type application/grpc; "
            f"add_header grpc-status {status} always; "
            f'add_header grpc-message "{text}" always; return 204; }}'
        )
    return "\n".join(lines)


def _model_pattern(models: Sequence[str]) -> str:
    bad = [m for m in models if not re.fullmatch(r"[A-Za-z0-9_.-]+", m)]
    if not models or bad:
        raise ValueError(f"give the served models' names (letters, digits, _ . -), got {models}")
    return "(" + "|".join(re.escape(m) for m in models) + ")"


def front_config(
    http_upstreams: Sequence[str],
    grpc_upstreams: Sequence[str],
    *,
    models: Sequence[str],
    http_port: int,
    grpc_port: int,
    max_body_bytes: int,
    rate_per_s: int,
    burst: int,
    prefix: str | Path,
    max_fails: int = 1,
    fail_timeout_s: int = 10,
    allow_list: bool = True,
    user: str | None = None,
) -> str:
    """The ``nginx.conf`` of a front for Triton servers (see the module docstring).

    ``allow_list=False`` writes the front this course had before: the whole ``/v2`` API (and
    every gRPC method) passed on, only model control refused. It exists to show the allow-list
    test failing; :func:`audit_config` refuses it.
    """
    if not http_upstreams or not grpc_upstreams:
        raise ValueError("give at least one HTTP and one gRPC upstream (127.0.0.1:PORT)")
    if max_body_bytes < 1 or rate_per_s < 1 or burst < 0 or max_fails < 1 or fail_timeout_s < 1:
        raise ValueError("max_body_bytes, rate_per_s, max_fails, fail_timeout_s must be positive")
    names = _model_pattern(models)
    p = Path(prefix)
    user_line = f"user {user};\n" if user else ""
    to_http = "proxy_pass http://triton_http$uri;"  # the normalised path that was allowed
    if allow_list:
        http_locations = f"""\
        location ~ ^/v2/health/(live|ready)$ {{
            limit_except GET {{ deny all; }}
            {to_http}
        }}
        location ~ ^/v2/models/{names}(/versions/[0-9]+)?(/ready)?$ {{
            limit_except GET {{ deny all; }}
            {to_http}
        }}
        location ~ ^/v2/models/{names}(/versions/[0-9]+)?/infer$ {{
            limit_except POST {{ deny all; }}
            limit_req zone=infer burst={burst} nodelay;
            {to_http}
        }}
        location / {{ return 403; }}"""
        allowed = [m for m in ALLOWED_GRPC if m != "ModelInfer"]
        grpc_locations = "\n".join(
            f"        location = {_GRPC_SERVICE}/{m} {{ grpc_pass grpc://triton_grpc; }}"
            for m in allowed
        )
        grpc_locations += f"""
        location = {_GRPC_SERVICE}/ModelInfer {{
            limit_req zone=infer burst={burst} nodelay;
            grpc_pass grpc://triton_grpc;
        }}
        location / {{ return 403; }}"""
    else:  # the old front: everything under /v2 passed on
        http_locations = f"""\
        location /v2/repository {{ return 403; }}
        location ~ ^/v2/models/[^/]+(/versions/[0-9]+)?/infer$ {{
            limit_req zone=infer burst={burst} nodelay;
            proxy_pass http://triton_http;
        }}
        location /v2 {{ proxy_pass http://triton_http; }}
        location / {{ return 404; }}"""
        grpc_locations = f"""\
        location {_GRPC_SERVICE}/RepositoryModelLoad {{ return 403; }}
        location {_GRPC_SERVICE}/RepositoryModelUnload {{ return 403; }}
        location {_GRPC_SERVICE}/ModelInfer {{
            limit_req zone=infer burst={burst} nodelay;
            grpc_pass grpc://triton_grpc;
        }}
        location / {{ grpc_pass grpc://triton_grpc; }}"""
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
    # Not here, and a must in production: TLS (listen ... ssl; ssl_certificate ...) and
    # authentication (auth_request, or client certificates). This front listens on loopback.

    # Slow clients: a connection that sends its headers or body slower than this is closed.
    client_header_timeout 10s;
    client_body_timeout 10s;
    send_timeout 30s;
    # A body larger than this waits in a temp file (and is retried from there), not in RAM.
    client_body_buffer_size {_BODY_BUFFER};

    # At most {rate_per_s} inference requests per second per client address, bursts of {burst}.
    limit_req_zone $binary_remote_addr zone=infer:1m rate={rate_per_s}r/s;
    limit_req_status 429;

    # The servers, one model repository. A server that fails max_fails times within
    # fail_timeout is left out for fail_timeout (passive health checks: real requests probe).
    upstream triton_http {{
{_servers(http_upstreams, max_fails, fail_timeout_s)}
        keepalive 32;
    }}
    upstream triton_grpc {{
{_servers(grpc_upstreams, max_fails, fail_timeout_s)}
    }}

    server {{
        listen {LOOPBACK}:{http_port};
        # No request larger than the model can take: max_batch_size images as JSON. nginx
        # answers 413 from the Content-Length header, before it reads the body.
        client_max_body_size {max_body_bytes};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_connect_timeout 2s;
        proxy_read_timeout 60s;
        # A request that failed on one server is sent to the other. Inference is idempotent
        # (same input, same output, no state changed), so POSTs may be retried too.
        proxy_next_upstream error timeout http_502 http_503 non_idempotent;
        proxy_next_upstream_tries 2;
{_json_refusals()}

        location = /front/health {{ return 200 "front up\\n"; }}
        # The allow-list: health, the served models' metadata and readiness, inference.
{http_locations}
    }}

    server {{
        listen {LOOPBACK}:{grpc_port} http2;
        client_max_body_size {max_body_bytes};  # the gRPC message-size limit
        grpc_connect_timeout 2s;
        grpc_read_timeout 60s;
        grpc_next_upstream error timeout http_502 http_503 non_idempotent;
        grpc_next_upstream_tries 2;
{_grpc_refusals()}
{grpc_locations}
    }}
}}
"""


def _blocks(text: str, head: str) -> list[str]:
    """The bodies of the ``head { ... }`` blocks of ``text`` (braces matched)."""
    out = []
    for m in re.finditer(rf"(?m)^\s*{head}\s*\{{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end() : i - 1])
    return out


def server_blocks(text: str) -> dict[str, list[str]]:
    """``{"http server": [...], "grpc server": [...]}``: each ``server`` block, by its listener."""
    found: dict[str, list[str]] = {"http server": [], "grpc server": []}
    for block in _blocks(text, "server"):
        if not re.search(r"\blisten ", block):
            continue
        kind = "grpc server" if re.search(r"listen \S+ http2;", block) else "http server"
        found[kind].append(block)
    return found


def audit_config(text: str) -> list[str]:
    """What a front config lacks (empty when every protection is in every place it belongs).

    Each ``server`` block is checked on its own: a body limit in the gRPC block does not stand
    in for the HTTP block's. A location that passes a whole prefix on fails the allow-list.
    """
    text = re.sub(r"#[^\n]*", "", text)
    flat = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731
    missing = []
    http_blocks = _blocks(text, "http")
    places = {
        "http": http_blocks,
        "upstream": _blocks(text, r"upstream \S+"),
        **server_blocks(text),
    }
    for place, patterns in REQUIRED.items():
        blocks = places.get(place) or []
        if not blocks:
            missing.append(f"no {place} block")
            continue
        for i, block in enumerate(blocks):
            where = place if len(blocks) == 1 else f"{place} {i + 1}"
            missing += [
                f"{where}: {why}" for p, why in patterns.items() if not re.search(p, flat(block))
            ]
    if _OPEN_LOCATION.search(flat(text)):
        missing.append("a location passes a whole prefix on: the allow-list is open")
    return missing


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
    """nginx on free loopback ports in front of the given Triton servers (see :func:`front_config`).

    ``allow_list=False`` runs the old, open front (to show the allow-list test failing); it skips
    :func:`audit_config`, which would refuse it.
    """

    def __init__(
        self,
        http_upstreams: Sequence[str],
        grpc_upstreams: Sequence[str],
        *,
        models: Sequence[str],
        max_body_bytes: int,
        rate_per_s: int = 5000,
        burst: int = 200,
        max_fails: int = 1,
        fail_timeout_s: int = 10,
        allow_list: bool = True,
        startup_timeout: float = 20.0,
    ) -> None:
        self.http_upstreams = list(http_upstreams)
        self.grpc_upstreams = list(grpc_upstreams)
        self.settings = dict(
            models=list(models),
            max_body_bytes=int(max_body_bytes),
            rate_per_s=int(rate_per_s),
            burst=int(burst),
            max_fails=int(max_fails),
            fail_timeout_s=int(fail_timeout_s),
            allow_list=bool(allow_list),
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

    def wait_for_log(self, since: int, timeout_s: float = 10.0, count: int = 1) -> list[str]:
        """The access-log lines after the first ``since``, waiting until there are ``count``.

        nginx writes a request's line when it has finished with the connection; a request refused
        from its headers (413) is logged only after nginx has closed that connection.
        """
        deadline = time.monotonic() + timeout_s
        while len(lines := self.access_log()) < since + count and time.monotonic() < deadline:
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
            missing = audit_config(self.config_text) if self.settings["allow_list"] else []
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


def _reached(line: str) -> bool:
    """Whether an access-log line shows the request passed to a server."""
    upstream = line.split("upstream=")[1].split()[0] if "upstream=" in line else "-"
    return upstream not in ("-", "")


def probe_admin(front: NginxFront, model: str) -> list[dict[str, Any]]:
    """Send every request of :data:`ADMIN_HTTP` and :data:`ADMIN_GRPC` through ``front``.

    One row per request: protocol, what, status (HTTP status, or the gRPC status name) and
    ``reached``, whether the front's access log shows it passed to a server. A front with an
    allow-list answers every one with 403 (gRPC: PERMISSION_DENIED) and passes none on.
    """
    import tritonclient.grpc as grpcclient

    rows = []
    for what, method, path, body in ADMIN_HTTP:
        start = len(front.access_log())
        resp = http_request(front.http_url, method, path.format(m=model), body=body, timeout=10)
        line = (front.wait_for_log(since=start) or ["-"])[-1]
        rows.append(
            {"protocol": "HTTP", "request": what, "status": resp.status, "reached": _reached(line)}
        )
    client = grpcclient.InferenceServerClient(url=front.grpc_url)
    try:
        for what, name, args in ADMIN_GRPC:
            start = len(front.access_log())
            args = tuple(a.format(m=model) if isinstance(a, str) else a for a in args)
            try:
                getattr(client, name)(*args)
                status = "OK"
            except grpcclient.InferenceServerException as exc:
                status = str(exc.status()).replace("StatusCode.", "")
            line = (front.wait_for_log(since=start) or ["-"])[-1]
            rows.append(
                {"protocol": "gRPC", "request": what, "status": status, "reached": _reached(line)}
            )
    finally:
        client.close()
    return rows
