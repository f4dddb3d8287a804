"""helpers.measure.timer: the timing loop, benchmark, interleaved rounds and their order.

The GPU path of every timer is tested here without a GPU, on a stand-in device whose work is done
only when it is synchronised. OneFlow itself: tests/measure/test_timer_oneflow.py.
"""

# course-test-group: no-oneflow
# (OneFlow appears here only as a framework name and a stand-in module; none is imported)

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from helpers.measure import machine, timer
from helpers.measure.timer import (
    benchmark,
    benchmark_interleaved,
    round_orders,
    synchronize,
    time_calls,
    time_loop,
)
from helpers.show.table import CORES_BUSY, compare_rows


def _ms(values):
    return [v / 1e3 for v in values]


def test_benchmark_counts_warmup_and_repeats():
    calls = []
    m = benchmark(
        lambda: calls.append(1), label="noop", framework="none", warmup=2, repeats=5, items=4
    )
    assert len(calls) == 7
    assert len(m.times_s) == 5 and m.warmup == 2 and m.items == 4
    assert m.label == "noop" and m.framework == "none"
    assert all(t >= 0 for t in m.times_s)
    assert m.throughput == pytest.approx(4 / m.median)  # at the median, like every statistic shown


class _FakeClock:
    """A clock that only moves when the fake work says so: timing without timing noise."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_time_loop_times_the_work_only_when_it_synchronises(monkeypatch):
    """Chapter 0's claim as a unit test: a call that only queues work looks fast without sync."""
    clock = _FakeClock()
    monkeypatch.setattr(timer, "time", clock)
    events, queued = [], []

    def fn():  # queueing costs 1 ms; the work itself (10 ms) is done at the next sync
        events.append("call")
        queued.append(0.010)
        clock.now += 0.001

    def sync():
        events.append("sync")
        clock.now += sum(queued)
        queued.clear()

    honest = time_loop(fn, warmup=2, repeats=3, sync=sync)
    assert honest == pytest.approx([0.011] * 3)
    # warm-up untimed, one sync after it, then a sync inside every timed call
    assert events == ["call", "call", "sync"] + ["call", "sync"] * 3
    events.clear()
    lying = time_loop(fn, warmup=0, repeats=3, sync=None)
    assert lying == pytest.approx([0.001] * 3) and events == ["call"] * 3
    assert time_loop(fn, warmup=1, repeats=0, sync=sync) == []


def test_benchmark_is_the_time_loop_plus_checks(monkeypatch):
    seen = []
    real = timer.time_loop

    def spy(fn, *, warmup, repeats, sync):
        seen.append((warmup, repeats, sync is None))
        return real(fn, warmup=warmup, repeats=repeats, sync=sync)

    monkeypatch.setattr(timer, "time_loop", spy)
    benchmark(lambda: None, framework="none", warmup=2, repeats=4)
    # the warm-up alone, then one synchronised timed call at a time
    assert seen == [(2, 0, False)] + [(0, 1, False)] * 4
    seen.clear()
    m = benchmark(lambda: None, framework="none", warmup=0, repeats=3, progress=True)
    assert len(m.times_s) == 3 and seen[1:] == [(0, 1, False)] * 3  # one call per bar step
    seen.clear()
    time_calls(lambda: None, 3, framework="none")
    assert seen == [(0, 3, False)]


class _FakeDevice:
    """A GPU stand-in on the fake clock: a call only queues its work (1 ms on the clock); the work
    itself runs when the device is synchronised, as on a CUDA stream or in OneFlow's VM."""

    QUEUE_S = 0.001

    def __init__(self, clock, framework):
        self.clock, self.framework = clock, framework
        self.queued, self.events = [], []

    def call(self, label="fn", work_s=0.010):
        def fn():
            self.events.append(label)
            self.queued.append(work_s)
            self.clock.now += self.QUEUE_S

        return fn

    def synchronize(self):
        self.events.append("sync")
        self.clock.now += sum(self.queued)
        self.queued.clear()


@pytest.fixture(params=["torch", "oneflow"])
def fake_device(request, monkeypatch, torch_mod):
    """The timer's GPU path for each framework on a :class:`_FakeDevice`: PyTorch with CUDA
    available and initialised (``torch.cuda.synchronize``), or an imported OneFlow (its
    ``eager.Sync``); either synchronises the fake device. The timer reads the fake clock."""
    clock = _FakeClock()
    monkeypatch.setattr(timer, "time", clock)
    device = _FakeDevice(clock, request.param)
    if request.param == "torch":
        monkeypatch.setattr(torch_mod.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch_mod.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch_mod.cuda, "synchronize", device.synchronize)
    else:
        eager = SimpleNamespace(Sync=device.synchronize)
        stand_in = SimpleNamespace(_oneflow_internal=SimpleNamespace(eager=eager))
        monkeypatch.setitem(sys.modules, "oneflow", stand_in)
    return device


