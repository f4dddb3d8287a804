"""helpers.core.benchmarking: timing, synchronisation, Measurement statistics, comparison tables."""

from __future__ import annotations

import pytest

from helpers.core import benchmarking
from helpers.core.benchmarking import (
    SPREAD_WARNING,
    Measurement,
    benchmark,
    compare_rows,
    compare_table,
    format_table,
    percentile,
    speedup,
    synchronize,
    time_calls,
    time_loop,
)


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
    monkeypatch.setattr(benchmarking, "time", clock)
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
    real = benchmarking.time_loop

    def spy(fn, *, warmup, repeats, sync):
        seen.append((warmup, repeats, sync is None))
        return real(fn, warmup=warmup, repeats=repeats, sync=sync)

    monkeypatch.setattr(benchmarking, "time_loop", spy)
    benchmark(lambda: None, framework="none", warmup=2, repeats=4)
    benchmark(lambda: None, framework="none", warmup=1, repeats=2, sync=False)
    # the warm-up alone, then the timed calls (memory tracking starts in between)
    assert seen == [(2, 0, False), (0, 4, False), (1, 0, True), (0, 2, True)]
    seen.clear()
    m = benchmark(lambda: None, framework="none", warmup=0, repeats=3, progress=True)
    assert len(m.times_s) == 3 and seen[1:] == [(0, 1, False)] * 3  # one call per bar step
    seen.clear()
    time_calls(lambda: None, 3, framework="none")
    assert seen == [(0, 3, False)]


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


def test_benchmark_oneflow_sync_path(flow):
    x = flow.randn(16, 16)
    synchronize("oneflow")
    m = benchmark(lambda: flow.matmul(x, x), label="flow", framework="oneflow", warmup=1, repeats=3)
    assert m.framework == "oneflow" and len(m.times_s) == 3 and m.mean > 0


def test_track_memory_records_a_peak():
    m = benchmark(
        lambda: bytearray(1 << 20), framework="none", warmup=0, repeats=2, track_memory=True
    )
    assert m.peak_memory_bytes is not None and m.peak_memory_bytes >= 0
    assert m.memory_kind in ("cpu rss increase", "cuda allocated")


def test_time_calls_returns_one_time_per_call():
    times = time_calls(lambda: None, 4, framework="none")
    assert len(times) == 4
    with pytest.raises(ValueError, match="n must"):
        time_calls(lambda: None, 0, framework="none")


def test_measurement_percentiles_on_known_times():
    m = Measurement("known", _ms(range(1, 101)))  # 1..100 ms
    assert m.mean == pytest.approx(0.0505)
    assert m.median == pytest.approx(0.0505)
    assert m.p90 == pytest.approx(0.0901)  # linear interpolation: 1 + 0.9 * 99 ms
    assert m.p99 == pytest.approx(0.09901)
    assert m.min == pytest.approx(0.001)
    assert m.std == pytest.approx(0.029011, rel=1e-4)
    d = m.as_dict()
    assert d["repeats"] == 100 and d["p99_s"] == pytest.approx(m.p99)


def test_measurement_order_does_not_matter_and_single_value():
    m = Measurement("rev", _ms(range(100, 0, -1)))
    assert m.p90 == pytest.approx(0.0901)
    one = Measurement("one", [0.002])
    assert one.std == 0.0 and one.p99 == one.median == 0.002


def test_measurement_rejects_empty_and_bad_items():
    with pytest.raises(ValueError, match="no timings"):
        Measurement("empty", [])
    with pytest.raises(ValueError, match="items"):
        Measurement("bad", [0.1], items=0)
    for bad in (float("nan"), -0.001, float("inf"), "1"):
        with pytest.raises(ValueError, match="finite seconds >= 0"):
            Measurement("bad", [0.1, bad])


def test_measurement_spread_statistics():
    m = Measurement("known", _ms(range(1, 101)))  # 1..100 ms
    assert m.p25 == pytest.approx(0.02575) and m.p75 == pytest.approx(0.07525)
    assert m.iqr == pytest.approx(0.0495) and m.relative_iqr == pytest.approx(0.0495 / 0.0505)
    assert m.tail_ratio == pytest.approx(0.09901 / 0.0505) and m.max == pytest.approx(0.1)
    assert m.runs == 100 and m.as_dict()["iqr_s"] == pytest.approx(m.iqr)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_measurement_str_leads_with_median_and_p99():
    text = str(Measurement("eager", _ms([10, 10, 10, 10, 12]), items=2, warmup=3))
    assert text == (
        "eager: median 10.00 ms, p99 11.92 ms per call (5 runs after 3 warm-up)\n"
        "  spread: IQR 0.00 ms (0% of the median), p99/p50 1.19; mean 10.40 +- 0.89 ms; "
        "200.0 items/s at the median"
    )


