"""helpers.serving.nginx_front: a REAL nginx in front of two REAL Triton servers (loopback only).

The servers and the front start once for the module. The tests check the allow-list (every
administrative request Triton knows, HTTP and gRPC, refused and passed to no server; the same probe
fails on the old, open front), the body limit (413, and no server sees the request), clear 4xx
errors through the front, the rate limit (429), a load run whose answers all equal local
inference, gRPC through the front, that every protection of the config is checked in each server
block, and, last, that killing one server mid-load loses no request. nginx is a system
package: without it these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

from helpers.core import precision, processes
from helpers.serving import nginx_config, nginx_front, triton_client, triton_load, triton_server
from helpers.serving import triton_repo as sr

pytestmark = pytest.mark.slow
SIZE, DIM, MAX_BATCH = 32, 8, 4

if shutil.which("nginx") is None and not os.access("/usr/sbin/nginx", os.X_OK):
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI=true but nginx is not installed (tools/install_system_deps.sh)")
    pytest.skip(
        "nginx is not installed (apt-get install nginx, or tools/install_system_deps.sh)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_embedder_onnx):
    """A tiny embedder in ONNX, a one-model repository, and the local ONNX Runtime session."""
    from helpers.deploy import runtimes

    root = tmp_path_factory.mktemp("front")
    x, onnx_path = tiny_embedder_onnx(root, SIZE, DIM)
    sr.python_runtime_model(
        root / "repo",
        "tiny",
        onnx_path,
        runtime="onnxruntime",
        max_batch_size=MAX_BATCH,
        dynamic_batching=True,
        inputs=[sr.TensorSpec("image", (3, SIZE, SIZE))],
        outputs=[sr.TensorSpec("embedding", (DIM,))],
    )
    local = runtimes.create_session(onnx_path, "cpu", intra_op_threads=1, verbose=False)
    tol = precision.tolerance("fp32", scale=precision.output_scale(local.run(x)))
    return types.SimpleNamespace(repo=root / "repo", x=x, local=local, tol=tol)


@pytest.fixture(scope="module")
def stack(tiny):
    """Two Triton servers on one repository and an nginx front; nothing survives the module."""
    limit = nginx_config.body_limit_bytes(MAX_BATCH, (3, SIZE, SIZE))
    key = dict(admin_key="test-admin-key")  # defence in depth: Triton's restricted APIs
    with (
        triton_server.TritonServer(tiny.repo, **key) as a,
        triton_server.TritonServer(tiny.repo, **key) as b,
        nginx_front.NginxFront(
            [a.http_url, b.http_url],
            [a.grpc_url, b.grpc_url],
            models=["tiny"],
            max_body_bytes=limit,
        ) as front,
    ):
        pids = a.processes() + b.processes() + front.processes()
        yield types.SimpleNamespace(a=a, b=b, front=front, limit=limit)
    assert pids and processes.alive(pids) == [], "a server or nginx process survived"


def _served(server: triton_server.TritonServer) -> int:
    """Requests the server answered or failed (its own counters)."""
    m = triton_client.scrape_metrics(server.metrics_url, "tiny")
    return int(m["nv_inference_request_success"] + m["nv_inference_request_failure"])


def _settled(*servers: triton_server.TritonServer) -> int:
    """Requests the servers counted, once two reads 0.2 s apart agree (a server counts a request
    just after answering it)."""
    last = -1
    for _ in range(50):
        now = sum(_served(s) for s in servers)
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    raise AssertionError("the servers' counters never settled")


# ------------------------------------------------------------------------------------- config


def _config(**kw) -> str:
    settings = dict(
        models=["tiny"],
        http_port=5,
        grpc_port=6,
        max_body_bytes=1000,
        rate_per_s=10,
        burst=5,
        prefix="/tmp/x",
    )
    return nginx_config.front_config(
        ["127.0.0.1:1", "127.0.0.1:2"], ["127.0.0.1:3", "127.0.0.1:4"], **{**settings, **kw}
    )


def test_audit_fails_when_any_protection_is_removed():
    """Each protection, taken out of each block that needs it, is reported."""
    text = _config()
    assert nginx_config.audit_config(text) == []
    blocks = {
        "http": [text],
        "upstream": [b for b in text.split("upstream ")[1:3]],
        **nginx_config.server_blocks(text),
    }
    checked = 0
    for place, patterns in nginx_config.REQUIRED.items():
        for block in blocks[place]:
            for pattern, why in patterns.items():
                lines = block.splitlines()
                if place == "upstream":  # servers without their health check
                    kept = [
                        ln.split(" max_fails")[0] + ";" if "max_fails" in ln else ln for ln in lines
                    ]
                else:
                    kept = [ln for ln in lines if not re.search(pattern, re.sub(r"\s+", " ", ln))]
                assert kept != lines, f"{place}: no line carries {why!r}"
                mutated = text.replace(block, "\n".join(kept), 1)
                assert any(why in p for p in nginx_config.audit_config(mutated)), (place, why)
                checked += 1
    assert checked == sum(len(p) for p in nginx_config.REQUIRED.values()) + 1  # 2 upstreams


def test_audit_checks_each_server_block_on_its_own():
    """The gRPC block's body limit must not stand in for the HTTP block's (issue 23, item 8)."""
    text = _config()
    http_block = nginx_config.server_blocks(text)["http server"][0]
    assert "client_max_body_size 1000;" in http_block
    without = text.replace(http_block, http_block.replace("client_max_body_size 1000;", ""))
    assert text.count("client_max_body_size 1000;") == 2
    assert without.count("client_max_body_size 1000;") == 1  # the gRPC block keeps its own
    assert nginx_config.audit_config(without) == [
        "http server: a body limit (Triton 2.51 reads a body of any size)"
    ]


def test_audit_refuses_the_open_front():
    problems = nginx_config.audit_config(_config(allow_list=False))
    assert "a location passes a whole prefix on: the allow-list is open" in problems


def test_nginx_t_refuses_a_broken_config(monkeypatch):
    def broken(*args, **kwargs):  # a config the audit passes and nginx -t refuses
        return nginx_config.front_config(*args, **kwargs) + "no_such_directive on;\n"

    monkeypatch.setattr(nginx_front, "front_config", broken)
    front = nginx_front.NginxFront(["127.0.0.1:1"], ["127.0.0.1:2"], models=["m"], max_body_bytes=9)
    with pytest.raises(nginx_config.NginxConfigError, match="nginx -t refused"):
        front.start()
    assert not front.is_alive()  # the control, a front that starts: the test after next


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="127.0.0.1:PORT"):
        nginx_front.NginxFront(["10.0.0.1:80"], ["127.0.0.1:1"], models=["m"], max_body_bytes=10)
    with pytest.raises(ValueError, match="positive"):
        nginx_front.NginxFront(["127.0.0.1:2"], ["127.0.0.1:1"], models=["m"], max_body_bytes=0)
    with pytest.raises(ValueError, match="models"):
        nginx_front.NginxFront(["127.0.0.1:2"], ["127.0.0.1:1"], models=["a/b"], max_body_bytes=9)
    with pytest.raises(ValueError, match="max_batch_size"):
        nginx_config.body_limit_bytes(0, (3, 4, 4))


def test_a_front_that_raises_in_its_with_block_leaves_nothing_running():
    with pytest.raises(RuntimeError, match="boom"):
        with nginx_front.NginxFront(
            ["127.0.0.1:1"], ["127.0.0.1:2"], models=["m"], max_body_bytes=100
        ) as f:
            pids = f.processes()
            assert len(pids) >= 2  # master + worker
            raise RuntimeError("boom")
    assert processes.alive(pids) == []


@pytest.mark.parametrize("how", ["exception", "sigkill"])
def test_no_nginx_survives_its_python_process(how):
    """The watchdog stops nginx when the Python process that started it dies, even by SIGKILL."""
    end = "raise SystemExit('uncaught')" if how == "exception" else "os.kill(os.getpid(), 9)"
    code = (
        "import os, sys\n"
        "from helpers.serving import nginx_front\n"
        "f = nginx_front.NginxFront(['127.0.0.1:1'], ['127.0.0.1:2'], models=['m'],\n"
        "                           max_body_bytes=100).start()\n"
        "print(' '.join(map(str, f.processes())), flush=True)\n" + end + "\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    pids = [int(p) for p in child.stdout.split()]
    assert len(pids) >= 2, child.stderr
    deadline = time.time() + 20
    while processes.alive(pids) and time.time() < deadline:
        time.sleep(0.2)
    assert processes.alive(pids) == [], f"nginx outlived its Python process ({how})"


# ------------------------------------------------------------------------------------- through the front


def test_http_grpc_and_json_through_the_front_equal_local(stack, tiny, infer_json):
    x = tiny.x[:MAX_BATCH]
    want = tiny.local.run(x)
    for got in (
        triton_client.infer("http", stack.front.http_url, "tiny", {"image": x}, "embedding"),
        triton_client.infer("grpc", stack.front.grpc_url, "tiny", {"image": x}, "embedding"),
        infer_json(stack.front.http_url, "tiny", {"image": x})["embedding"],
    ):
        np.testing.assert_allclose(got, want, **tiny.tol.as_kwargs())


def test_oversized_body_gets_413_and_no_server_sees_it(stack, tiny, infer_json):
    # A valid request (MAX_BATCH images) that is too large only because of its bytes (indented
    # JSON): if it reached a server, the server would answer it and count a success.
    request = json.loads(triton_client.infer_json_body({"image": tiny.x[:MAX_BATCH]}))
    padded = json.dumps(request, indent=8)
    # over the model's limit, under nginx's default of 1 MiB: only the sized limit refuses it
    assert stack.limit < len(padded) < 2**20
    before = _settled(stack.a, stack.b)
    resp = triton_client.http_request(
        stack.front.http_url, "POST", "/v2/models/tiny/infer", body=padded
    )
    assert resp.status == 413 and "larger than the model accepts" in resp.error_message()
    assert _settled(stack.a, stack.b) == before, "a server saw the oversized request"
    assert stack.front.access_log()[-1].startswith("413 POST /v2/models/tiny/infer upstream=-")
    # the request: 250 MB announced; nginx refuses it from the headers alone
    conn = http.client.HTTPConnection(*stack.front.http_url.split(":"), timeout=10)
    conn.putrequest("POST", "/v2/models/tiny/infer")
    conn.putheader("Content-Length", str(250_000_000))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    # the largest request the model accepts (max_batch_size images as plain JSON) still passes
    got = infer_json(stack.front.http_url, "tiny", {"image": tiny.x[:MAX_BATCH]})
    assert got["embedding"].shape == (MAX_BATCH, DIM)
    big = {"image": np.repeat(tiny.x[:1], 64, 0)}
    with pytest.raises(Exception, match="413|Too Large|RESOURCE_EXHAUSTED|StatusCode"):
        triton_client.infer("grpc", stack.front.grpc_url, "tiny", big, "embedding")


BAD = [  # (what is wrong, model, body)
    ("malformed JSON", "tiny", '{"inputs": [ {"name": "image", '),
    ("empty body", "tiny", ""),
    ("unknown model", "nope", None),
    ("wrong dtype", "tiny", "FP64"),
    ("wrong shape", "tiny", "shape"),
    ("data/shape mismatch", "tiny", "mismatch"),
    ("unknown input", "tiny", "input"),
]


@pytest.mark.parametrize(("what", "model", "kind"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_clear_errors_through_the_front(stack, tiny, what, model, kind):
    one = tiny.x[:1]
    good = json.loads(triton_client.infer_json_body({"image": one}))
    if kind == "FP64":
        body = triton_client.infer_json_body({"image": one.astype(np.float64)})
    elif kind == "shape":
        body = triton_client.infer_json_body({"image": one[:, :, ::2, ::2].copy()})
    elif kind == "mismatch":
        good["inputs"][0]["data"] = good["inputs"][0]["data"][:-5]
        body = json.dumps(good)
    elif kind == "input":
        good["inputs"][0]["name"] = "picture"
        body = json.dumps(good)
    elif kind is None:
        body = json.dumps(good)
    else:
        body = kind
    resp = triton_client.http_request(
        stack.front.http_url, "POST", f"/v2/models/{model}/infer", body=body
    )
    # Triton 2.51 answers a body its JSON parser refuses with 500 and the parser's message, the
    # rest with 4xx. The front passes them through and never retries them (http_500 is not in
    # proxy_next_upstream: the other server would refuse the same bytes).
    parse_errors = ("malformed JSON", "empty body", "data/shape mismatch")
    allowed = {400, 500} if what in parse_errors else {400, 404}
    if what == "unknown model":  # not on the allow-list: the front answers, no server sees it
        allowed = {403}
    assert resp.status in allowed, (what, resp.status, resp.body[:200])
    assert resp.error_message(), f"{what}: no error message"
    for server in (stack.a, stack.b):
        ready = triton_client.http_request(server.http_url, "GET", "/v2/health/ready")
        assert ready.status == 200


def _state(server: triton_server.TritonServer) -> tuple:
    """What an administrative request could change: models loaded, log settings, shared memory."""
    key = server.admin_headers
    get = lambda path: triton_client.http_request(server.http_url, "GET", path, headers=key)  # noqa: E731
    index = server.repository_index()
    return (
        [(m["name"], m.get("state")) for m in index],
        get("/v2/logging").body,
        get("/v2/systemsharedmemory/status").body,
    )


def test_admin_endpoints_are_refused_and_reach_no_server(stack):
    """The allow-list: every administrative request, HTTP and gRPC, refused; none passed on."""
    before = [_state(s) for s in (stack.a, stack.b)]
    rows = nginx_front.probe_admin(stack.front, "tiny")
    assert len(rows) == len(nginx_front.ADMIN_HTTP) + len(nginx_front.ADMIN_GRPC)
    leaks = [r for r in rows if r["reached"] or str(r["status"]).startswith("2")]
    assert leaks == [], f"through the front: {leaks}"
    assert {r["status"] for r in rows if r["protocol"] == "HTTP"} == {403}
    assert {r["status"] for r in rows if r["protocol"] == "gRPC"} == {"PERMISSION_DENIED"}
    assert [_state(s) for s in (stack.a, stack.b)] == before
    refused = triton_client.http_request(stack.front.http_url, "GET", "/v2/models/tiny/config")
    assert refused.headers.get("Content-Type") == "application/json"
    assert "not an allowed endpoint" in refused.error_message()


def test_the_probe_fails_without_the_allow_list(stack):
    """The same probe through the old front (whole /v2 passed on) finds what gets through."""
    with nginx_front.NginxFront(
        [stack.a.http_url],
        [stack.a.grpc_url],
        models=["tiny"],
        max_body_bytes=stack.limit,
        allow_list=False,
    ) as open_front:
        rows = nginx_front.probe_admin(open_front, "tiny")
    leaks = {(r["protocol"], r["request"]) for r in rows if r["reached"]}
    assert ("HTTP", "logging settings") in leaks and ("gRPC", "statistics") in leaks, rows
    assert ("HTTP", "register shared memory") in leaks, rows
    # Triton's restricted APIs are the second wall: what got through was refused by the server
    # (403 over HTTP); only what Triton leaves open (server metadata) got a 2xx.
    opened = {r["request"] for r in rows if str(r["status"]).startswith("2") or r["status"] == "OK"}
    assert opened == {"server metadata"}, rows


def test_allowed_endpoints_pass_through_the_front(stack, tiny):
    import tritonclient.grpc as grpcclient

    url = stack.front.http_url
    for path in (
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/tiny",
        "/v2/models/tiny/ready",
        "/v2/models/tiny/versions/1/ready",
    ):
        assert triton_client.http_request(url, "GET", path).status == 200, path
    # the allow-list names methods too: inference is a POST, metadata a GET
    assert triton_client.http_request(url, "DELETE", "/v2/models/tiny").status == 403
    assert triton_client.http_request(url, "GET", "/v2/models/tiny/infer").status == 403
    client = grpcclient.InferenceServerClient(url=stack.front.grpc_url)
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("tiny")
        assert client.get_model_metadata("tiny").name == "tiny"
    finally:
        client.close()


def test_burst_over_the_rate_limit_gets_429(stack, tiny):
    body = triton_client.infer_json_body({"image": tiny.x[:1]})
    statuses: list[int] = []
    with nginx_front.NginxFront(
        [stack.a.http_url],
        [stack.a.grpc_url],
        models=["tiny"],
        max_body_bytes=stack.limit,
        rate_per_s=1,
        burst=2,
    ) as tight:
        gate = threading.Barrier(12)

        def one() -> None:
            gate.wait()
            resp = triton_client.http_request(
                tight.http_url, "POST", "/v2/models/tiny/infer", body=body
            )
            statuses.append(resp.status)
            if resp.status == 429:
                assert "too many requests" in resp.error_message()

        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    # 1 request/s with a burst of 2: at most 3 of 12 simultaneous requests pass (a 4th if a second
    # has passed), the rest are refused with 429 by nginx, not queued
    assert len(statuses) == 12 and set(statuses) <= {200, 429}
    assert 1 <= statuses.count(200) <= 4 and statuses.count(429) >= 8


def test_load_through_the_front_all_answered_and_equal_local(stack, tiny):
    one = tiny.x[:1]
    want = tiny.local.run(one)
    start = len(stack.front.access_log())
    run = triton_load.counted_run(
        stack.front.http_url, "tiny", {"image": one}, "embedding", total=80, concurrency=4
    )
    assert (run.sent, run.answered, run.failed) == (80, 80, 0), run.first_errors
    for got in run.outputs:
        np.testing.assert_allclose(got, want, **tiny.tol.as_kwargs())

    # only this run's inference lines: a gRPC connection of an earlier test is logged when it
    # closes, which can fall among them
    def infer_lines() -> list[str]:
        lines = stack.front.access_log()[start:]
        return [ln for ln in lines if " POST /v2/models/tiny/infer upstream=" in ln]

    deadline = time.monotonic() + 10
    while len(infer := infer_lines()) < 80 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(infer) == 80, stack.front.access_log()[start:][:5]
    assert {ln.split("upstream=")[1].split()[0] for ln in infer} == {
        stack.a.http_url,
        stack.b.http_url,
    }, "the front did not spread the load over both servers"


def test_killing_one_server_mid_load_loses_no_request(stack, tiny):
    """Runs last: it kills server b."""
    one = tiny.x[:1]
    want = tiny.local.run(one)

    def crash_b() -> None:
        os.killpg(stack.b.proc.pid, signal.SIGKILL)

    run = triton_load.counted_run(
        stack.front.http_url,
        "tiny",
        {"image": one},
        "embedding",
        total=120,
        concurrency=4,
        at=(30, crash_b),
    )
    assert not stack.b.is_alive()
    assert (run.sent, run.answered, run.failed) == (120, 120, 0), run.first_errors
    for got in run.outputs:
        np.testing.assert_allclose(got, want, **tiny.tol.as_kwargs())
    log = stack.front.access_log()
    retried = [line for line in log if f"upstream={stack.b.http_url}, {stack.a.http_url}" in line]
    assert all(line.startswith("200 ") for line in log[-120:])
    print(f"{len(retried)} requests retried on the other server")


def test_a_front_with_no_server_answers_502_as_json():
    with nginx_front.NginxFront(
        ["127.0.0.1:1"], ["127.0.0.1:2"], models=["m"], max_body_bytes=100
    ) as front:
        resp = triton_client.http_request(front.http_url, "GET", "/v2/health/ready")
        refused = triton_client.http_request(front.http_url, "GET", "/v2/repository/index")
    assert resp.status == 502 and "no server could answer" in resp.error_message()
    assert refused.status == 403 and "not an allowed endpoint" in refused.error_message()


def test_no_admin_path_matches_an_allowed_http_location():
    """Catches M22 (the served model's location also allows ``/config``) without a server: each
    administrative path of ADMIN_HTTP, normalised as nginx does, matches no location that passes
    requests on, while the allowed endpoints do (the control)."""
    block = nginx_config.server_blocks(_config())["http server"][0]
    passing = re.findall(r"location ~ (\S+) \{", block)
    assert len(passing) == 3

    def passed_on(path):
        path = os.path.normpath(re.sub(r"/+", "/", path))
        return [rx for rx in passing if re.search(rx, path)]

    for what, _method, path, _body in nginx_front.ADMIN_HTTP:
        assert not passed_on(path.format(m="tiny")), what
    for path in (
        "/v2/health/ready",
        "/v2/models/tiny",
        "/v2/models/tiny/ready",
        "/v2/models/tiny/infer",
    ):
        assert passed_on(path), path
