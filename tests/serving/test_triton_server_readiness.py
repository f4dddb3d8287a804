"""Server readiness against model readiness, and Triton's restricted administrative APIs.

A REAL Triton server (loopback only). With ``--strict-readiness=true`` one model that fails to
load makes ``/v2/health/ready`` answer 400 while the other models keep serving: a readiness probe
on it would drain a replica that works. The per-model endpoint tells the truth either way; the
production chapter's manifests probe it. ``admin_key`` turns on Triton's restricted-API options:
model control, configuration, statistics, shared memory, trace and logging need the key, over
HTTP and gRPC, while inference and health stay open.
"""

from __future__ import annotations

import shutil

import pytest

from helpers.serving import triton_client, triton_server
from helpers.serving import triton_repo as sr

pytestmark = pytest.mark.slow
SIZE, DIM = 32, 8


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_embedder_onnx):
    root = tmp_path_factory.mktemp("ready")
    x, onnx_path = tiny_embedder_onnx(root, SIZE, DIM)
    sr.python_runtime_model(
        root / "repo",
        "tiny",
        onnx_path,
        runtime="onnxruntime",
        max_batch_size=4,
        inputs=[sr.TensorSpec("image", (3, SIZE, SIZE))],
        outputs=[sr.TensorSpec("embedding", (DIM,))],
    )
    broken = root / "repo" / "broken"
    shutil.copytree(root / "repo" / "tiny", broken)
    cfg = broken / "config.pbtxt"
    cfg.write_text(
        cfg.read_text()
        .replace('name: "tiny"', 'name: "broken"')
        .replace('string_value: "onnxruntime"', 'string_value: "tensorflow"')
    )
    return root / "repo", x


def _status(server, path: str) -> int:
    return triton_client.http_request(server.http_url, "GET", path).status


@pytest.mark.parametrize("strict", [True, False])
def test_one_broken_model_and_the_readiness_endpoints(repo, strict):
    path, x = repo
    with triton_server.TritonServer(path, models=["tiny"], strict_readiness=strict) as server:
        assert _status(server, "/v2/health/ready") == 200
        with pytest.raises(triton_server.ServerStartError, match="tensorflow"):
            server.load_model("broken", timeout=60)
        # the other model still serves, and says so
        assert _status(server, "/v2/models/tiny/ready") == 200
        out = triton_client.infer("http", server.http_url, "tiny", {"image": x[:1]}, "embedding")
        assert out.shape == (1, DIM)
        server_ready = _status(server, "/v2/health/ready")
        assert server_ready == (400 if strict else 200)
        server.unload_model("broken")
        # strict: unloading the failed model does not bring the server back to "ready"
        assert _status(server, "/v2/health/ready") == server_ready
        assert _status(server, "/v2/health/live") == 200


def test_restricted_admin_apis_need_the_key(repo):
    import tritonclient.grpc as grpcclient

    path, x = repo
    with triton_server.TritonServer(path, models=["tiny"], admin_key="k-0123456789") as server:
        url = server.http_url
        # the helper's own model control sends the key (start-up waited on the index with it)
        assert [m["name"] for m in server.repository_index() if m.get("state") == "READY"] == [
            "tiny"
        ]
        for method, p, body in [
            ("POST", "/v2/repository/index", "{}"),
            ("GET", "/v2/models/tiny/config", None),
            ("GET", "/v2/models/tiny/stats", None),
            ("GET", "/v2/systemsharedmemory/status", None),
            ("POST", "/v2/logging", '{"log_verbose_level": 1}'),
            ("GET", "/v2/trace/setting", None),
        ]:
            without = triton_client.http_request(url, method, p, body=body)
            assert without.status == 403 and "restricted" in without.error_message(), p
            keyed = triton_client.http_request(
                url, method, p, body=body, headers=server.admin_headers
            )
            assert keyed.status == 200, (p, keyed.status, keyed.body[:200])
        out = triton_client.infer("http", url, "tiny", {"image": x[:1]}, "embedding")
        assert out.shape == (1, DIM)
        client = grpcclient.InferenceServerClient(url=server.grpc_url)
        try:
            # refused with UNAVAILABLE (a status clients retry) in 2.51, and the gRPC header is
            # the HTTP one prefixed "triton-grpc-protocol-"
            with pytest.raises(grpcclient.InferenceServerException, match="restricted"):
                client.get_model_repository_index(headers=server.admin_headers)
            keyed = client.get_model_repository_index(headers=server.grpc_admin_headers)
            assert [m.name for m in keyed.models] == ["broken", "tiny"]
            assert client.is_model_ready("tiny")
        finally:
            client.close()
    with pytest.raises(ValueError, match="admin_key"):
        triton_server.TritonServer(path, admin_key="short")