def test_measurement_warns_when_the_spread_is_large():
    steady = Measurement("steady", _ms([10, 10.2, 10.4, 10.6, 10.8]))  # IQR 0.4 ms = 4 %
    assert not steady.noisy and steady.warnings() == [] and "WARNING" not in str(steady)
    noisy = Measurement("noisy", _ms([8, 10, 12, 14, 30]))  # IQR 4 ms = 33 % of the median
    assert noisy.relative_iqr > SPREAD_WARNING and noisy.noisy
    last = str(noisy).splitlines()[-1]
    assert last.startswith("  WARNING: the IQR is 33% of the median (over 10%)")
    # the threshold itself: just under and just over 10 % of the median
    assert not Measurement("under", _ms([9.6, 9.9, 10, 10.4, 10.4])).noisy  # IQR 5 %
    assert Measurement("over", _ms([9, 9.4, 10, 10.5, 11])).noisy  # IQR 11 %
    # fewer than 4 runs: no quartiles to speak of, no warning
    assert not Measurement("few", _ms([1, 5, 9])).noisy


def test_speedup_ratio():
    base = Measurement("base", _ms([20, 20]), items=1)
    fast = Measurement("fast", _ms([10, 10]), items=1)
    batched = Measurement("batched", _ms([40, 40]), items=8)  # 200 items/s vs 50 items/s
    assert speedup(base, fast) == pytest.approx(2.0)
    assert speedup(fast, base) == pytest.approx(0.5)
    assert speedup(base, batched) == pytest.approx(4.0)


def test_compare_table_contains_labels_and_speedups():
    base = Measurement("eager-baseline", _ms([20, 20]))
    fast = Measurement("static-graph", _ms([10, 10]))
    rows = compare_rows([base, fast])
    assert [r["label"] for r in rows] == ["eager-baseline", "static-graph"]
    assert list(rows[0]) == [
        "label",
        "device",
        "threads",
        "cores_used",
        "runs",
        "p50_ms",
        "p99_ms",
        "iqr_pct",
        "items_per_s",
        "speedup",
        "machine",
    ]
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[1]["speedup"] == pytest.approx(2.0)
    table = compare_table([base, fast])
    lines = table.splitlines()
    assert len(lines) == 4 and set(lines[1]) <= {"-", " "}
    assert "eager-baseline" in table and "static-graph" in table and "2.00" in table
    # an explicit baseline
    assert compare_rows([base, fast], baseline=fast)[0]["speedup"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="nothing to compare"):
        compare_table([])


def test_format_table_alignment_and_empty():
    table = format_table([{"name": "a", "x": 1.5}, {"name": "long-name", "x": 22.25}])
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # aligned columns
    assert "1.50" in table and "22.25" in table and "long-name" in table
    with pytest.raises(ValueError):
        format_table([])
    with pytest.raises(ValueError, match=r"row 1 lacks \['x'\]"):
        format_table([{"name": "a", "x": 1.5}, {"name": "b"}])


def test_benchmark_interleaved_round_robin_order():
    from helpers.core.benchmarking import benchmark_interleaved

    order = []
    fns = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    res = benchmark_interleaved(
        fns, framework="none", warmup=1, repeats=3, items=2, rotate=False, threads=2, device="cpu"
    )
    assert list(res) == ["a", "b", "c"]
    assert order[:3] == ["a", "b", "c"]  # one warm-up each, then rounds
    assert order[3:] == ["a", "b", "c"] * 3
    assert all(len(m.times_s) == 3 and m.items == 2 and m.warmup == 1 for m in res.values())
    assert all(m.threads == 2 and m.device == "cpu" for m in res.values())


def test_benchmark_interleaved_rotates_the_order_by_default():
    """Each round starts one variant later: every variant runs first, and after each other, alike."""
    from helpers.core.benchmarking import benchmark_interleaved

    order = []
    fns = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    benchmark_interleaved(fns, framework="none", warmup=0, repeats=3)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    firsts = [order[i] for i in (0, 3, 6)]
    assert sorted(firsts) == ["a", "b", "c"]  # mutation: without rotation 'a' is always first


