"""Tests of helpers.chapters.ch10_ladder (the capstone's ledger arithmetic and plots)."""

import math

import pytest

from helpers.chapters import ch10_ladder as ladder
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


def test_remeasured_fills_a_gap():
    rows = ladder.journey_rows(FULL[1:], remeasured={"static": 1.2})
    assert rows[0]["measured"] == 1.2 and rows[0]["source"] == "re-measured here"


def test_bad_factor_is_rejected():
    bad = [rec(ladder.TASK_STEPS[0].chapter, ladder.TASK_STEPS[0].record, 0.0)]
    with pytest.raises(ValueError, match="non-positive"):
        ladder.journey_rows(bad)
    with pytest.raises(ValueError, match="no steps"):
        ladder.journey_rows(FULL, steps=())


def test_rows_name_device_and_precision():
    on_gpu = [
        rec(s.chapter, s.record, f, device="cuda", precision="tf32")
        for s, f in zip(ladder.TASK_STEPS[1:], (2.0, 4.0, 1.1))
    ]
    rows = ladder.journey_rows(
        on_gpu, remeasured={"static": 1.2}, remeasured_meta={"device": "cpu", "precision": "fp32"}
    )
    assert [(r["device"], r["precision"]) for r in rows] == [("cpu", "fp32")] + [
        ("cuda", "tf32")
    ] * 3
    # a record that does not say where it was measured is shown as such, never guessed
    rows = ladder.journey_rows(FULL)
    assert {(r["device"], r["precision"]) for r in rows} == {
        (ladder.NOT_RECORDED, ladder.NOT_RECORDED)
    }
    # a missing step has no measurement, so no device either, whatever remeasured_meta says
    rows = ladder.journey_rows(FULL[1:], remeasured_meta={"device": "cpu"})
    assert rows[0]["device"] == ladder.NOT_RECORDED


# ---- the cumulative ladder (one task, every rung timed in one interleaved run) ----


def timed(label, per_round, items=1):
    """A Measurement of `items` per call whose round i took per_round[i] * items seconds."""
    return Measurement(label, times_s=[t * items for t in per_round], items=items)


ROUNDS = 9
NOISE = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.01]  # a slow spell hits a whole round


def run(**per_image):
    """One interleaved run: every rung's per-image time, scaled by the same round noise."""
    return {k: timed(k, [v * n for n in NOISE]) for k, v in per_image.items()}


RUNGS = (
    ladder.Rung("naive", "naive"),
    ladder.Rung("graph", "static graph", later=True),
    ladder.Rung("pruning", "pruning"),
    ladder.Rung("batching", "batching"),
    ladder.Rung("compiler", "compiler"),
    ladder.Rung("fwd", "forward only", forward_only=True, over="pruning"),
    ladder.Rung("int8", "INT8 runtime", forward_only=True),
    ladder.Rung("served", "served", forward_only=True, over="int8"),  # skipped: not timed
)
TIMES = {
    "naive": 0.08,
    "static graph (torch.compile)": 0.05,
    "pruning": 0.04,
    "batching": 0.01,
    "compiler (torch.compile)": 0.0101,
    "compiler (folding)": 0.00995,
    "forward only": 0.02,
    "INT8 runtime": 0.004,
}


def test_ladder_factors_are_paired_and_kept_only_above_one():
    m = run(**TIMES)
    rows = ladder.ladder_rows(RUNGS, m)
    by = {r["key"]: r for r in rows}
    # the static graph pays (1.6x) but is applied later: shown, never kept, level unchanged
    assert by["graph"]["verdict"] == "measured, not built on" and not by["graph"]["kept"]
    assert by["graph"]["candidate"] == "static graph (torch.compile)"
    assert "served" not in by  # a rung none of whose candidates ran has no row
    assert math.isclose(by["graph"]["cumulative"], 1.0)
    assert math.isclose(by["pruning"]["factor"], 2.0)  # over naive, the last kept rung
    assert math.isclose(by["batching"]["factor"], 4.0) and by["batching"]["kept"]
    # the compiler's faster candidate is picked; the same noise in every round: IQR is a point
    assert by["compiler"]["candidate"] == "compiler (folding)"
    assert by["compiler"]["kept"]
    e2e = ladder.end_to_end(rows)
    assert math.isclose(e2e.median, 0.08 / 0.00995)
    # the forward-only branch leaves the task at pruning, and does not count end to end
    assert by["fwd"]["over"] == "pruning" and math.isclose(by["fwd"]["factor"], 2.0)
    assert by["int8"]["over"] == "fwd" and math.isclose(by["int8"]["factor"], 5.0)
    assert math.isclose(rows[-1]["cumulative"], 20.0)
    # the case study's factors (REPORTED by rung key); the graph rung's is not counted
    assert math.isclose(rows[-1]["cumulative_reported"], 2.33 * 2.55 * 1.64 / 1.36)
    assert by["graph"]["reported"] == 1.25


