"""helpers.chapters.ch06_report: chapter 6's tables and sentences read the run's numbers."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chapters import ch06_report as rep
from helpers.measure.measurement import RatioSummary


def ratio(median: float, p25: float, p75: float) -> RatioSummary:
    return RatioSummary(median, p25, p75, 5, (p25, median, p75))


def variant(times: list[float], ops: dict[str, int], process: str = "a") -> dict:
    return dict(times_s=times, median_s=float(np.median(times)), op_counts=ops, process=process)


OPS = {"conv2d": 20, "pad": 17}
FAST = [0.5, 0.52, 0.48, 0.5, 0.51]
SLOW = [1.0, 1.02, 0.98, 1.0, 1.01]


def flow_run(on_gpu: bool = False, out_b: float = 0.0) -> rep.FlowRun:
    res = {
        "graph": variant(SLOW, OPS),
        "same": variant(SLOW, OPS),
        "fused": variant(FAST, {"conv2d": 20}),
        "other process": variant(FAST, {"conv2d": 20}, process="b"),
    }
    out = {n: np.zeros(3) for n in res} | {"same": np.full(3, out_b)}
    return rep.FlowRun(res, out, on_gpu)


def test_no_op_needs_same_ops_same_bits_and_a_cpu():
    assert flow_run().no_op("graph", "same")
    assert not flow_run(out_b=1e-7).no_op("graph", "same")  # one bit differs
    assert not flow_run(on_gpu=True).no_op("graph", "same")
    assert not flow_run().no_op("graph", "fused")  # ops differ


def test_factor_is_paired_in_one_process_and_labelled_across_two():
    run = flow_run()
    assert run.factor("graph", "same").startswith("no-op (1.00x)")
    assert run.factor("graph", "fused") == "2.00x faster (in process)"
    assert run.factor("graph", "other process") == "2.00x (across processes)"
    # the same figures as the ledger's: a paired ratio in process, a ratio of medians across
    paired = run.speedup("graph", "fused")
    assert isinstance(paired, RatioSummary) and paired.median == pytest.approx(2.0)
    assert paired.rounds == len(FAST) and paired.p25 <= 2.0 <= paired.p75
    assert run.speedup("graph", "other process") == pytest.approx(2.0)
    run.res["same"] = variant([1.02, 0.98, 1.0, 1.01, 1.0], OPS)  # SLOW's median, other rounds
    assert run.factor("graph", "same") == "no-op (0.99x)"  # the paired median, not 1.00


def test_cross_process_aa_only_for_the_same_graph():
    run = flow_run()
    assert run.cross_process_aa("fused", "other process") == pytest.approx(1.0)
    assert run.cross_process_aa("graph", "other process") is None  # other ops


def test_controls_text_flags_a_conclusive_aa():
    calm = rep.controls_text(
        ratio(1.0, 0.98, 1.02), ratio(0.9, 0.85, 0.95), ratio(1.1, 1.05, 1.2), 1.5
    )
    assert "1.50x the plain graph's speed" in calm and "and more." in calm
    assert "itself came out conclusive" not in calm
    moved = rep.controls_text(
        ratio(1.1, 1.05, 1.2), ratio(0.9, 0.85, 0.95), ratio(1.0, 0.9, 1.1), 1.5
    )
    assert "itself came out conclusive" in moved and "no more, within this noise" in moved


def test_cache_text_names_the_cpu_check_only_on_a_cpu():
    second = {"wall_s": 20.0, "result": {"first_call_s": 2.0, "isa_probe_s": 5.0}}
    cpu = rep.cache_text(second, 60.0, 8.0, cpu=True)
    assert "**2.0 s** instead of 60 s (30x less" in cpu and "5 s of it (25%)" in cpu
    assert "check of the CPU" not in rep.cache_text(second, 60.0, 8.0, cpu=False)


def test_summary_table_reads_each_switch_from_this_run(torch_mod):
    run = flow_run()
    run.res |= {n: run.res["fused"] for n in ("AMP", "conv search", "pad+conv", "add fusion")}
    run.res["BN folding"] = run.res["graph"]
    run.res["other process"] = variant(SLOW, {"conv2d": 20}, process="b")
    run.res |= {
        "native padding": run.res["fused"],
        "native padding + MLIR": run.res["other process"],
    }
    run.out |= {n: np.zeros(3) for n in run.res} | {"other process": np.ones(3)}
    chain = ["graph", "AMP", "conv search", "pad+conv", "other process"]
    eager = torch_mod.zeros(2)
    table = rep.summary_table(
        run,
        chain,
        {"cudnn.benchmark": ratio(1.0, 0.9, 1.1), "conv+BN folded": ratio(1.3, 1.2, 1.4)},
        {"eager fp32": eager, "cudnn.benchmark": eager.clone(), "conv+BN folded": eager + 1},
        low="bf16",
        controls=(ratio(1.0, 0.98, 1.02), ratio(1.1, 1.05, 1.2), ratio(1.0, 0.97, 1.03)),
        trt_ratio=None,
        title="t",
        torch_device="cpu",
    )
    rows = {r["optimisation"]: r for r in table.rows}
    assert rows["AMP"]["OneFlow alone"] == "2.00x faster (in process)"
    assert rows["add fusion"]["OneFlow, chain step"] == "0.50x (across processes)"
    assert rows["conv algorithm search"]["PyTorch (cpu)"] == "no-op (1.00x)"  # same bits
    assert rows["BN folding"]["PyTorch (cpu)"] == "1.30x faster"
    assert rows["AMP"]["PyTorch (cpu)"] == "- (not here)"
    assert rows["BN folding"]["OneFlow alone"].startswith("no-op")
    assert "ran 0.50x in the pad+conv process's" in table.notes[1]
