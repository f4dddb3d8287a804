"""helpers.serving.triton_client without a server: request bodies, loopback-only addresses, response parsing.

The same functions are exercised against a real Triton server in tests/serving/test_triton_server.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.serving import triton_client as sc


def test_json_body_follows_kserve_v2():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    body = json.loads(sc.infer_json_body({"image": x}))
    assert body == {
        "inputs": [
            {"name": "image", "shape": [1, 2, 3], "datatype": "FP32", "data": list(range(6))}
        ]
    }
    wrong = json.loads(
        sc.infer_json_body({"image": x}, datatype="FP64")
    )  # a deliberately wrong declaration
    assert wrong["inputs"][0]["datatype"] == "FP64"
    with pytest.raises(ValueError, match="no Triton datatype"):
        sc.infer_json_body({"s": np.array(["a"])})


def test_binary_body_has_header_then_raw_tensors():
    a = np.ones((2, 3), np.float32)
    b = np.arange(4, dtype=np.int64)
    body, headers = sc.infer_binary_body({"a": a, "b": b})
    n = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:n])
    assert [i["parameters"]["binary_data_size"] for i in header["inputs"]] == [a.nbytes, b.nbytes]
    assert body[n:] == a.tobytes() + b.tobytes()
    assert [i["datatype"] for i in header["inputs"]] == ["FP32", "INT64"]
    with pytest.raises(ValueError, match="no Triton datatype"):
        sc.infer_binary_body({"s": np.array(["a"])})


@pytest.mark.parametrize(
    "url", ["10.0.0.5:8000", "example.com:8001", "127.0.0.1", "127.0.0.1:http", "0.0.0.0:8000"]
)
def test_only_loopback_addresses(url):
    with pytest.raises(ValueError, match="127.0.0.1:PORT"):
        sc.check_loopback(url)
    with pytest.raises(ValueError):
        sc.http_request(url, "GET", "/v2/health/ready")


@pytest.mark.parametrize(
    "url, message",
    [
        ("[::1]:8000", "IPv6 addresses are not supported"),
        ("::1:8000", "IPv6 addresses are not supported"),
        ("[::ffff:127.0.0.1]:8000", "IPv6 addresses are not supported"),
        ("http://127.0.0.1:8000", "without a scheme"),
        ("127.0.0.1:0", r"port 0 is not in 1\.\.65535"),
        ("127.0.0.1:99999", r"port 99999 is not in 1\.\.65535"),
        ("127.0.0.1:٣", "127.0.0.1:PORT"),  # an Arabic-Indic digit: isdigit() but not a port
    ],
)
def test_addresses_http_request_cannot_reach_are_refused_clearly(url, message):
    """check_loopback and http_request agree: what one refuses the other never tries to reach."""
    with pytest.raises(ValueError, match=message):
        sc.check_loopback(url)
    with pytest.raises(ValueError, match=message):  # a clear ValueError, not socket.gaierror
        sc.http_request(url, "GET", "/v2/health/ready", timeout=2)


def test_every_accepted_address_reaches_a_loopback_server():
    """What check_loopback accepts, http_request can reach: a server listening on 127.0.0.1."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        for host in ("127.0.0.1", "localhost"):
            url = f"{host}:{port}"
            assert sc.check_loopback(url) == (host, port)
            resp = sc.http_request(url, "GET", "/", timeout=5)
            assert resp.status == 200 and resp.body == b"ok", url
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_loopback_addresses_accepted_and_refused_connection_is_an_oserror():
    assert sc.check_loopback("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert sc.check_loopback("localhost:8001") == ("localhost", 8001)
    import socket

    with socket.socket() as s:  # a port nobody listens on: bind, never listen
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(OSError):
            sc.http_request(f"127.0.0.1:{port}", "GET", "/", timeout=2)


def test_response_helpers():
    ok = sc.HttpResponse(200, "OK", "HTTP/1.1", body=b'{"ready": true}')
    assert ok.status_line == "HTTP/1.1 200 OK" and ok.json() == {"ready": True}
    bad = sc.HttpResponse(400, "Bad Request", "HTTP/1.1", body=b'{"error": "unexpected shape"}')
    assert bad.error_message() == "unexpected shape"
    raw = sc.HttpResponse(500, "Internal Server Error", "HTTP/1.1", body=b"not json")
    assert raw.error_message() == "not json"
    err = sc.TritonRequestError(404, "unknown model")
    assert err.status == 404 and "HTTP 404" in str(err)


def test_request_tensors_for_both_protocols():
    """One source for the tritonclient inputs of triton_client and triton_load: names, shapes, bytes."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)[:, :, ::-1]  # not C-contiguous
    expected = np.ascontiguousarray(x).tobytes()
    http_in, http_out = sc.request_tensors(httpclient, {"image": x}, "embedding")
    grpc_in, grpc_out = sc.request_tensors(grpcclient, {"image": x}, "embedding")
    for inputs, outputs in ((http_in, http_out), (grpc_in, grpc_out)):
        assert [(i.name(), i.shape(), i.datatype()) for i in inputs] == [
            ("image", [1, 2, 3], "FP32")
        ]
        assert [o.name() for o in outputs] == ["embedding"]
    # HTTP sends the tensor as raw bytes after the JSON header (Triton's binary extension)
    assert http_in[0]._get_binary_data() == expected
    assert http_in[0]._get_tensor()["parameters"] == {"binary_data_size": len(expected)}
    assert grpc_in[0]._get_content() == expected
    with pytest.raises(ValueError, match="no Triton datatype"):
        sc.request_tensors(httpclient, {"s": np.array(["a"])}, "y")


def test_model_stats_reads_again_until_the_requests_are_counted(monkeypatch):
    """Triton counts a request just after answering it: ``min_requests`` waits for the count;
    without it (the control) the first, short read is what comes back."""
    counts = iter([5, 7, 8, 8])

    def fake(url, method, path, headers=None, timeout=30.0):
        n = next(counts)
        stats = {
            "inference_count": n,
            "execution_count": n,
            "inference_stats": {
                "success": {"count": n, "ns": 0},
                "queue": {"ns": 0},
                "compute_infer": {"ns": 1_000_000 * n},
            },
        }
        return sc.HttpResponse(
            200, "OK", "HTTP/1.1", {}, json.dumps({"model_stats": [stats]}).encode()
        )

    monkeypatch.setattr(sc, "http_request", fake)
    assert sc.model_stats("127.0.0.1:1", "m", min_requests=8, timeout_s=5)["requests"] == 8
    counts = iter([5, 7, 8])  # the control: a plain read returns the first, short count
    assert sc.model_stats("127.0.0.1:1", "m")["requests"] == 5
    counts = iter([5] * 100)
    short = sc.model_stats("127.0.0.1:1", "m", min_requests=8, timeout_s=0.15)
    assert short["requests"] == 5  # gave up after its timeout: the caller's check decides