def test_every_timer_waits_for_the_device_after_each_timed_call(fake_device):
    """Each timed call of benchmark, time_calls and benchmark_interleaved takes its queueing plus
    its own work, no more and no less: the timer synchronised after it, and after the warm-up
    (M06 of the mutation sample: interleaved rounds that never synchronised)."""
    dev, fw = fake_device, fake_device.framework
    m = benchmark(dev.call(), framework=fw, warmup=2, repeats=3)
    assert m.times_s == pytest.approx([0.011] * 3) and not dev.queued
    assert time_calls(dev.call(), 3, framework=fw) == pytest.approx([0.011] * 3)
    fns = {"a": dev.call("a", 0.010), "b": dev.call("b", 0.030)}  # b's work is three times a's
    res = benchmark_interleaved(fns, framework=fw, warmup=2, repeats=4)
    assert res["a"].times_s == pytest.approx([0.011] * 4)
    assert res["b"].times_s == pytest.approx([0.031] * 4)
    assert not dev.queued
    # the control: the stand-in device does tell; unsynchronised calls time the queueing only
    assert timer.time_loop(dev.call(), warmup=0, repeats=2, sync=None) == pytest.approx([0.001] * 2)


def test_interleaved_rounds_synchronise_each_warm_up_and_each_call(fake_device):
    """The order of calls and synchronisations: each variant's warm-up, then one synchronised
    call of each variant per round (a spy on the device)."""
    dev, fw = fake_device, fake_device.framework
    fns = {"a": dev.call("a"), "b": dev.call("b")}
    benchmark_interleaved(fns, framework=fw, warmup=2, repeats=3)
    warmups = ["a", "a", "sync", "b", "b", "sync"]
    # time_loop synchronises after its (empty) warm-up too, before the clock starts
    planned = [x for o in round_orders(["a", "b"], 3) for x in o]
    rounds = [e for x in planned for e in ("sync", x, "sync")]
    assert dev.events == ["sync"] + warmups + rounds  # the first: the idle check


def test_benchmark_interleaved_passes_a_synchronising_wait_to_every_loop(monkeypatch):
    seen, real = [], timer.time_loop

    def spy(fn, *, warmup, repeats, sync):
        seen.append((warmup, repeats, sync is None))
        return real(fn, warmup=warmup, repeats=repeats, sync=sync)

    monkeypatch.setattr(timer, "time_loop", spy)
    fns = {"a": lambda: None, "b": lambda: None}
    benchmark_interleaved(fns, framework="none", warmup=1, repeats=2)
    assert seen == [(1, 0, False)] * 2 + [(0, 1, False)] * 4  # warm-ups, then 2 rounds of 2


@pytest.mark.parametrize("repeats", [0, -1, 2.5, True])
def test_benchmark_rejects_bad_repeats(repeats):
    with pytest.raises(ValueError, match="repeats"):
        benchmark(lambda: None, framework="none", repeats=repeats)


def test_benchmark_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup"):
        benchmark(lambda: None, framework="none", warmup=-1)
    with pytest.raises(ValueError, match="items"):
        benchmark(lambda: None, framework="none", items=0)
    with pytest.raises(TypeError, match="callable"):
        benchmark(42, framework="none")


def test_unknown_framework_is_rejected():
    with pytest.raises(ValueError, match="tensorflow"):
        synchronize("tensorflow")
    with pytest.raises(ValueError, match="unknown framework"):
        benchmark(lambda: None, framework="jax")
    with pytest.raises(ValueError, match="unknown framework"):
        time_calls(lambda: None, 2, framework="mxnet")


def test_benchmark_torch_op(torch_mod):
    x = torch_mod.randn(16, 16)
    m = benchmark(lambda: x @ x, framework="torch", warmup=1, repeats=3)
    assert len(m.times_s) == 3 and m.mean > 0


def test_time_calls_returns_one_time_per_call():
    times = time_calls(lambda: None, 4, framework="none")
    assert len(times) == 4
    with pytest.raises(ValueError, match="n must"):
        time_calls(lambda: None, 0, framework="none")


def test_benchmark_interleaved_round_robin_order():

    order = []
    fns = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    res = benchmark_interleaved(
        fns, framework="none", warmup=1, repeats=3, items=2, threads=2, device="cpu"
    )
    assert list(res) == ["a", "b", "c"]
    assert order[:3] == ["a", "b", "c"]  # one warm-up each, then rounds
    assert order[3:] == [x for o in round_orders(["a", "b", "c"], 3) for x in o]
    assert all(len(m.times_s) == 3 and m.items == 2 and m.warmup == 1 for m in res.values())
    assert all(m.threads == 2 and m.device == "cpu" for m in res.values())


