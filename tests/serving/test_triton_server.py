"""helpers.serving.triton_server, triton_client and triton_load against a REAL Triton server (nvidia-pytriton).

One server per module (a tiny MobileNetV2 embedder in ONNX Runtime and OpenVINO), started on free
loopback ports. The tests send good and bad requests, load a broken model, and check that no server
process survives: after a ``with`` block that raises, and in a child Python process that dies by an
uncaught exception or by SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from helpers.core import processes, scratch
from helpers.serving import triton_client, triton_load, triton_server
from helpers.serving import triton_repo as sr

pytestmark = pytest.mark.slow
SIZE, DIM = 32, 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_embedder_onnx):
    """A tiny embedder exported to ONNX, a model repository serving it, and local reference outputs."""
    from helpers.deploy import runtimes

    root = tmp_path_factory.mktemp("serving")
    x, onnx_path = tiny_embedder_onnx(root, SIZE, DIM)
    repo = root / "repo"
    spec = dict(
        inputs=[sr.TensorSpec("image", (3, SIZE, SIZE))],
        outputs=[sr.TensorSpec("embedding", (DIM,))],
    )
    sr.python_runtime_model(
        repo,
        "tiny",
        onnx_path,
        runtime="onnxruntime",
        max_batch_size=4,
        dynamic_batching=True,
        **spec,
    )
    sr.python_runtime_model(
        repo, "tiny_ov", onnx_path, runtime="openvino", max_batch_size=4, **spec
    )
    sr.python_runtime_model(
        repo,
        "tiny_fixed",
        onnx_path,
        runtime="onnxruntime",
        max_batch_size=0,
        inputs=[sr.TensorSpec("image", (2, 3, SIZE, SIZE))],
        outputs=[sr.TensorSpec("embedding", (2, DIM))],
    )
    broken = sr.python_runtime_model(
        repo, "broken", onnx_path, runtime="onnxruntime", max_batch_size=4, **spec
    )
    cfg = (
        broken / "config.pbtxt"
    )  # a hand edit the validator would refuse: the server must report it
    cfg.write_text(
        cfg.read_text().replace('string_value: "onnxruntime"', 'string_value: "tensorflow"')
    )
    local = runtimes.create_session(onnx_path, "cpu", intra_op_threads=1, verbose=False)
    return types.SimpleNamespace(repo=repo, x=x, local=local, onnx=onnx_path)


@pytest.fixture(scope="module")
def server(tiny):
    with triton_server.TritonServer(tiny.repo, models=["tiny", "tiny_ov", "tiny_fixed"]) as srv:
        pids = srv.processes()
        yield srv
    assert pids and processes.alive(pids) == [], "server or stub processes survived the with-block"


def _wait_gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    deadline = time.time() + timeout
    while processes.alive(pids) and time.time() < deadline:
        time.sleep(0.2)
    return processes.alive(pids)


# ------------------------------------------------------------------------------------- installation


def test_find_triton_and_environment(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/x")
    inst = triton_server.find_triton()
    assert (
        inst.binary.is_file()
        and inst.stub.is_file()
        and all(p.is_file() for p in inst.backend_files)
    )
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in str(inst.stub)
    lib = triton_server.libpython_dir()
    assert any(lib.glob("libpython3*.so*"))
    env = inst.env
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(lib) and env["LD_LIBRARY_PATH"].endswith(
        "/opt/x"
    )
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        triton_server.TritonServer(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="127.0.0.1"):
        triton_client.http_request("10.1.2.3:8000", "GET", "/v2/health/ready")
    with pytest.raises(ValueError, match="datatype"):
        triton_client.infer_json_body({"x": np.array(["a"])})
    ports = triton_server.free_ports(3)
    assert len(set(ports)) == 3 and all(0 < port < 65536 for port in ports)


# ------------------------------------------------------------------------------------- good requests


def test_health_and_metadata(server):
    ready = triton_client.http_request(server.http_url, "GET", "/v2/health/ready")
    assert ready.status_line == "HTTP/1.1 200 OK"
    meta = triton_client.http_request(server.http_url, "GET", "/v2/models/tiny").json()
    assert (
        meta["inputs"][0]["shape"] == [-1, 3, SIZE, SIZE]
        and meta["outputs"][0]["name"] == "embedding"
    )
    states = {m["name"]: m.get("state") for m in server.repository_index()}
    assert states["tiny"] == "READY" and states["broken"] != "READY"
    assert "127.0.0.1" in repr(server)


def test_http_grpc_and_json_clients_equal_local_inference(server, tiny, infer_json):
    x = tiny.x[:3]
    want = tiny.local.run(x)
    # same ONNX Runtime, same file, one thread on both sides: equal up to float32 rounding
    for got in (
        triton_client.infer("http", server.http_url, "tiny", {"image": x}, "embedding"),
        triton_client.infer("grpc", server.grpc_url, "tiny", {"image": x}, "embedding"),
        infer_json(server.http_url, "tiny", {"image": x})["embedding"],
    ):
        assert got.shape == (3, DIM)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_binary_body_is_understood(server, tiny):
    body, headers = triton_client.infer_binary_body({"image": tiny.x[:2]})
    resp = triton_client.http_request(
        server.http_url, "POST", "/v2/models/tiny/infer", body=body, headers=headers
    )
    assert resp.status == 200, resp.error_message()
    out = resp.json()["outputs"][0]
    got = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
    np.testing.assert_allclose(got, tiny.local.run(tiny.x[:2]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="datatype"):
        triton_client.infer_binary_body({"x": np.array(["a"])})


def test_openvino_and_unbatched_models(server, tiny):
    x = tiny.x[:2]
    ov = triton_client.infer("grpc", server.grpc_url, "tiny_ov", {"image": x}, "embedding")
    np.testing.assert_allclose(
        ov, tiny.local.run(x), atol=1e-4, rtol=0
    )  # OpenVINO f32 vs ONNX Runtime
    fixed = triton_client.infer("http", server.http_url, "tiny_fixed", {"image": x}, "embedding")
    np.testing.assert_allclose(fixed, tiny.local.run(x), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------- bad requests

BAD = [  # (what, model, body builder, statuses, phrase in the error)
    (
        "wrong shape",
        "tiny",
        lambda x: triton_client.infer_json_body({"image": x[:, :, :16]}),
        {400},
        "unexpected shape",
    ),
    (
        "wrong dtype",
        "tiny",
        lambda x: triton_client.infer_json_body({"image": x.astype(np.float64)}),
        {400},
        "data-type",
    ),
    (
        "data not matching dtype",
        "tiny",
        lambda x: triton_client.infer_json_body({"image": x}, datatype="INT32"),
        {400, 500},
        "data",
    ),
    (
        "unknown model",
        "nope",
        lambda x: triton_client.infer_json_body({"image": x}),
        {404},
        "unknown model",
    ),
    (
        "malformed body",
        "tiny",
        lambda x: triton_client.infer_json_body({"image": x})[:40],
        {400, 500},
        "parse",
    ),
    (
        "unknown input",
        "tiny",
        lambda x: triton_client.infer_json_body({"pixels": x}),
        {400},
        "unexpected inference input",
    ),
    (
        "batch too large",
        "tiny",
        lambda x: triton_client.infer_binary_body({"image": np.repeat(x, 5, axis=0)}),
        {400},
        "batch-size",
    ),
]


@pytest.mark.parametrize("what, model, body, statuses, phrase", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_clear_errors_and_server_keeps_serving(
    server, tiny, what, model, body, statuses, phrase, infer_json
):
    x = tiny.x[:1]
    request = body(x)
    data, headers = request if isinstance(request, tuple) else (request, None)
    resp = triton_client.http_request(
        server.http_url, "POST", f"/v2/models/{model}/infer", body=data, headers=headers
    )
    assert resp.status in statuses, f"{what}: {resp.status_line} {resp.body[:200]!r}"
    assert phrase in resp.error_message().lower()
    good = infer_json(server.http_url, "tiny", {"image": x})["embedding"]
    np.testing.assert_allclose(good, tiny.local.run(x), atol=1e-5, rtol=0)
    assert server.is_alive()


def test_client_errors_are_exceptions_not_crashes(server, tiny, infer_json):
    with pytest.raises(triton_client.TritonRequestError) as info:
        infer_json(server.http_url, "nope", {"image": tiny.x[:1]})
    assert info.value.status == 404 and "unknown model" in info.value.message.lower()
    import tritonclient.grpc as grpcclient

    with pytest.raises(grpcclient.InferenceServerException) as gexc:
        triton_client.infer(
            "grpc", server.grpc_url, "tiny", {"image": tiny.x[:1, :, :8]}, "embedding"
        )
    assert "INVALID_ARGUMENT" in str(gexc.value.status())


def test_broken_model_load_reports_the_reason(server):
    with pytest.raises(triton_server.ServerStartError, match="tensorflow"):
        server.load_model("broken", timeout=60)
    assert server.is_alive()
    assert triton_client.http_request(server.http_url, "GET", "/v2/models/tiny/ready").status == 200


def test_model_stats_count_requests_and_batches(server, tiny):
    before = triton_client.model_stats(server.http_url, "tiny")
    run = triton_load.counted_run(
        server.grpc_url,
        "tiny",
        {"image": tiny.x[:1]},
        "embedding",
        total=8,
        concurrency=4,
        protocol="grpc",
    )
    assert (run.answered, run.failed) == (8, 0)
    # Triton counts a request just after answering it: read until all 8 are counted
    after = triton_client.model_stats(server.http_url, "tiny", min_requests=before["requests"] + 8)
    assert after["requests"] >= before["requests"] + 8
    assert after["executions"] <= after["requests"]
    assert sum(after["batch_sizes"].values()) == after["executions"]


def test_prometheus_metrics_count_what_the_server_did(server, tiny):
    before: dict[str, float] = {}
    for _ in range(50):  # settled: two reads 0.2 s apart agree
        now = triton_client.scrape_metrics(server.metrics_url, "tiny")
        if now == before:
            break
        before = now
        time.sleep(0.2)
    stats_before = triton_client.model_stats(server.http_url, "tiny")
    run = triton_load.counted_run(
        server.http_url, "tiny", {"image": tiny.x[:1]}, "embedding", total=12, concurrency=3
    )
    assert (run.sent, run.answered, run.failed) == (12, 12, 0)
    deadline = time.time() + 10  # a server counts a request just after answering it
    while time.time() < deadline:
        after = triton_client.scrape_metrics(server.metrics_url, "tiny")
        if after["nv_inference_request_success"] - before["nv_inference_request_success"] >= 12:
            break
        time.sleep(0.05)
    stats_after = triton_client.model_stats(
        server.http_url, "tiny", min_requests=stats_before["requests"] + 12
    )
    # the metrics and the statistics extension count the same requests and the same compute time
    assert after["nv_inference_request_success"] - before["nv_inference_request_success"] == 12
    assert stats_after["requests"] - stats_before["requests"] == 12
    assert (
        after["nv_inference_compute_infer_duration_us"]
        > before["nv_inference_compute_infer_duration_us"]
    )
    everything = triton_client.scrape_metrics(server.metrics_url)
    assert everything["nv_inference_request_success"] >= after["nv_inference_request_success"]


def test_counted_run_fires_its_action_once_and_refuses_unbounded_runs(server, tiny):
    fired = []
    run = triton_load.counted_run(
        server.grpc_url,
        "tiny",
        {"image": tiny.x[:1]},
        "embedding",
        total=10,
        concurrency=2,
        protocol="grpc",
        at=(4, lambda: fired.append(1)),
    )
    assert run.answered == 10 and fired == [1] and len(run.outputs) == 10
    with pytest.raises(ValueError, match="total"):
        triton_load.counted_run(
            server.http_url, "tiny", {"image": tiny.x[:1]}, "embedding", total=10**6, concurrency=2
        )
    with pytest.raises(ValueError, match="127.0.0.1"):
        triton_load.counted_run(
            "10.0.0.1:8000", "tiny", {"image": tiny.x[:1]}, "embedding", total=1, concurrency=1
        )


def test_perf_analyzer_runs_or_says_what_is_missing(server):
    try:
        triton_load.find_perf_analyzer()
    except FileNotFoundError as exc:
        assert "perf_analyzer" in str(exc)
        pytest.skip(f"perf_analyzer cannot run here: {exc}")
    with pytest.raises(ValueError, match="measurement_ms"):
        triton_load.perf_analyzer(server.grpc_url, "tiny", [1], measurement_ms=10)
    try:
        rows = triton_load.perf_analyzer(server.grpc_url, "tiny", [2], measurement_ms=300)
    except RuntimeError as exc:  # a busy shared machine may never give three stable windows
        assert "stable" in str(exc).lower()
        return
    assert (
        rows[0]["concurrency"] == 2
        and rows[0]["throughput"] > 0
        and rows[0]["p99_ms"] >= rows[0]["p50_ms"]
    )


def test_tritons_own_server_accepts_the_production_configs(tiny, tmp_path):
    """The NGC and OneFlow-Serving layouts checked by Triton itself, not only by the helper's rules.

    The bundled tritonserver (2.51, the server of the NGC 24.10 image) parses, auto-completes and
    validates a model's config.pbtxt before it looks for the model's backend, which it does not
    ship. So "unable to find backend library" is the verdict of a config Triton accepts, while a
    config Triton refuses fails earlier ("Poll failed for model directory"). Two controls with a
    hand-edited config show that the server tells them apart, and that the helper refuses them too.
    """
    graph = tmp_path / "graph" / "model"
    graph.mkdir(parents=True)
    (graph / "model.mlir").write_text("module {}")  # the layout only; the server never reads it
    repo = tmp_path / "prod"
    io = dict(
        inputs=[sr.TensorSpec("image", (3, SIZE, SIZE))],
        outputs=[sr.TensorSpec("embedding", (DIM,))],
    )
    sr.onnxruntime_backend_model(repo, "ort", tiny.onnx, max_batch_size=4, **io)
    sr.onnxruntime_backend_model(
        repo, "ort_trt", tiny.onnx, tensorrt="FP16", max_batch_size=4, **io
    )
    dims = dict(input_dims=(3, SIZE, SIZE), output_dims=(DIM,))
    sr.oneflow_serving_model(repo, "flow", graph, **dims)
    sr.oneflow_serving_model(repo, "flow_trt", graph, xrt="tensorrt", **dims)
    sr.oneflow_serving_model(repo, "flow_ov", graph, xrt="openvino", kind="KIND_CPU", **dims)
    production = {m: c.backend or "onnxruntime" for m, c in sr.validate_repository(repo).items()}
    controls = {  # hand edits: one the schema refuses, one Triton's own validation refuses
        "ctl_unknown_field": ("max_batch_size:", "max_batch_sise:"),
        "ctl_preferred_batch": (
            "dynamic_batching {",
            "dynamic_batching {\n  preferred_batch_size: 64",
        ),
    }
    for name, (old, new) in controls.items():
        shutil.copytree(repo / "ort", repo / name)
        cfg = repo / name / "config.pbtxt"
        text = cfg.read_text().replace('name: "ort"', f'name: "{name}"')
        assert old in text
        cfg.write_text(text.replace(old, new, 1))
        with pytest.raises(sr.ConfigError):
            sr.validate_model_dir(repo / name)
    with triton_server.TritonServer(repo, models=[]) as srv:
        verdicts = {}
        for name in [*production, *controls]:
            resp = triton_client.http_request(
                srv.http_url, "POST", f"/v2/repository/models/{name}/load", body=b"{}", timeout=60
            )
            assert resp.status != 200, f"{name} loaded without its backend?"
            verdicts[name] = resp.error_message()
        log = srv.log()
    for name, backend in production.items():
        assert f"unable to find backend library for backend '{backend}'" in verdicts[name], (
            f"Triton refused the {name} config: {verdicts[name]}"
        )
        assert f"Poll failed for model directory '{name}'" not in log
    for name in controls:
        assert "unable to find backend library" not in verdicts[name], verdicts[name]
        assert f"Poll failed for model directory '{name}'" in log
    assert "preferred size must be <= max batch size" in log


# ------------------------------------------------------------------------------------- lifecycle


def test_start_failure_reports_the_model_error_and_cleans_up(tiny):
    srv = triton_server.TritonServer(tiny.repo, models=["tiny", "broken"])
    with pytest.raises(triton_server.ServerStartError, match="tensorflow") as info:
        srv.start()
    assert "errors in the server log" in str(info.value)
    assert not srv.is_alive() and srv.processes() == []
    assert "broken" in srv.log()  # the log survives stop() for post-mortems


def test_startup_timeout_stops_the_server(tiny):
    srv = triton_server.TritonServer(tiny.repo, models=["tiny"])
    srv.startup_timeout = 0.05
    with pytest.raises(triton_server.ServerStartError, match="timed out"):
        srv.start()
    assert not srv.is_alive()
    assert _wait_gone([srv.pid]) == []


def test_with_block_stops_everything_when_the_body_raises(tiny):
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="midway"):
        with triton_server.TritonServer(tiny.repo, models=["tiny"]) as srv:
            pids = srv.processes()
            assert len(pids) >= 2  # server + one stub
            raise RuntimeError("a test failing midway")
    assert processes.alive(pids) == []
    code = srv.proc.returncode
    assert srv.stop() == code and not srv.is_alive()  # stop() again is harmless


def test_a_forgotten_server_is_stopped_when_garbage_collected(tiny):
    import gc

    srv = triton_server.TritonServer(tiny.repo, models=["tiny"]).start()
    pids, workdir = srv.processes(), srv.workdir
    assert workdir.is_dir()
    del srv  # no stop(), no with-block: the finalizer must stop it and delete its work folder
    gc.collect()
    assert _wait_gone(pids) == [] and not workdir.exists()


CHILD = textwrap.dedent("""
    import atexit, json, os, signal, sys
    state = {}
    # registered before helpers is imported, so it runs after the helpers' own exit hook (LIFO)
    atexit.register(lambda: print("alive after the exit hook:", state["srv"].is_alive(), flush=True))
    from helpers.serving import triton_server
    state["srv"] = triton_server.TritonServer(sys.argv[1], models=["tiny"]).start()
    print(json.dumps(state["srv"].processes()), flush=True)
    print("workdir", state["srv"].workdir, flush=True)
    print("watchdog", state["srv"]._watchdog.pid, flush=True)
    if sys.argv[2] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)   # no atexit, no finally: only the watchdog is left
    raise RuntimeError("the notebook cell failed")  # uncaught: the atexit hook stops the server
