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
        res = ch00.thread_cpu_seconds(lambda: time.sleep(0.3), repeats=1)
    finally:
        stop.set()
        t.join()
    assert res["wall_s"] >= 0.3 and res["thread_cpu_s"][0] > 0.1  # the spinner, not the sleeper
