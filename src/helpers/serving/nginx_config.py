"""The ``nginx.conf`` of a front before several Triton servers, written and audited.

:func:`front_config` writes it from a few numbers: an allow-list of the paths and gRPC methods
clients need, a body limit (:func:`body_limit_bytes`), a rate limit, JSON refusals and failover
to the other server. :func:`audit_config` checks that every protection of :data:`REQUIRED` is in
each block that needs it and that no location opens a whole prefix again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from helpers.serving.triton_client import LOOPBACK, check_loopback

__all__ = ["NginxConfigError", "body_limit_bytes", "front_config", "audit_config"]

# The longest float32 in KServe v2 JSON: "-1.2345678e-05, " (Python's repr of a float32 widened to
# a float64 can take up to 24 characters, plus ", "). A limit sized with it admits any JSON request
# of max_batch_size images; binary requests (4 bytes per value) fit with room to spare.
JSON_BYTES_PER_VALUE = 26
_HEADROOM = 64 * 1024  # the JSON keys, names and shapes around the data
_BODY_BUFFER = "256k"  # bodies larger than this wait in a temp file, not in RAM
# The gRPC methods clients need: inference, model metadata and readiness, health.
ALLOWED_GRPC = ("ModelInfer", "ModelMetadata", "ModelReady", "ServerLive", "ServerReady")
GRPC_SERVICE = "inference.GRPCInferenceService"
# nginx's refusals, answered as JSON like Triton's own errors, and over gRPC as HTTP 200 with a
# grpc-status (7 PERMISSION_DENIED, 8 RESOURCE_EXHAUSTED): {HTTP status: (grpc-status, why)}.
REFUSALS = {
    403: (7, "refused by the front: not an allowed endpoint"),
    413: (8, "refused by the front: request larger than the model accepts"),
    429: (8, "refused by the front: too many requests, retry later"),
    502: (None, "the front: no server could answer, retry later"),
    504: (None, "the front: the server did not answer in time"),
}

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


class NginxConfigError(ValueError):
    """The generated configuration misses a protection or ``nginx -t`` refuses it."""


def body_limit_bytes(max_batch_size: int, item_shape: Sequence[int]) -> int:
    """The largest request body a model accepts: ``max_batch_size`` items as KServe v2 JSON."""
    if max_batch_size < 1 or not item_shape or any(d < 1 for d in item_shape):
        raise ValueError(
            f"need max_batch_size >= 1 and positive dims, got {max_batch_size}, {item_shape}"
        )
    return max_batch_size * math.prod(item_shape) * JSON_BYTES_PER_VALUE + _HEADROOM


def _refusals(grpc: bool) -> str:
    """The ``error_page`` lines and the named locations that answer :data:`REFUSALS`."""
    codes = [c for c, (status, _) in REFUSALS.items() if status or not grpc]
    lines = [f"        error_page {code} @refused_{code};" for code in codes]
    for code in codes:
        status, why = REFUSALS[code]
        answer = (
            f"default_type application/grpc; add_header grpc-status {status} always; "
            f'add_header grpc-message "{why}" always; return 204;'
            if grpc
            else f'default_type application/json; return {code} \'{{"error":"{why}"}}\\n\';'
        )
        lines.append(f"        location @refused_{code} {{ {answer} }}")
    return "\n".join(lines)


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
    fail_timeout_s: int = 10,
    allow_list: bool = True,
    user: str | None = None,
) -> str:
    """The ``nginx.conf`` of a front for Triton servers (see the module docstring).

    ``allow_list=False`` writes the front this course had before (the whole ``/v2`` API and every
    gRPC method passed on, only model control refused), to show the allow-list test failing.
    """
    if not http_upstreams or not grpc_upstreams:
        raise ValueError("give at least one HTTP and one gRPC upstream (127.0.0.1:PORT)")
    if min(max_body_bytes, rate_per_s, burst + 1, fail_timeout_s) < 1:
        raise ValueError("max_body_bytes, rate_per_s, fail_timeout_s must be positive, burst >= 0")
    bad = [m for m in models if not re.fullmatch(r"[A-Za-z0-9_.-]+", m)]
    if not models or bad:
        raise ValueError(f"give the served models' names (letters, digits, _ . -), got {models}")
    names = "(" + "|".join(re.escape(m) for m in models) + ")"
    for url in (*http_upstreams, *grpc_upstreams):  # the front serves this machine only
        check_loopback(url)

    def servers(urls: Sequence[str]) -> str:
        line = f"max_fails=1 fail_timeout={fail_timeout_s}s;"
        return "\n".join(f"        server {url} {line}" for url in urls)

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
            f"        location = /{GRPC_SERVICE}/{m} {{ grpc_pass grpc://triton_grpc; }}"
            for m in allowed
        )
        grpc_locations += f"""
        location = /{GRPC_SERVICE}/ModelInfer {{
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
        location /{GRPC_SERVICE}/RepositoryModelLoad {{ return 403; }}
        location /{GRPC_SERVICE}/RepositoryModelUnload {{ return 403; }}
        location /{GRPC_SERVICE}/ModelInfer {{
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
{servers(http_upstreams)}
        keepalive 32;
    }}
    upstream triton_grpc {{
{servers(grpc_upstreams)}
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
{_refusals(grpc=False)}

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
{_refusals(grpc=True)}
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
    blocks = [b for b in _blocks(text, "server") if re.search(r"\blisten ", b)]
    grpc = [b for b in blocks if re.search(r"listen \S+ http2;", b)]
    return {"http server": [b for b in blocks if b not in grpc], "grpc server": grpc}


def audit_config(text: str) -> list[str]:
    """What a front config lacks (empty when every protection is in every place it belongs):
    each ``server`` block on its own, and no location passing a whole prefix on."""
    text = re.sub(r"#[^\n]*", "", text)
    flat = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731
    missing = []
    places = {"http": _blocks(text, "http"), "upstream": _blocks(text, r"upstream \S+")}
    places |= server_blocks(text)
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