""")


@pytest.mark.parametrize("how", ["exception", "sigkill"])
def test_no_server_survives_its_python_process(tiny, tmp_path, monkeypatch, how):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    # A scratch root of its own: another process of this user (a notebook, a parallel test run)
    # would otherwise sweep the killed child's work folder before this test looks for it.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny.repo), how],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert lines, f"child did not start the server: {proc.stdout[-500:]} {proc.stderr[-1500:]}"
    pids = json.loads(lines[-1])
    assert len(pids) >= 2
    watchdog = int(
        next(x for x in proc.stdout.splitlines() if x.startswith("watchdog ")).split()[1]
    )
    workdir = Path(
        next(line for line in proc.stdout.splitlines() if line.startswith("workdir ")).split(
            " ", 1
        )[1]
    )
    if how == "exception":
        # the helpers' atexit hook (not the watchdog) stopped it and cleaned up
        assert "alive after the exit hook: False" in proc.stdout
        assert not workdir.exists()
    assert _wait_gone(pids) == [], f"processes survived the death of their parent ({how})"
    assert _wait_gone([watchdog]) == [], f"the watchdog survived ({how})"
    if how == "sigkill":
        # Nothing ran in the killed process: the next server start removes its work folder.
        assert workdir.exists() and workdir.is_relative_to(private_tmp)
        monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
        scratch.sweep_stale()
        assert not workdir.exists()


def test_server_started_by_a_thread_outlives_the_thread(tiny, monkeypatch):
    """Started without preexec_fn (Python between fork and exec can deadlock in a threaded kernel)
    and not tied to the starting thread: Linux's parent-death signal (prctl PR_SET_PDEATHSIG) fires
    when the thread that started the server exits, so a server started by a worker thread would die
    with it. The watchdog instead follows the whole process."""
    calls: list[tuple[tuple, dict]] = []
    real_popen = subprocess.Popen

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(processes.subprocess, "Popen", spy)
    box: dict[str, triton_server.TritonServer] = {}

    def start() -> None:
        box["srv"] = triton_server.TritonServer(tiny.repo, models=[]).start()

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(180)
    assert not thread.is_alive() and "srv" in box, "the server did not start"
    srv = box["srv"]
    try:
        launches = [kw for args, kw in calls if Path(args[0][0]).name == "tritonserver"]
        assert launches and all(
            kw.get("preexec_fn") is None and kw.get("start_new_session") for kw in launches
        )
        time.sleep(1.0)  # a parent-death signal would have killed it by now
        assert srv.is_alive(), "the server died with the thread that started it"
        ready = triton_client.http_request(srv.http_url, "GET", "/v2/health/ready", timeout=5)
        assert ready.status == 200
        watchdog = srv._watchdog.pid
        assert processes.alive([watchdog]) == [watchdog]
    finally:
        srv.stop()
    assert processes.alive([watchdog]) == [] and srv._watchdog is None
