"""helpers.show.table: Table (text and HTML), tables of measurements."""

from __future__ import annotations

import pytest

from helpers.measure.measurement import Measurement, paired_ratio
from helpers.show.table import Table, compare_rows, compare_table, paired_table


def _ms(values):
    return [v / 1e3 for v in values]


def test_compare_table_contains_labels_and_speedups():
    base = Measurement("eager-baseline", _ms([20, 20]))
    fast = Measurement("static-graph", _ms([10, 10]))
    rows = compare_rows([base, fast])
    assert [r["label"] for r in rows] == ["eager-baseline", "static-graph"]
    assert list(rows[0]) == [
        "label",
        "device",
        "threads",
        "cores busy (computing or spinning)",
        "runs",
        "p50_ms",
        "p99_ms",
        "iqr_pct",
        "items_per_s",
        "speedup",
        "machine",
    ]
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[1]["speedup"] == pytest.approx(2.0)
    table = str(compare_table([base, fast]))
    lines = table.splitlines()
    assert len(lines) == 4 and set(lines[1]) <= {"-", " "}
    assert "eager-baseline" in table and "static-graph" in table and "2.00" in table
    batched = Measurement("batched", _ms([40, 40]), items=8)  # per item: 200 items/s against 50
    assert compare_rows([base, batched])[1]["speedup"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="nothing to compare"):
        compare_table([])


def test_text_table_alignment_and_empty():
    table = str(Table([{"name": "a", "x": 1.5}, {"name": "long-name", "x": 22.25}]))
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # aligned columns
    assert "1.50" in table and "22.25" in table and "long-name" in table
    with pytest.raises(ValueError):
        Table([])
    with pytest.raises(ValueError, match=r"row 1 lacks \['x'\]"):
        Table([{"name": "a", "x": 1.5}, {"name": "b"}])


def test_measurement_without_load_shows_unknowns():
    m = Measurement("m", [0.01] * 4)
    assert m.cores_used is None and m.contended is None
    row = compare_rows([m])[0]
    assert (
        row["machine"] == "?"
        and row["cores busy (computing or spinning)"] == "?"
        and row["device"] == "?"
    )
    m.meta.update(device="cuda:0", threads=4)  # deploy.runner.Runner puts them in meta
    row = compare_rows([m])[0]
    assert row["device"] == "cuda:0" and row["threads"] == 4


def test_table_renders_as_text_and_as_html():
    rows = [
        {"name": "a<b", "ms": 1.5, "n": 3, "note": None},
        {"name": "c", "ms": 22.25, "n": 10, "note": "x"},
    ]
    t = Table(rows, title="Two rows", formats={"ms": ".1f"}, notes=["a note"])
    text = str(t)
    assert text.splitlines()[0] == "Two rows" and text.splitlines()[-1] == "a note"
    assert "1.5" in text and "22.2" in text and "-" in text.splitlines()[3]  # None shows as -
    html = t._repr_html_()
    assert html.startswith('<table class="course-table"') and "<caption" in html
    assert "a&lt;b" in html and "<b" not in html.replace("<br", "")  # cells are escaped
    assert html.count("<tr>") == 3 and "text-align:right" in html  # numbers right-aligned
    assert t.column("n") == [3, 10] and len(t.rows) == 2
    with pytest.raises(KeyError, match="no column"):
        t.column("nope")
    with pytest.raises(ValueError, match="unknown columns"):
        Table(rows, formats={"nope": ".1f"})
    assert repr(t) == text  # a terminal shows the text form


def test_paired_table_gives_one_statistic_per_column_and_says_inconclusive():
    base = Measurement("eager", _ms([20, 22, 21, 20]))
    twin = Measurement("eager again", _ms([21, 21, 20, 22]))  # an A/A twin: about 1x
    fast = Measurement("runtime", _ms([10, 11, 10, 10]))
    table = paired_table({"eager": base, "eager again": twin, "runtime": fast}, "eager")
    rows = {r["variant"]: r for r in table.rows}
    assert rows["eager"]["speedup"] == "1 (baseline)"
    assert rows["eager again"]["reading"] == "inconclusive"
    assert rows["runtime"]["reading"] == "faster" and rows["runtime"]["speedup"].startswith("2.0")
    assert rows["runtime"]["ms per call"] == pytest.approx(10.0)
    assert rows["runtime"]["per-round IQR"] == paired_ratio(base, fast).interval
    meta = {
        "runtime": {"precision": "fp32"},
        "eager": {"precision": "fp32"},
        "eager again": {"precision": "fp32"},
    }
    assert (
        paired_table({"eager": base, "runtime": fast}, "eager", meta=meta).columns[1] == "precision"
    )
    with pytest.raises(KeyError, match="baseline"):
        paired_table({"runtime": fast}, "eager")