def test_benchmark_interleaved_bad_inputs():
    from helpers.core.benchmarking import benchmark_interleaved

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


# ---- threads, cores used, machine load ----------------------------------------------------------

STAT = "cpu  {user} 0 {system} 5000 7 0 0 {steal} 0 0\ncpu0 1 2 3 4\n"


def test_read_proc_stat_sums_busy_and_steal():
    assert benchmarking.read_proc_stat(STAT.format(user=100, system=50, steal=7)) == (150, 7)
    text = "cpu  10 1 2 900 3 4 5 6 0 0\n"  # user nice system idle iowait irq softirq steal
    assert benchmarking.read_proc_stat(text) == (10 + 1 + 2 + 4 + 5, 6)  # idle/iowait are not busy
    with pytest.raises(ValueError, match="no aggregate"):
        benchmarking.read_proc_stat("cpu0 1 2 3\n")
    real = benchmarking.read_proc_stat()  # this machine (Linux): two non-negative counters
    assert real is None or (real[0] >= 0 and real[1] >= 0)


class _FakeMachine:
    """Injectable readers: a wall clock, this process's CPU clock and /proc/stat, moved by hand."""

    def __init__(self, cpus=2, ticks=100):
        self.wall = 0.0
        self.own = 0.0  # this process's CPU seconds
        self.busy = 0.0  # all CPUs' busy seconds (/proc/stat reports whole ticks of them)
        self.steal = 0.0
        self.la = 1.0
        self.readers = benchmarking._Readers(
            proc_stat=lambda: (round(self.busy * ticks), round(self.steal * ticks)),
            family_cpu_s=lambda: self.own,
            process_cpu_s=lambda: self.own,
            wall_s=lambda: self.wall,
            loadavg=lambda: self.la,
            clock_ticks=ticks,
            cpus=cpus,
        )

    def run(self, wall, own, others, steal=0.0):
        """Advance: `wall` seconds pass, we use `own` CPU seconds, others `others` (busy ticks)."""
        self.wall += wall
        self.own += own
        self.busy += own + others
        self.steal += steal


def test_load_probe_quiet_and_contended():
    fake = _FakeMachine()
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=2.0, others=0.05)  # we used both cores; others 5% of one core
    quiet = probe.stop()
    assert quiet.others_cpu_s == pytest.approx(0.05) and quiet.contended is False
    assert quiet.resolution_s == pytest.approx(2 * 2 / 100)  # two ticks per CPU
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.la = 2.5
    fake.run(wall=1.0, own=1.0, others=0.6)  # a neighbour took 0.6 of a core
    busy = probe.stop()
    assert busy.others_cores == pytest.approx(0.6) and busy.contended is True
    assert busy.loadavg_before == 1.0 and busy.loadavg_after == 2.5
    assert "CONTENDED" in busy.describe() and busy.as_dict()["contended"] is True
    assert benchmarking.LOAD_LOG[-2:] == [quiet, busy]  # the ledger's default stamp reads these


def test_contended_rule_threshold_and_steal():
    """The rule: others' CPU > CONTENDED_SHARE of one core over the wall time + tick resolution."""
    fake = _FakeMachine()
    limit = benchmarking.CONTENDED_SHARE * 10.0 + 2 * 2 / 100
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=limit - 0.02)
    assert probe.stop().contended is False  # mutation: a rule without the share fails here
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=limit + 0.02)
    assert probe.stop().contended is True
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=0.0, steal=2.0)  # the hypervisor's other guests
    load = probe.stop()
    assert load.steal_s == pytest.approx(2.0) and load.contended is True


def test_load_unknown_without_proc_stat():
    fake = _FakeMachine()
    fake.readers.proc_stat = lambda: None
    probe = benchmarking.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=5.0)
    load = probe.stop()
    assert load.contended is None and load.others_cores is None  # unknown, never "quiet"
    assert "load unknown" in load.describe()