def test_a_rung_inside_the_noise_is_not_kept():
    m = run(**TIMES)
    # the compiler rung 1.005x faster on average, but slower in half the rounds: inconclusive
    wobble = [1.02, 0.98, 1.03, 0.97, 1.0, 1.02, 0.98, 1.01, 0.99]
    m["compiler (folding)"] = timed(
        "compiler (folding)", [0.00995 * n * w for n, w in zip(NOISE, wobble)]
    )
    m["compiler (torch.compile)"] = timed("compiler (torch.compile)", [0.0105 * n for n in NOISE])
    rows = ladder.ladder_rows(RUNGS, m)
    by = {r["key"]: r for r in rows}
    assert by["compiler"]["verdict"] == "not kept (inconclusive)"
    assert by["compiler"]["ratio"].p25 <= 1.0 <= by["compiler"]["ratio"].p75
    assert math.isclose(ladder.end_to_end(rows).median, 8.0)  # ends at batching
    # the control: the same rung under a rule that keeps any median above 1 would be kept
    loose = ladder.ladder_rows(RUNGS, m, keep=lambda r: r.median > 1.0)
    assert {r["key"]: r["kept"] for r in loose}["compiler"]
    # a slower rung says so
    m["compiler (folding)"] = timed("compiler (folding)", [0.02 * n for n in NOISE])
    m["compiler (torch.compile)"] = timed("compiler (torch.compile)", [0.03 * n for n in NOISE])
    by = {r["key"]: r for r in ladder.ladder_rows(RUNGS, m)}
    assert by["compiler"]["verdict"] == "not kept (slower)"


def test_end_to_end_is_the_median_of_per_round_ratios():
    m = run(**TIMES)
    m["naive"] = timed("naive", [0.08, 0.09, 0.07, 0.08, 0.1, 0.06, 0.08, 0.08, 0.08])
    e2e = ladder.end_to_end(ladder.ladder_rows(RUNGS, m))
    per_round = sorted(a / b for a, b in zip(m["naive"].times_s, m["compiler (folding)"].times_s))
    assert math.isclose(e2e.median, per_round[4]) and e2e.rounds == ROUNDS
    assert e2e.p25 < e2e.median < e2e.p75


def test_ladder_rejects_bad_input():
    m = run(**TIMES)
    assert len(ladder.ladder_rows(RUNGS, {"naive": m["naive"]})) == 1  # nothing else ran
    with pytest.raises(ValueError, match="baseline"):
        ladder.ladder_rows(RUNGS, {"pruning": m["pruning"]})
    with pytest.raises(ValueError, match="unique"):
        ladder.ladder_rows(RUNGS + (RUNGS[1],), m)
    with pytest.raises(ValueError, match="baseline"):
        ladder.ladder_rows(RUNGS[-1:], m)
    with pytest.raises(ValueError, match="no rungs"):
        ladder.ladder_rows((), m)
    with pytest.raises(ValueError, match="not a rung below"):
        ladder.ladder_rows(RUNGS[:2] + (ladder.Rung("x", "pruning", over="int8"),), m)
    # explicit candidates instead of the label's prefix
    rung = ladder.Rung("x", "anything", candidates=("batching", "nothing timed"))
    assert rung.names(m) == ["batching"]
    short = {**m, "pruning": timed("pruning", [0.04] * 3)}
    with pytest.raises(ValueError, match="one interleaved run"):
        ladder.ladder_rows(RUNGS, short)


def test_sentences_come_from_the_numbers():
    rows = ladder.ladder_rows(RUNGS, run(**TIMES))
    text = " ".join(ladder.explain_gap(rows, ladder.journey_rows(FULL)))
    assert "multiply to 8.04x" in text and "is 8.04x (IQR 8.04-8.04)" in text  # 2 * 4 * 1.005
    assert "13.20x" in text and "above" in text  # the chapters' 1.5 * 2 * 4 * 1.1
    assert "chapter 05 measured 4.00x" in text and "batching gave 4.00x" in text
    line = ladder.static_graph_line(rows)
    assert line.startswith("The final path contains no static graph")
    assert "static graph (torch.compile) at the static graph rung, 1.60x faster" in line
    assert "compiler (torch.compile) at the compiler rung, 0.99x slower" in line
    # when the compiled candidate is the faster one, the final path contains a static graph
    m = run(**{**TIMES, "compiler (torch.compile)": 0.008})
    line = ladder.static_graph_line(ladder.ladder_rows(RUNGS, m))
    assert line.startswith("The final path contains a static graph: compiler (torch.compile)")
    head = ladder.headline(rows, "cpu (bf16, 2 threads)", quick="ResNet-18 at 64 px")
    assert "**8.0x**" in head and "a quick-mode figure (ResNet-18 at 64 px)" in head
    assert "IQR 8.04-8.04 over 9 rounds" in head and "reaches" not in head
    assert "quick-mode" not in ladder.headline(rows, "cuda")
    guide = ladder.ladder_guide(rows, "cpu")
    assert guide[0].startswith("on cpu") and "batching 4.00x" in guide[0]
    assert any("static graph" in g for g in guide) and "INT8 runtime" in guide[-1]


def test_table_and_plot():
    rows = ladder.ladder_rows(RUNGS, run(**TIMES))
    table = ladder.ladder_table(rows)
    assert table.column("verdict")[:3] == ["baseline", "measured, not built on", "kept"]
    assert table.column("rung")[-1] == "fwd: INT8 runtime"
    assert "IQR" in str(table)
    ax = ladder.plot_ladder(rows, direct=ladder.end_to_end(rows))
    assert ax.get_yscale() == "log"
    assert len(ax.get_xticklabels()) == len(rows)
    with pytest.raises(ValueError):
        ladder.plot_ladder([])
