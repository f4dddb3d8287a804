"""helpers.chapters.ch07_report: chapter 7's tables and sentences follow the numbers they are given."""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from helpers.chapters import ch07_report as report
from helpers.chapters import ch07_runtimes as ch07
from helpers.measure.measurement import Measurement


def _m(label, ms, items=1):
    return Measurement(label=label, times_s=[t / 1e3 for t in ms], items=items, threads=2)


def _waits(passive_ms, spin_ms, contended=False):
    """Three rounds per policy, each a dict of per-call medians as embedder_timings returns."""

    def run(ms):
        rows = {k: {"median_s": v / 1e3, "contended": contended} for k, v in ms.items()}
        return {"rows": rows}

    return {"PASSIVE": [run(passive_ms)] * 3, "spinning": [run(spin_ms)] * 3}


def test_slug_makes_the_pages_labels_record_name_segments():
    from helpers.record.ledger import slug

    assert slug("ONNX Runtime, no NCHWc") == "onnx_runtime_no_nchwc"
    assert slug("PyTorch eager, batch 1") == slug("PyTorch eager batch 1")


def test_levels_table_counts_runtime_ops_and_names_the_fastest(tmp_path):
    def save(level, domains):
        nodes = [helper.make_node("Relu", ["x"], ["y"])] + [
            helper.make_node("FusedConv", ["y"], [f"z{i}"], domain=d) for i, d in enumerate(domains)
        ]
        vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        graph = helper.make_graph(nodes, level, [vi], [vi])
        onnx.save(helper.make_model(graph), tmp_path / f"ort_{level}.onnx")

    save("basic", []), save("all", ["com.microsoft", "com.microsoft"])
    runners = {k: type("R", (), {"info": {"session_s": 0.1}})() for k in ("basic", "all")}
    runs = {"basic": _m("basic", [2.0]), "all": _m("all", [1.0])}
    table = report.levels_table(runners, runs, tmp_path, threads=2)
    rows = {r["level"]: r for r in table.rows}
    assert (rows["basic"]["nodes"], rows["basic"]["ORT-specific ops"]) == (1, 0)
    assert (rows["all"]["nodes"], rows["all"]["ORT-specific ops"]) == (3, 2)
    assert "'all'" in table.notes[0]


def test_wait_sentences_compare_the_small_call_and_say_the_load():
    calls = ["PyTorch eager, batch {}", "ONNX Runtime, batch {}"]
    passive = {calls[0].format(1): 12.0, calls[1].format(1): 3.0}
    passive |= {calls[0].format(8): 40.0, calls[1].format(8): 20.0}
    spin = {calls[0].format(1): 6.0, calls[1].format(1): 3.0}  # eager at batch 1: 2x
    spin |= {calls[0].format(8): 40.0, calls[1].format(8): 20.0}
    waits = _waits(passive, spin)
    ratios = ch07.wait_ratios(waits, base="PASSIVE", other="spinning")
    text = report.wait_sentences(waits, ratios, 8)
    assert "**2.00x faster**" in text and "4.0x when both sleep, 2.0x when both spin" in text
    assert "PyTorch eager: spinning's ratio at batch 1, 2.00x, is higher" in text
    assert text.endswith("The machine was quiet during these runs.")
    busy = _waits(passive, spin, contended=True)
    assert "*CONTENDED*" in report.wait_sentences(busy, ratios, 8)


def test_precisions_and_headline_pick_the_fastest_fp32_rival():
    slow = type("Runner", (), {"math_mode": "fp32"})()
    half = type("Runner", (), {"math_mode": "fp16"})()
    contenders = {"eager": (None, torch.float32), "eager fp16": (None, torch.float16)}
    contenders |= {"ORT": slow, "TRT": half}
    prec = report.precisions(contenders, "fp32")
    assert prec == {"eager": "fp32", "eager fp16": "fp16", "ORT": "fp32", "TRT": "fp16"}
    runs = {
        b: {
            "eager": _m("eager", [4.0, 4.1, 3.9], b),
            "eager fp16": _m("h", [1.0, 1.0, 1.0], b),
            "ORT": _m("ORT", [2.0, 2.05, 1.95], b),
            "TRT": _m("TRT", [0.5, 0.5, 0.5], b),  # fastest, but fp16: not an fp32 rival
        }
        for b in (1, 8)
    }
    top, text = report.headline(runs, "eager", prec, 8, "PASSIVE")
    assert top[1][0] == "ORT" and top[1][1].median == pytest.approx(2.0)
    assert "ORT, ran **2.00x faster (per-round IQR" in text and "OMP_WAIT_POLICY=PASSIVE" in text
    tables = report.fps_tables(runs, "eager", prec, {1: 1, 8: 2}, 64)
    assert [t.title for t in tables][1] == "batch 8, 64 px, 2 thread(s) for every row"
    assert tables[0].rows[2]["precision"] == "fp32"


def test_lead_at_224_splits_the_gap_and_the_sentence_follows_it():
    def runs(nchwc_ms):
        return {
            b: {
                "PyTorch eager": _m("e", [8.0, 8.0, 8.0]),
                "PyTorch channels-last": _m("c", [4.0, 4.0, 4.0]),
                "ONNX Runtime": _m("o", [2.0, 2.0, 2.0]),
                "ONNX Runtime, no NCHWc": _m("n", [nchwc_ms] * 3),
            }
            for b in (1, 8)
        }

    lead, table, text = report.lead_at_224(runs(3.0), 8, "t")
    assert lead["best_torch"] == "PyTorch channels-last"
    assert lead["closed"] == pytest.approx(0.5)  # 4x -> 2x: half the gap on a log scale
    assert "closes about 50% of the gap" in text and "the rest is its fused kernels" in text
    assert "all of the remaining lead" in report.lead_at_224(runs(5.0), 8, "t")[2]
    rows = table.rows
    assert rows[2]["ONNX Runtime's lead"] == "-" and rows[0]["ms per call"] == pytest.approx(8.0)
    spin = {f"{k}, batch 1": lead["eager"] for k in ("PyTorch eager", "ONNX Runtime")}
    top = {b: ("ONNX Runtime", lead["eager"]) for b in (1, 8)}
    summary = report.summary_table(
        eager_fps="100 (64 px, CPU)",
        case_fps=54.0,
        top=top,
        batch=8,
        lead=lead,
        spin=spin,
        aoti="9 s",
        nodes=(150, 100),
        pre_share=0.25,
        title="t",
    )
    here = [r["here"] for r in summary.rows]
    assert here[3] == "4.0x / 2.0x (PyTorch channels-last)" and here[4] == "4.00x / 4.00x"
    assert here[6:] == ["150 -> 100", "25%"] and summary.rows[0]["case study"].startswith("54 ")
