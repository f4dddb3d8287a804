"""Tests of helpers.perf.ladder (the capstone's ledger arithmetic and plots)."""

import math

import pytest

from helpers.perf import ladder


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
    assert ladder.missing_steps(rows) == [ladder.TASK_STEPS[0].label]
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


def test_runtime_table_and_best():
    recs = [
        rec("07_onnx_runtimes", "fps_ort_batch1", 100.0, runtime="ORT", mode="full"),
        rec("07_onnx_runtimes", "fps_ov_batch1", 150.0, runtime="OpenVINO", mode="full"),
        rec("07_onnx_runtimes", "fps_ort_batch8", 400.0, runtime="ORT", mode="full"),
        rec("07_onnx_runtimes", "nodes_simplified", 5.0),
    ]
    table = ladder.runtime_table(recs)
    assert len(table) == 3 and {row["mode"] for row in table} == {"full"}
    best = ladder.best_by_batch(table)
    assert best[1]["runtime"] == "OpenVINO" and best[8]["runtime"] == "ORT"
    lines = ladder.recommend(best, has_gpu=False)
    assert any("OpenVINO" in line for line in lines) and any("no GPU" in line for line in lines)
    assert not any("quick-mode" in line for line in lines)
    assert "run chapter 7" in ladder.recommend({}, has_gpu=False)[0]


def test_recommend_flags_quick_mode_and_names_the_int8_record():
    quick = {1: {"runtime": "ORT", "batch": 1, "images_per_s": 100.0, "mode": "quick"}}
    int8 = rec("08_int8_quantization", "resnet101_b16_ort_int8_vs_eager_speedup", 3.4, batch=16)
    lines = ladder.recommend(quick, has_gpu=True, int8=int8)
    assert any("quick-mode" in line for line in lines)
    int8_line = next(line for line in lines if line.startswith("INT8"))
    assert "resnet101_b16_ort_int8_vs_eager_speedup" in int8_line and "batch 16" in int8_line
    assert "3.40x" in int8_line
    assert any("TensorRT" in line for line in lines)


def test_first_record():
    recs = [rec("08_int8_quantization", "b", 2.0)]
    assert ladder.first_record(recs, "08_int8_quantization", ["a", "b"])["value"] == 2.0
    assert ladder.first_record(recs, "08_int8_quantization", ["a"]) is None


def test_plot_waterfall():
    ax = ladder.plot_waterfall(ladder.journey_rows(FULL[1:]))
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError):
        ladder.plot_waterfall([])


def test_remeasure_rejects_unknown_steps():
    with pytest.raises(ValueError, match="only 'static' and 'pruning'"):
        ladder.remeasure_task_steps(None, "resnet18", None, ["parallel"])
    assert ladder.remeasure_task_steps(None, "resnet18", None, []) == {}


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


def test_measured_on_and_runtime_table_metadata():
    assert ladder.measured_on({"device": "cuda:0", "precision": "tf32"}) == "cuda:0, tf32"
    assert ladder.measured_on({"device": "cpu", "precision": ""}) == "cpu, not recorded"
    assert ladder.measured_on(None) == "not recorded, not recorded"
    recs = [
        rec("07_onnx_runtimes", "fps_ort_batch1", 100.0, runtime="ORT", device="cpu"),
        rec("07_onnx_runtimes", "fps_trt_batch1", 900.0, device="cuda", precision="fp16"),
    ]
    table = ladder.runtime_table(recs)
    assert [(r["device"], r["precision"]) for r in table] == [
        ("cuda", "fp16"),
        ("cpu", ladder.NOT_RECORDED),
    ]
    lines = ladder.recommend(ladder.best_by_batch(table), has_gpu=True)
    assert "(cuda, fp16)" in lines[0]


def test_remeasure_runs_on_the_given_oneflow_device():
    torch = pytest.importorskip("torch")
    pytest.importorskip("oneflow")
    from helpers.workload import models

    model = models.build_resnet("torch", "resnet18", num_classes=4).eval()
    x = torch.randn(1, 3, 32, 32)
    # one nn.Graph (the original task) against eager: the cheaper of the two steps
    out = ladder.remeasure_task_steps(
        model, "resnet18", x, ["static"], device="cpu", warmup=0, repeats=1
    )
    assert set(out) == {"static"}
    assert all(math.isfinite(v) and v > 0 for v in out.values())


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