def test_benchmark_interleaved_bad_inputs():

    with pytest.raises(ValueError, match="nothing to benchmark"):
        benchmark_interleaved({})
    with pytest.raises(TypeError, match="'x' is not callable"):
        benchmark_interleaved({"x": 3}, framework="none")
    with pytest.raises(ValueError, match="repeats"):
        benchmark_interleaved({"x": lambda: None}, framework="none", repeats=0)
    with pytest.raises(ValueError, match="no framework given"):
        benchmark_interleaved({"x": lambda: None, "y": lambda: None}, framework={"x": "none"})
    with pytest.raises(ValueError, match="unknown framework"):
        benchmark_interleaved({"x": lambda: None}, framework="jax")


def test_benchmark_records_cores_used_and_load(monkeypatch, fake_machine):
    fake = fake_machine
    monkeypatch.setattr(machine, "READERS", fake.readers)

    def work():  # 10 ms of wall time on 2 cores, while a neighbour takes half a core
        fake.run(wall=0.01, own=0.02, others=0.005)

    m = benchmark(work, framework="none", warmup=1, repeats=50, threads=2, device="cpu")
    assert m.cpu_s == pytest.approx(1.0) and m.wall_s == pytest.approx(0.5)
    assert m.cores_used == pytest.approx(2.0) and m.threads == 2 and m.device == "cpu"
    assert m.contended is True and m.load.others_cores == pytest.approx(0.5)
    assert "2.00 cores busy (computing or spinning)" in str(m) and "CONTENDED" in str(m)
    d = m.as_dict()
    assert d["cores_used"] == pytest.approx(2.0) and d["contended"] is True
    row = compare_rows([m])[0]
    assert row["machine"] == "CONTENDED" and row["threads"] == 2 and row["device"] == "cpu"
    assert row[CORES_BUSY] == "2.00"


def test_benchmark_interleaved_cpu_time_per_variant(monkeypatch, fake_machine):
    fake = fake_machine
    monkeypatch.setattr(machine, "READERS", fake.readers)
    fns = {
        "one core": lambda: fake.run(wall=0.02, own=0.02, others=0.0),
        "two cores": lambda: fake.run(wall=0.01, own=0.02, others=0.0),
    }
    res = timer.benchmark_interleaved(fns, framework="none", warmup=1, repeats=4)
    assert res["one core"].cores_used == pytest.approx(1.0)
    assert res["two cores"].cores_used == pytest.approx(2.0)
    assert res["one core"].load is res["two cores"].load and res["one core"].contended is False


def test_benchmark_interleaved_items_per_variant():

    res = benchmark_interleaved(
        {"b1": lambda: None, "b8": lambda: None},
        framework="none",
        repeats=2,
        items={"b1": 1, "b8": 8},
    )
    assert res["b1"].items == 1 and res["b8"].items == 8
    with pytest.raises(ValueError, match="no items given"):
        benchmark_interleaved({"a": lambda: None}, framework="none", items={"b": 1})
    with pytest.raises(ValueError, match="items"):
        benchmark_interleaved({"a": lambda: None}, framework="none", items={"a": 0})


def _adjacent(orders, a, b):
    """Rounds run back to back: is ``a`` ever right before or after ``b``?"""
    seq = [x for o in orders for x in o]
    return any({x, y} == {a, b} for x, y in zip(seq, seq[1:]))


def test_round_orders_are_seeded_random_and_never_repeat_across_rounds():
    labels = ["a", "b", "c", "d"]
    orders = round_orders(labels, 200, seed=3)
    assert orders == round_orders(labels, 200, seed=3)  # repeatable
    assert orders != round_orders(labels, 200, seed=4)
    assert all(sorted(o) == labels for o in orders)
    assert all(o[0] != prev[-1] for prev, o in zip(orders, orders[1:]))  # no variant twice in a row
    firsts = {o[0] for o in orders}
    assert firsts == set(labels)  # every variant leads some rounds (a fixed order: only "a")
    follows = {(x, y) for o in orders for x, y in zip(o, o[1:])}
    assert len(follows) == 12  # every ordered pair of neighbours occurs: no fixed neighbour


def test_round_orders_keep_an_aa_twin_away_from_its_original():
    labels = ["graph", "graph again", "fused", "native"]
    apart = [("graph", "graph again")]
    kept = round_orders(labels, 200, apart=apart)
    assert not _adjacent(kept, "graph", "graph again")
    # the control: without the constraint the twin does run right next to its original
    assert _adjacent(round_orders(labels, 200), "graph", "graph again")
    with pytest.raises(ValueError, match="third"):
        round_orders(["a", "b"], 2, apart=[("a", "b")])
    with pytest.raises(ValueError, match="known labels"):
        round_orders(labels, 2, apart=[("graph", "nope")])


def test_benchmark_interleaved_runs_the_rounds_in_the_planned_order():
    order = []
    fns = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    benchmark_interleaved(fns, framework="none", warmup=0, repeats=5, seed=7)
    assert order == [x for o in round_orders(["a", "b", "c"], 5, seed=7) for x in o]
