"""helpers.chapters.ch08_report: chapter 8's tables and sentences follow the numbers they are given."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chapters import ch08_report as report
from helpers.measure.measurement import paired_ratio


def _m(label, times, items=1):
    from helpers.measure.measurement import Measurement

    return Measurement(label=label, times_s=list(times), items=items, threads=2)


def _timed(per_call):
    """{batch: (rows, runs)} as measure_variants returns them, from per-call seconds per variant."""
    out = {}
    for b, calls in per_call.items():
        runs = {k: _m(k, t, items=b) for k, t in calls.items()}
        rows = [
            {
                "variant": k,
                "precision": "int8" if "int8" in k else "fp32",
                "threads": 2,
                "device": "cpu",
                "batch": b,
                "median_s": runs[k].median,
                "ratio": paired_ratio(runs["PyTorch eager fp32"], runs[k]),
            }
            for k in calls
        ]
        out[b] = (rows, runs)
    return out


def test_variants_table_keeps_numbers_and_names_the_accuracy_model():
    row = {
        "variant": "v",
        "precision": "int8",
        "threads": 2,
        "median_s": 0.5,
        "p25_s": 0.4,
        "p75_s": 0.6,
        "vs_eager": 2.0,
        "accuracy": 0.75,
        "drop_points": 0.39,
    }
    table = report.variants_table([row], "accuracy (ResNet-18 trained, 32 px)")
    assert table.rows[0]["vs eager"] == 2.0 and "accuracy" not in table.columns
    text = str(table)
    assert "75.00%" in text and "+0.39" in text and "0.400-0.600" in text


def test_check_text_shows_what_was_required_and_the_controls():
    from helpers.core.comparison import assert_task_level

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(32, 8)) * 4
    check = assert_task_level(
        ref + rng.normal(0, 0.01, ref.shape),
        ref,
        mode="int8",
        logits=True,
        network="resnet18",
        name="int8",
    )
    text = report.check_text(check)
    assert text.startswith("passes (int8): each row nearest its own reference 100%, lowest ")
    assert "top-1 kept on " in text and "controls fail (negated 0%, shifted rows 0%" in text
    assert report.check_text(AssertionError("task-level check: moved")) == "FAILS: moved"


def test_small_model_sentences_say_inconclusive_when_the_interval_holds_one():
    u8, s8 = "ORT int8 (QDQ, U8S8)", "ORT int8 (QDQ, S8S8)"
    calls = {
        1: {
            "PyTorch eager fp32": [4e-3] * 5,
            "ORT fp32": [1e-3] * 5,
            u8: [1e-3, 0.9e-3, 1.1e-3, 1e-3, 1e-3],
            s8: [3e-3] * 5,
        },
        8: {
            "PyTorch eager fp32": [20e-3] * 5,
            "ORT fp32": [8e-3] * 5,
            u8: [2e-3] * 5,
            s8: [6e-3] * 5,
        },
    }
    executed = {f: {"integer convs (QLinearConv)": 20} for f in ("U8S8", "S8S8")}
    text = " ".join(report.small_model_sentences(_timed(calls), executed, 32))
    assert "U8S8 against S8S8: **3.00x faster**" in text
    assert "inconclusive" in text and "4.00x faster at batch 8" in text  # batch 1 holds 1


def test_wait_policy_sentences_give_the_runtime_over_both_pytorch_rows():
    """The one-thread PyTorch control: its cost under the policy, and the runtime's lead over
    PyTorch on both thread counts; without the control only the policy is stated."""
    base, one, ort = "PyTorch eager fp32", "PyTorch eager fp32, 1 thread", "ORT fp32"
    calls = {
        1: {base: [8e-3] * 5, one: [2e-3] * 5, ort: [1e-3] * 5},
        8: {base: [16e-3] * 5, one: [16e-3, 15e-3, 17e-3, 16e-3, 16e-3], ort: [4e-3] * 5},
    }
    text = " ".join(report.wait_policy_sentences(_timed(calls), ort, "PASSIVE"))
    assert text.startswith("Wait policy: PASSIVE.") and "on 2 threads" in text
    assert "4.00x faster at batch 1" in text and "inconclusive" in text
    assert "8.00x (8.00-8.00) over PyTorch on 2 threads and 2.00x" in text
    no_control = {b: {base: c[base], ort: c[ort]} for b, c in calls.items()}
    assert report.wait_policy_sentences(_timed(no_control), ort, "X") == ["Wait policy: X."]


def test_target_sentences_derive_the_bound_from_the_measured_ceiling():
    base, best = "PyTorch eager fp32", "OpenVINO int8 (NNCF)"
    runs = {base: _m(base, [1.0, 1.1, 0.9]), best: _m(best, [0.2, 0.21, 0.19])}
    ratio = {k: paired_ratio(runs[base], m) for k, m in runs.items()}
    rows = [
        {
            "variant": base,
            "median_s": 1.0,
            "batch": 16,
            "precision": "fp32",
            "gops": 100.0,
            "pct_of_ceiling": 50.0,
            "vs_eager": 1.0,
            "ratio": ratio[base],
        },
        {
            "variant": best,
            "median_s": 0.2,
            "batch": 16,
            "precision": "int8",
            "gops": 500.0,
            "pct_of_ceiling": 62.5,
            "vs_eager": 5.0,
            "ratio": ratio[best],
            "drop_points": 0.0,
        },
    ]
    text = " ".join(report.target_sentences(rows, runs, {"int8": 800.0}, rows[1], rows[1], 0.5))
    assert "8.0x eager" in text and "62% of that bound" in text and "goal" not in text.lower()
    assert "failed the INT8 rule" not in text
    text = " ".join(report.target_sentences(rows, runs, {"int8": 800.0}, rows[1], rows[0], 0.5))
    assert "failed the INT8 rule" in text and f"**{base}**" in text
    assert "62% of this CPU's int8 ceiling" in text and "nan" not in text
    no_vnni = [rows[0], {**rows[1], "pct_of_ceiling": float("nan")}]  # no int8 ceiling
    text = " ".join(
        report.target_sentences(no_vnni, runs, {"fp32": 200.0}, no_vnni[1], no_vnni[1], 0.5)
    )
    assert "no int8 ceiling measured on this CPU" in text and "nan" not in text
    assert "fp32 eager runs at 50% of this CPU's fp32 ceiling" in text
    said = report.target_sentences(rows, runs, {}, rows[1], rows[1], cross_cosine=0.999991)
    assert said[-1].startswith("(The random network's logits") and "0.99999:" in said[-1]


def test_target_report_shows_the_table_the_sentences_and_the_bars(capsys):
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    base, best = "PyTorch eager fp32", "OpenVINO int8 (NNCF)"
    runs = {base: _m(base, [1.0, 1.1, 0.9]), best: _m(best, [0.2, 0.21, 0.19])}
    common = {"batch": 16, "threads": 2, "p25_s": 0.1, "p75_s": 0.3, "accuracy": 0.9}
    rows = [
        {"variant": base, "precision": "fp32", "median_s": 1.0, "vs_eager": 1.0, **common},
        {"variant": best, "precision": "int8", "median_s": 0.2, "vs_eager": 5.0, **common},
    ]
    for r in rows:
        r |= {"ratio": paired_ratio(runs[base], runs[r["variant"]]), "drop_points": 0.0}
    want = np.eye(4, dtype=np.float32)
    report.target_report(rows, runs, {}, rows[1], rows[1], want, "resnet18", 32)
    out = capsys.readouterr().out
    assert "accuracy (trained ResNet-18, 32 px)" in out and f"**{best}**" in out
    assert "cosine of 0.00000" in out  # the random network's logits: orthogonal here
    assert [p.get_height() for p in plt.gca().patches] == [5.0]  # the baseline is no bar


def test_variant_records_name_every_batch_and_variant_and_plots_draw_them():
    import matplotlib

    matplotlib.use("Agg")
    timed = _timed({1: {"PyTorch eager fp32": [2.0, 2.1], "ORT int8 (QDQ, U8S8)": [1.0, 1.0]}})
    timed |= _timed({8: {"PyTorch eager fp32": [8.0, 8.2], "ORT int8 (QDQ, U8S8)": [2.0, 2.0]}})
    recs = {f"fps_{v}_batch{b}": (m, how) for b, v, m, how in report.variant_records(timed)}
    assert list(recs) == [
        "fps_pytorch_eager_fp32_batch1",
        "fps_ort_int8_qdq_u8s8_batch1",
        "fps_pytorch_eager_fp32_batch8",
        "fps_ort_int8_qdq_u8s8_batch8",
    ]
    m, how = recs["fps_ort_int8_qdq_u8s8_batch8"]
    assert how == {"batch": 8, "precision": "int8"} and m.throughput == 8 / 2.0
    assert report.ratio_of(timed[8][0], "ORT int8 (QDQ, U8S8)").median == pytest.approx(4.05)
    ax = report.plot_speed_against_accuracy(timed[8][1], {k: 0.9 for k in timed[8][1]}, "t")
    assert len(ax.collections) == 2


def test_preprocess_and_ablation_sentences_follow_the_numbers(capsys):
    folded = report.preprocess_sentence({"exported": {"Conv": 20}, "pre-processed": {"Conv": 20}})
    assert "had already folded" in folded
    fold = report.preprocess_sentence(
        {"exported": {"Conv": 20, "BatchNormalization": 20}, "pre-processed": {"Conv": 20}}
    )
    assert "folded 20 of them" in fold
    rows = [
        {"calibration images": n, "weights": w, "mean cosine": c, "nearest own": 1.0}
        for n, w, c in ((1, "per-channel", 0.7), (32, "per-channel", 0.9), (32, "per-tensor", 0.8))
    ]
    report.ablation_report(rows)
    assert "closer to fp32 than per-tensor" in " ".join(capsys.readouterr().out.split())
    rows[2]["mean cosine"] = 0.95
    report.ablation_report(rows)
    out = capsys.readouterr().out
    assert "further from fp32" in " ".join(out.split()) and "0.9500" in out  # the table


def test_a_missing_ceiling_is_said_not_printed_as_nan():
    """A CPU without 8-bit dot products has no int8 ceiling: the sentence says so."""
    assert report.ceiling_share({"precision": "int8", "pct_of_ceiling": 45.2}) == (
        "45% of this CPU's int8 ceiling"
    )
    for row in ({"precision": "int8", "pct_of_ceiling": float("nan")}, {"precision": "int8"}):
        assert report.ceiling_share(row) == "no int8 ceiling measured on this CPU"


def test_checks_table_rows_say_pass_fail_and_the_planted_bug():
    from helpers.core.comparison import TaskCheck

    ok = TaskCheck("A", "int8", 32, 0.98, 0.99, 10, 9, 0.97, {"negated": 0.0, "shifted": 0.1})
    checks = {"A": ok, "B": AssertionError("task-level check: rows moved")}
    acc = {"PyTorch eager fp32": 0.9, "A": 0.89, "B": 0.5}
    planted = (AssertionError("x: calibration wrong; more"), 0.3)
    table = report.checks_table(checks, acc, "PyTorch eager fp32", planted=planted)
    rows = {r["variant"]: r for r in table.rows}
    assert rows["A"]["check"].startswith("passes (int8): each row nearest its own reference 98%")
    assert rows["A"]["drop (points)"] == "+1.00" and rows["B"]["check"] == "FAILS: rows moved"
    assert rows["planted bug: calibrated on un-normalised images"]["drop (points)"] == "+60.00"
    assert table.notes and "FAILS" in table.notes[0]  # a variant failed: the note says what
