"""Tests of helpers.chapters.ch10_ladder (the capstone's ledger arithmetic and plots)."""

import math

import pytest

from helpers.chapters import ch10_ladder as ladder


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


# ---- the cumulative ladder (one task, every rung timed in one run) ----
RUNGS = (
    ladder.Rung("naive", "naive"),
    ladder.Rung("graph", "static graph", 1.25),
    ladder.Rung("pruning", "pruning", 2.33),
    ladder.Rung("batching", "batching", 2.55),
    ladder.Rung("int8", "INT8 runtime", None, forward_only=True),
)
TIMES = {"naive": 0.08, "graph": 0.1, "pruning": 0.04, "batching": 0.01, "int8": 0.002}


def test_ladder_factors_telescope_to_end_to_end():
    rows = ladder.ladder_rows(RUNGS, TIMES, kept={"graph": False})
    by = {r["key"]: r for r in rows}
    assert math.isclose(by["graph"]["factor"], 0.8)  # measured, shown...
    assert math.isclose(by["graph"]["cumulative"], 1.0)  # ...but it does not move the level
    assert math.isclose(by["pruning"]["factor"], 2.0)  # over naive, the last kept rung
    assert math.isclose(by["batching"]["factor"], 4.0)
    kept = [r["factor"] for r in rows[1:] if r["kept"] and not r["forward_only"]]
    assert math.isclose(math.prod(kept), ladder.end_to_end(rows))
    assert math.isclose(ladder.end_to_end(rows), 8.0)  # forward-only rungs do not count
    assert math.isclose(by["int8"]["factor"], 5.0) and by["int8"]["forward_only"]
    assert math.isclose(rows[-1]["cumulative_reported"], 2.33 * 2.55)  # not-kept: not counted
    # kept by default: the static graph then counts, and pruning is over it
    rows = ladder.ladder_rows(RUNGS, TIMES)
    assert math.isclose(rows[2]["factor"], 2.5)


def test_ladder_rejects_bad_input():
    with pytest.raises(ValueError, match="no time"):
        ladder.ladder_rows(RUNGS, {"naive": 1.0})
    with pytest.raises(ValueError, match="positive"):
        ladder.ladder_rows(RUNGS, {**TIMES, "pruning": 0.0})
    with pytest.raises(ValueError, match="always kept"):
        ladder.ladder_rows(RUNGS, TIMES, kept={"naive": False})
    with pytest.raises(ValueError, match="unique"):
        ladder.ladder_rows(RUNGS + (RUNGS[1],), TIMES)
    with pytest.raises(ValueError, match="forward-only"):
        ladder.ladder_rows(RUNGS[-1:], TIMES)
    with pytest.raises(ValueError, match="no rungs"):
        ladder.ladder_rows((), TIMES)


def test_explain_gap_and_guide_come_from_the_numbers():
    rows = ladder.ladder_rows(RUNGS, TIMES, kept={"graph": False})
    ledger_rows = ladder.journey_rows(FULL)
    text = " ".join(ladder.explain_gap(rows, ledger_rows))
    assert "8.00x" in text and "13.20x" in text  # ladder product; 1.5 * 2 * 4 * 1.1
    assert "static graph (0.80x)" in text and "above" in text
    # each chapter step beside its rungs: static graph not kept (1.00x), batch + pipeline = 4.00x
    assert "chapter 03 measured 1.50x" in text and "static graph gave 1.00x" in text
    assert "chapter 05 measured 4.00x" in text and "batching gave 4.00x" in text
    assert "The largest difference is dynamic -> static (nn.Graph) (1.50x" in text
    guide = ladder.ladder_guide(rows, "cpu")
    assert guide[0].startswith("on cpu") and "batching 4.00x, pruning 2.00x" in guide[0]
    assert any("static graph 0.80x" in g for g in guide)
    assert any("8.0x" in g for g in guide) and "INT8 runtime" in guide[-1]


def test_plot_ladder():
    rows = ladder.ladder_rows(RUNGS, TIMES, kept={"graph": False})
    ax = ladder.plot_ladder(rows, direct=ladder.end_to_end(rows))
    assert ax.get_yscale() == "log"
    assert len(ax.get_xticklabels()) == len(RUNGS)
    with pytest.raises(ValueError):
        ladder.plot_ladder([])
