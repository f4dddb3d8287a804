"""helpers.deploy.runner: one Runner for every runtime (input checks, I/O binding, timing)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.deploy import runner as runner_mod
from helpers.deploy import runtimes


def test_runner_rejects_bad_inputs(tiny_onnx):
    path, x, _ = tiny_onnx
    runner = runtimes.create_session(path, verbose=False)
    with pytest.raises(ValueError, match="rank 3"):
        runner.run(x[0])
    with pytest.raises(TypeError, match="NumPy array"):
        runner.run([1, 2, 3])


def test_a_bound_gpu_run_is_timed_until_its_outputs_are_ready(monkeypatch, tiny_onnx):
    """``Runner.benchmark`` on a GPU times the I/O-bound run through ``synchronize_outputs``: a
    stand-in session whose work is done only then shows each timed call holding its work."""
    from helpers.measure import timer

    clock = type("Clock", (), {"now": 0.0, "perf_counter": lambda self: self.now})()
    monkeypatch.setattr(timer, "time", clock)
    events = []

    class Session:
        def run_with_iobinding(self, binding):
            events.append("run")
            binding.queued += 1
            clock.now += 0.001  # the launch

    class Binding:
        queued = 0

        def synchronize_outputs(self):
            events.append("sync")
            clock.now += 0.010 * self.queued  # the work
            self.queued = 0

    path, x, _ = tiny_onnx
    runner = runtimes.create_session(path, "cpu", intra_op_threads=1, verbose=False)
    runner.device = "cuda:0"
    bound = runner_mod.BoundRun(Session(), Binding(), None)
    monkeypatch.setattr(runner, "bind", lambda arr: bound)
    m = runner.benchmark(x, warmup=2, repeats=3)
    assert m.meta["io_binding"] is True and m.times_s == pytest.approx([0.011] * 3)
    assert events == ["run", "sync"] * 5  # every call, warm-up included, waits for its outputs


def test_io_binding_on_the_cpu_matches_the_plain_run(tiny_onnx):
    """The binding code the GPU timings use, run where ONNX Runtime allows it here: the CPU."""
    path, x, want = tiny_onnx
    runner = runtimes.create_session(path, "cpu", intra_op_threads=1, verbose=False)
    bound = runner.bind(x)
    bound()
    first = bound.output()
    np.testing.assert_array_equal(first, runner.run(x))  # same session, same kernels: bit for bit
    np.testing.assert_allclose(first, want, atol=1e-5)
    bound()  # the binding is reusable: the timed loop calls it again and again
    np.testing.assert_array_equal(bound.output(), first)
    np.testing.assert_array_equal(runner.run(x, io_binding=True), first)
    # the output is bound to the session's device, the input is an OrtValue there
    assert bound.binding.get_outputs()[0].device_name() == "cpu"
    assert bound.value.device_name() == "cpu" and bound.value.shape() == list(x.shape)
    with pytest.raises(ValueError, match="rank 3"):
        runner.bind(x[0])


def test_benchmark_binds_on_a_gpu_and_runs_plain_on_the_cpu(tiny_onnx):
    path, x, _ = tiny_onnx
    runner = runtimes.create_session(path, "cpu", intra_op_threads=1, verbose=False)
    plain = runner.benchmark(x, warmup=1, repeats=2)
    assert plain.meta["io_binding"] is False  # default on the CPU: the plain run
    forced = runner.benchmark(x, warmup=1, repeats=2, io_binding=True)
    assert forced.meta["io_binding"] is True and forced.items == 2
    for m in (plain, forced):
        assert {k: m.meta[k] for k in ("device", "precision", "math_mode", "threads")} == {
            "device": "cpu",
            "precision": "fp32",
            "math_mode": "fp32",
            "threads": 1,
        }
    # a session on a GPU binds by default (the same code path as io_binding=True above)
    runner.device = "cuda:0"
    assert runner.on_device
    seen = []
    runner.bind = lambda arr: seen.append(arr.shape) or (lambda: None)  # type: ignore[method-assign]
    assert runner.benchmark(x, warmup=1, repeats=2).meta["io_binding"] is True
    assert seen == [x.shape]


def test_openvino_has_no_io_binding(tiny_onnx):
    path, x, _ = tiny_onnx
    ov = runtimes.openvino_model(path, precision="f32", threads=1, verbose=False)
    with pytest.raises(TypeError, match="I/O binding"):
        ov.bind(x)
    assert ov.benchmark(x, warmup=1, repeats=2).meta["io_binding"] is False