def test_benchmark_records_cores_used_and_load(monkeypatch):
    fake = _FakeMachine()
    monkeypatch.setattr(benchmarking, "READERS", fake.readers)

    def work():  # 10 ms of wall time on 2 cores, while a neighbour takes half a core
        fake.run(wall=0.01, own=0.02, others=0.005)

    m = benchmark(work, framework="none", warmup=1, repeats=50, threads=2, device="cpu")
    assert m.cpu_s == pytest.approx(1.0) and m.wall_s == pytest.approx(0.5)
    assert m.cores_used == pytest.approx(2.0) and m.threads == 2 and m.device == "cpu"
    assert m.contended is True and m.load.others_cores == pytest.approx(0.5)
    assert "2.00 cores used" in str(m) and "CONTENDED" in str(m)
    d = m.as_dict()
    assert d["cores_used"] == pytest.approx(2.0) and d["contended"] is True
    row = compare_rows([m])[0]
    assert row["machine"] == "CONTENDED" and row["threads"] == 2 and row["device"] == "cpu"
    assert row["cores_used"] == "2.00"


def test_benchmark_interleaved_cpu_time_per_variant(monkeypatch):
    fake = _FakeMachine()
    monkeypatch.setattr(benchmarking, "READERS", fake.readers)
    fns = {
        "one core": lambda: fake.run(wall=0.02, own=0.02, others=0.0),
        "two cores": lambda: fake.run(wall=0.01, own=0.02, others=0.0),
    }
    res = benchmarking.benchmark_interleaved(fns, framework="none", warmup=1, repeats=4)
    assert res["one core"].cores_used == pytest.approx(1.0)
    assert res["two cores"].cores_used == pytest.approx(2.0)
    assert res["one core"].load is res["two cores"].load and res["one core"].contended is False


def test_measurement_without_load_shows_unknowns():
    m = Measurement("m", [0.01] * 4)
    assert m.cores_used is None and m.contended is None
    row = compare_rows([m])[0]
    assert row["machine"] == "?" and row["cores_used"] == "?" and row["device"] == "?"
    m.meta.update(device="cuda:0", threads=4)  # runtimes.Runner puts them in meta
    row = compare_rows([m])[0]
    assert row["device"] == "cuda:0" and row["threads"] == 4


def test_framework_threads_reads_torch(torch_mod):
    assert benchmarking.framework_threads("torch") == torch_mod.get_num_threads()
    assert benchmarking.framework_threads("onnxruntime") is None  # per session: the caller says
    m = benchmark(lambda: None, framework="torch", repeats=2)
    assert m.threads == torch_mod.get_num_threads()


def test_paired_ratio_median_and_spread():
    base = Measurement("base", [0.010, 0.012, 0.011, 0.020], items=1)
    fast = Measurement("fast", [0.005, 0.006, 0.0055, 0.010], items=1)
    r = benchmarking.paired_ratio(base, fast)
    assert r.rounds == 4 and r.median == pytest.approx(2.0) and r.iqr == pytest.approx(0.0)
    assert "2.00x" in str(r) and "4 rounds" in str(r)
    per_item = Measurement("batch 2", [0.010] * 4, items=2)
    assert benchmarking.paired_ratio(base, per_item).ratios[0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="one interleaved run"):
        benchmarking.paired_ratio(base, Measurement("short", [0.01]))


def test_benchmark_interleaved_items_per_variant():
    from helpers.core.benchmarking import benchmark_interleaved

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


def test_measurement_round_trips_through_a_dict():
    """What a subprocess sends back (as_dict + times_s) becomes the same Measurement again."""
    from helpers.core.benchmarking import MachineLoad, measurement_from_dict

    load = MachineLoad(2.0, 0.5, 0.0, 1.0, 1.5, resolution_s=0.04)
    m = Measurement(
        "x", [0.01, 0.02, 0.03], items=4, threads=2, device="cpu", cpu_s=3.0, wall_s=2.0
    )
    m.load = load
    back = measurement_from_dict({**m.as_dict(), "times_s": m.times_s})
    assert back.times_s == m.times_s and back.items == 4 and back.threads == 2
    assert back.cores_used == pytest.approx(1.5) and back.contended is True
    assert back.load.others_cores == pytest.approx(0.25)


def test_thread_cpu_seconds_counts_a_busy_thread():
    import threading
    import time

    from helpers.core.benchmarking import thread_cpu_seconds

    stop = threading.Event()

    def spin():  # a thread that polls, like a runtime waiting for work
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        res = thread_cpu_seconds(lambda: time.sleep(0.3), repeats=1)
    finally:
        stop.set()
        t.join()
    assert res["wall_s"] >= 0.3 and res["thread_cpu_s"][0] > 0.1  # the spinner, not the sleeper
