"""Tests of the capstone's ladder: the climb (helpers.measure.ladder) and its page's views."""

import math

import pytest

from helpers.chapters import ch10_ladder as ladder
from helpers.measure import ladder as climbing
from helpers.measure.measurement import Measurement


def rec(chapter, name, value, **extra):
    return {"chapter": chapter, "name": name, "value": value, "unit": "x", **extra}


FULL = [rec(s.chapter, s.record, f) for s, f in zip(ladder.TASK_STEPS, (1.5, 2.0, 4.0, 1.1))]


def test_journey_rows_multiply_measured_and_reported():
    rows = ladder.journey_rows(FULL)
    assert [r["source"] for r in rows] == ["ledger"] * 4
    assert math.isclose(rows[-1]["cumulative_measured"], 1.5 * 2.0 * 4.0 * 1.1)
    expected = math.prod(s.reported for s in ladder.TASK_STEPS)
    assert math.isclose(rows[-1]["cumulative_reported"], expected)
    assert 20 < expected < 23  # the case study's "about 21x"


def test_reported_cumulative_is_the_articles_21_beside_its_factors_22():
    """Both figures are the article's: its "about 21x" and its step factors' product, 22.0x."""
    from helpers.record.reported import RESNET101_ONEFLOW as R

    expected = math.prod(s.reported for s in ladder.TASK_STEPS)
    assert R["cumulative"] == 21.0 and R["cumulative_of_factors"] == round(expected, 1) == 22.0
    # 21x fits the article's other two wordings of the compile total, 1.56x and about 1.6x
    for other in (R["compile_total_vs_best"], R["compile_total_summary"]):
        assert round(expected / R["compile_total"] * other) == 21
    line = ladder.article_line()
    for figure in ("22.0x", '"about 21x"', "+64% (1.64x)", '"1.56 倍"', '"约 1.6 倍"', "20.9x"):
        assert figure in line, (figure, line)
    assert "the course uses 1.64x" in line and "more than 25x" in line


def test_missing_step_is_named_not_invented():
    rows = ladder.journey_rows(FULL[1:])
    assert rows[0]["measured"] is None
    assert rows[0]["source"] == "missing: run 03_dynamic_to_static"
    assert math.isclose(rows[-1]["cumulative_measured"], 2.0 * 4.0 * 1.1)


def test_bad_factor_is_rejected():
    bad = [rec(ladder.TASK_STEPS[0].chapter, ladder.TASK_STEPS[0].record, 0.0)]
    with pytest.raises(ValueError, match="non-positive"):
        ladder.journey_rows(bad)
    with pytest.raises(ValueError, match="no steps"):
        ladder.journey_rows(FULL, steps=())


def rows_missing_first(records):
    return ladder.journey_rows(records[1:])


def test_rows_name_device_and_precision():
    on_gpu = [
        rec(s.chapter, s.record, f, device="cuda", precision="tf32")
        for s, f in zip(ladder.TASK_STEPS[1:], (2.0, 4.0, 1.1))
    ]
    rows = ladder.journey_rows(on_gpu)
    assert [(r["device"], r["precision"]) for r in rows][1:] == [("cuda", "tf32")] * 3
    # a record that does not say where it was measured is shown as such, never guessed
    rows = ladder.journey_rows(FULL)
    assert {(r["device"], r["precision"]) for r in rows} == {
        (ladder.NOT_RECORDED, ladder.NOT_RECORDED)
    }
    # a missing step has no measurement, so no device either
    assert rows_missing_first(FULL)[0]["device"] == ladder.NOT_RECORDED


# ---- the climb (helpers.measure.ladder): each rung on the last kept path ----


NOISE = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.01]  # a slow spell hits a whole round
ROUNDS = len(NOISE)


def cost(s):
    """Seconds per image of the path the settings `s` describe (a model of the capstone)."""
    t = 0.08
    t /= 2.0 if s.get("pruned") else 1.0
    t /= 4.0 if s.get("batch", 1) > 1 else 1.0
    t *= 1.3 if s.get("pipeline") else 1.0  # slower here: must not be carried upward
    t /= s.get("fold", 1.0)
    t /= 2.0 if s.get("forward") else 1.0
    t /= 5.0 if s.get("int8") else 1.0
    return t


def build(s):
    return climbing.Timed(lambda s=dict(s): cost(s), items=2)


