"""helpers.measure.timer with OneFlow itself (the oneflow test group; tests/measure/test_timer.py proves the
synchronisation of every timer with a stand-in device, without OneFlow)."""

from __future__ import annotations

from helpers.measure import timer
from helpers.measure.timer import benchmark, benchmark_interleaved, synchronize


def test_benchmark_oneflow_sync_path(flow):
    x = flow.randn(16, 16)
    synchronize("oneflow")
    m = benchmark(lambda: flow.matmul(x, x), label="flow", framework="oneflow", warmup=1, repeats=3)
    assert m.framework == "oneflow" and len(m.times_s) == 3 and m.mean > 0


def test_every_oneflow_timer_calls_oneflows_own_sync(flow, monkeypatch):
    """The real ``eager.Sync`` follows each timed call: benchmark, time_calls, interleaved."""
    eager = flow._oneflow_internal.eager
    real, calls = eager.Sync, []
    monkeypatch.setattr(eager, "Sync", lambda: calls.append(1) or real())
    x = flow.randn(8, 8)

    def fn():
        return flow.matmul(x, x)

    # (time_loop also syncs once before its first timed call, after its warm-up even when empty)
    benchmark(fn, framework="oneflow", warmup=2, repeats=3)
    assert len(calls) == 1 + 1 + 3 * (1 + 1)  # idle start, after the warm-up, 3 one-call loops
    calls.clear()
    timer.time_calls(fn, 4, framework="oneflow")
    assert len(calls) == 1 + 4  # before the first timed call, then after each
    calls.clear()
    benchmark_interleaved({"a": fn, "b": fn}, framework="oneflow", warmup=1, repeats=3)
    assert len(calls) == 1 + 2 + 2 * 3 * (1 + 1)  # name check, 2 warm-ups, 6 one-call loops
