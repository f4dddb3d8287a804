"""helpers.chapters.ch00_measuring: OneFlow's bundled OpenBLAS and per-thread CPU time (chapter 0)."""

from __future__ import annotations

from helpers.chapters import ch00_measuring as ch00


def test_oneflow_blas_reads_the_bundled_library(flow):
    """OneFlow 0.9.0's CPU matmuls: a single-threaded OpenBLAS inside liboneflow (chapter 0)."""
    blas = ch00.oneflow_blas()
    assert blas["library"] == "OpenBLAS (bundled in liboneflow)", blas
    assert blas["threaded"] is False and blas["threads"] == 1
    assert blas["kernels"] != "?" and blas["avx2_kernels"] == (
        blas["kernels"] in ch00.AVX2_BLAS_CORES
    )


def test_thread_cpu_seconds_counts_a_busy_thread():
    import threading
    import time

    stop = threading.Event()

    def spin():  # a thread that polls, like a runtime waiting for work
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        res = ch00.thread_cpu_seconds(lambda: time.sleep(0.5), repeats=1)
    finally:
        stop.set()
        t.join()
    # the spinner, not the sleeper (which stays under the 1 ms floor); on a machine other programs
    # keep busy the spinner gets a small share of a core, so the floor is low
    assert res["wall_s"] >= 0.5 and res["thread_cpu_s"] and res["thread_cpu_s"][0] > 0.02


def test_oneflow_blas_names_no_folder_of_this_machine(flow):
    """The ledger keeps this dict: the library's file name, not the virtual environment's path."""
    blas = ch00.oneflow_blas()
    assert "/" not in blas["file"] and blas["file"].startswith("liboneflow")


def test_cpu_probe_times_both_frameworks_alike(flow):
    import json

    probe = ch00.cpu_probe(n=64, arch="resnet18", image_size=32, batch=2, warmup=1, repeats=2)
    res = probe["resnet"]
    torch_m, flow_m = res["PyTorch"], res["OneFlow"]
    assert torch_m["threads"] == flow_m["threads"] == res["threads"]
    assert torch_m["warmup"] == flow_m["warmup"] == 1 and torch_m["items"] == 2
    assert len(torch_m["times_s"]) == len(flow_m["times_s"]) == 2
    assert set(res["per_thread"]) == {"PyTorch", "OneFlow"}
    assert probe["matmul"]["PyTorch"]["gflops"] > 0 and probe["matmul"]["threads"] == res["threads"]
    json.dumps(probe)  # JSON-ready: a fresh process (run_in_subprocess) returns it


def test_gap_table_says_the_avx2_gain_only_when_the_processes_are_apart():
    from helpers.measure.measurement import Measurement, paired_ratio

    def ratio(flow_ms, torch_ms):
        return paired_ratio(Measurement("flow", flow_ms), Measurement("torch", torch_ms))

    here = {"matmul": ratio([8.0, 8.2, 7.9], [1.0, 1.0, 1.0])}
    assert list(ch00.gap_table(here, None, "t").rows[0]) == [
        "work",
        "OneFlow / PyTorch, as installed",
    ]
    fixed = {"matmul": ratio([2.0, 2.1, 1.9], [1.0, 1.0, 1.0])}
    row = ch00.gap_table(here, fixed, "t").rows[0]
    assert row["OneFlow with AVX2 kernels"] == "4.0x faster"
    overlap = {"matmul": ratio([7.8, 8.3, 8.0], [1.0, 1.0, 1.0])}
    assert ch00.gap_table(here, overlap, "t").rows[0]["OneFlow with AVX2 kernels"] == (
        "inconclusive"
    )