def fake_timer(fns, *, items, repeats, wobble=None, **_):
    """benchmark_interleaved's stand-in: each path's cost, scaled by the same round noise."""
    out = {}
    for label, fn in fns.items():
        per_image = fn()
        w = (wobble or {}).get(label, [1.0] * repeats)
        times = [per_image * items[label] * n * x for n, x in zip(NOISE[:repeats], w)]
        out[label] = Measurement(label, times_s=times, items=items[label])
    return out


R = climbing.Rung
RUNGS = [
    R("graph", "static graph", {"static graph (torch.compile)": {"fold": 1.6}}, later=True),
    R("pruning", "pruning", {"pruning": {"pruned": True}}, reported=2.33),
    R("batching", "batching", {"batching": {"batch": 16}}),
    R(
        "pipelining",
        "pipelining",
        {"pipelining": {"pipeline": True}},
        controls={"A/A: pipelining again": {"pipeline": True}},
        twins=(("pipelining", "A/A: pipelining again"),),
        why=lambda row: "two cores",
    ),
    R(
        "compiler",
        "compiler",
        {"compiler (torch.compile)": {"fold": 0.99}, "compiler (folding)": {"fold": 1.25}},
    ),
    R(
        "fwd",
        "forward only",
        {"forward only": {"forward": True}},
        forward_only=True,
        branch="pipelining",
        task_change=True,
    ),
    R("int8", "INT8 runtime", {"INT8 runtime": {"int8": True}}, forward_only=True),
]


def climb(rungs=RUNGS, **kw):
    timer = kw.pop("timer", fake_timer)
    return climbing.climb({}, rungs, build, rounds=ROUNDS, timer=timer, **kw)


def test_each_rung_builds_on_the_last_kept_path_only():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    # pipelining is slower: not kept, and no path above it contains it
    assert by["pipelining"]["verdict"] == "not kept (slower)"
    assert by["compiler"]["base"] == "batching" and by["compiler"]["over"] == "batching"
    assert not lad.paths["compiler (folding)"].get("pipeline")
    assert not lad.paths["forward only"].get("pipeline")  # the branch leaves from what was kept
    assert by["fwd"]["base"] == "batching" and by["int8"]["base"] == "forward only"
    # the control: the same climb with pipelining kept carries it into every path above
    lad_loose = climb(keep=lambda r: True)
    assert lad_loose.paths["compiler (folding)"]["pipeline"]
    assert {r["key"]: r["base"] for r in lad_loose.rows}["compiler"] == "pipelining"


def test_factors_are_paired_over_the_base_and_the_end_is_measured():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    assert by["graph"]["verdict"] == "measured, not built on" and not by["graph"]["kept"]
    assert by["graph"]["base"] == "naive" and math.isclose(by["graph"]["factor"], 1.6)
    assert math.isclose(by["pruning"]["factor"], 2.0) and by["pruning"]["kept"]
    assert math.isclose(by["batching"]["factor"], 4.0)
    assert by["compiler"]["candidate"] == "compiler (folding)"  # the faster candidate
    assert math.isclose(by["compiler"]["factor"], 1.25) and by["compiler"]["kept"]
    assert lad.final == "compiler (folding)"
    assert math.isclose(lad.end_to_end.median, 10.0)  # 2 * 4 * 1.25, timed together
    assert set(lad.final_stage) == {"naive", "compiler (folding)"}
    assert math.isclose(by["compiler"]["cumulative"], 10.0)  # the chained estimate
    # the forward-only branch is a task change: shown, never counted as a speed-up
    assert by["fwd"]["verdict"] == "a different task" and math.isclose(by["fwd"]["factor"], 2.0)
    assert math.isclose(by["int8"]["factor"], 5.0) and by["int8"]["kept"]
    assert [r["candidate"] for r in lad.kept()] == ["pruning", "batching", "compiler (folding)"]
    assert by["pruning"]["reported"] == 2.33 and by["batching"]["reported"] is None


def test_a_dropped_rung_says_why_from_its_numbers():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    reason = by["pipelining"]["reason"]
    assert reason.startswith("slower: 0.77x") and "lies below 1" in reason
    assert reason.endswith("; two cores")  # the page's own reason, from the rung's why
    assert by["graph"]["reason"].startswith("measured, not built on")
    assert by["pruning"]["reason"] == ""  # kept: nothing to explain
    # an inconclusive rung: faster on average, slower in some rounds
    wobble = {"compiler (folding)": [0.9, 1.35, 0.9, 1.35, 0.9, 1.35, 0.9, 1.35, 0.9]}
    wobble["compiler (torch.compile)"] = [1.0] * ROUNDS
    lad = climb(timer=lambda fns, **kw: fake_timer(fns, wobble=wobble, **kw))
    row = {r["key"]: r for r in lad.rows}["compiler"]
    assert row["verdict"] == "not kept (inconclusive)" and "holds 1" in row["reason"]
    assert "compiler (torch.compile) 0.99x" in row["reason"]  # the other candidate's factor
    assert lad.final == "batching" and math.isclose(lad.end_to_end.median, 8.0)


