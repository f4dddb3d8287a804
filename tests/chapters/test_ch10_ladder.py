"""helpers.chapters.ch10_ladder: the journey through the chapters' records, and the page's views of a climb."""

import math

import pytest
from ladder_support import climb

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


def test_journey_row_says_when_its_record_is_a_ratio_across_processes():
    statistic = "ratio of medians across processes (no interval)"
    records = [dict(r, statistic=statistic) if "compile" in r["name"] else r for r in FULL]
    rows = ladder.journey_rows(records)
    assert rows[-1]["step"].endswith("(medians across processes)")
    assert not any("across" in r["step"] for r in ladder.journey_rows(FULL))


def test_missing_step_is_named_not_invented():
    rows = ladder.journey_rows(FULL[1:])
    assert rows[0]["measured"] is None
    assert rows[0]["source"] == "missing: run 03_dynamic_to_static"
    assert math.isclose(rows[-1]["cumulative_measured"], 2.0 * 4.0 * 1.1)


def test_bad_factor_is_rejected():
    bad = [rec(ladder.TASK_STEPS[0].chapter, ladder.TASK_STEPS[0].record, 0.0)]
    with pytest.raises(ValueError, match="non-positive"):
        ladder.journey_rows(bad)


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


# ---- the page's view of a climb ----


def test_ladder_table():
    lad = climb()
    table = ladder.ladder_table(lad)
    assert table.column("verdict")[:3] == ["baseline", "measured, not built on", "kept"]
    assert table.column("rung")[-1] == "fwd: INT8 runtime"
    assert table.column("over")[5] == "batching"  # the compiler rung, over the kept path
    assert table.column("per-round IQR")[:2] == ["-", lad.rows[1]["ratio"].interval]


def test_order_sentence_names_the_factor_the_order_moved():
    """Exercise 1's answer: both orders' factors with their intervals, and which one moved."""
    from helpers.measure.measurement import Measurement

    def m(label, t):
        return Measurement(label, [t * f for f in (1.0, 1.02, 0.98, 1.01, 0.99)], items=1)

    runs = {"pruned": m("p", 8.0), "+ batching": m("b", 2.0), "+ precision": m("l", 2.0)}
    runs["+ both"] = m("both", 1.0)
    text = ladder.order_sentence(runs)
    assert "batching 4.00x" in text and "then precision 2.00x" in text
    assert "The batching and precision factor changed with the order" in text
    assert "the products are 8.00x and 8.00x" in text
    runs["+ precision"] = m("l", 4.0)  # now each factor is the same in both orders
    assert "No factor moved" in ladder.order_sentence(runs)