def test_climb_rejects_bad_ladders():
    with pytest.raises(ValueError, match="no rungs"):
        climb([])
    with pytest.raises(ValueError, match="unique"):
        climb(RUNGS + [RUNGS[1]])
    with pytest.raises(ValueError, match="unique"):
        climb([R("a", "a", {"x": {}}), R("b", "b", {"x": {}})])
    with pytest.raises(ValueError, match="no candidates"):
        climb([R("a", "a", {})])
    with pytest.raises(ValueError, match="branch"):
        climb([R("a", "a", {"x": {}}, branch="a")])
    with pytest.raises(ValueError, match="later"):
        climb([R("a", "a", {"x": {}}, later=True)])
    with pytest.raises(ValueError, match="no branch"):
        climb([R("a", "a", {"x": {"forward": True}}, forward_only=True)])


def test_a_climb_with_real_timings():
    """The real benchmark_interleaved: a path 4x as fast is kept, one 4x slower is dropped.

    Sleeps, not spins: a busy machine delays a sleeping call by its scheduling jitter only."""
    import time

    def real(s):
        t = 0.02 / (4.0 if s.get("fast") else 1.0) * (4.0 if s.get("slow") else 1.0)
        return climbing.Timed(lambda: time.sleep(t), items=1, framework="none")

    rungs = [R("a", "a", {"fast": {"fast": True}}), R("b", "b", {"slow": {"slow": True}})]
    lad = climbing.climb({}, rungs, real, rounds=9)
    assert [r["verdict"] for r in lad.rows] == ["baseline", "kept", "not kept (slower)"]
    assert lad.final == "fast" and lad.end_to_end.median > 2.0


# ---- the page's presentation of a climb (ch10_ladder) ----


def test_sentences_come_from_the_numbers():
    lad = climb()
    text = " ".join(ladder.explain_gap(lad, ladder.journey_rows(FULL)))
    assert "multiply to 10.00x" in text and "is 10.00x (IQR 10.00-10.00)" in text
    assert "13.20x" in text and "above" in text  # the chapters' 1.5 * 2 * 4 * 1.1
    assert "chapter 05 measured 4.00x" in text and "pipelining gave 4.00x" in text
    line = ladder.static_graph_line(lad)
    assert line.startswith("The final path contains no static graph")
    assert "static graph (torch.compile) at the static graph rung, 1.60x faster" in line
    assert "compiler (torch.compile) at the compiler rung, 0.99x slower" in line
    head = ladder.headline(lad, "cpu (bf16, 2 threads)", quick="ResNet-18 at 64 px")
    assert "**10.0x**" in head and "a quick-mode figure (ResNet-18 at 64 px)" in head
    assert "IQR 10.00-10.00 over 9 rounds" in head and "80.00 -> 8.00 ms" in head
    assert "quick-mode" not in ladder.headline(lad, "cuda")
    guide = ladder.ladder_guide(lad, "cpu")
    assert guide[0].startswith("on cpu") and "batching 4.00x" in guide[0]
    assert any(g.startswith("not built on: pipelining: slower") for g in guide)
    assert any("pruning -> batching -> compiler (folding)" in g for g in guide)
    assert any("static graph" in g for g in guide) and "INT8 runtime" in guide[-1]
    assert ladder.dropped_lines(lad)[0].startswith("static graph (torch.compile): measured")


def test_table_and_plot():
    lad = climb()
    table = ladder.ladder_table(lad)
    assert table.column("verdict")[:3] == ["baseline", "measured, not built on", "kept"]
    assert table.column("rung")[-1] == "fwd: INT8 runtime"
    assert table.column("over")[5] == "batching"  # the compiler rung, over the kept path
    assert "IQR" in str(table)
    ax = ladder.plot_ladder(lad)
    assert ax.get_yscale() == "log"
    assert len(ax.get_xticklabels()) == len(lad.rows)
