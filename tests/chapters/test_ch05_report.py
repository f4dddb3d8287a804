"""helpers.chapters.ch05_report: chapter 5's tables and sentences read the run's numbers."""
# course-test-group: no-oneflow

from __future__ import annotations

import matplotlib

from helpers.chapters import ch05_report as rep
from helpers.measure.measurement import Measurement, RatioSummary

matplotlib.use("Agg")


def ratio(median: float, p25: float, p75: float) -> RatioSummary:
    return RatioSummary(median, p25, p75, 5, (p25, median, p75))


def timed(label: str, s: float, items: int = 1) -> Measurement:
    return Measurement(label, [s * f for f in (0.98, 1.0, 1.02, 1.0, 0.99)], items=items)


RUNS = ("serial", "2 processes + lock", "2 replicas, no lock", "DataLoader, 2 workers")
WALLS = {n: timed(n, s, 64) for n, s in zip(RUNS, (2.0, 1.0, 1.25, 1.5))}
GAINS = {n: ratio(2.0 / m.median, 1.9 / m.median, 2.1 / m.median) for n, m in WALLS.items()}
PIPE = dict(
    gains=GAINS,
    control="2 replicas, no lock",
    over_control=ratio(1.25, 1.2, 1.3),
    best_overlap=1.4,
    best_loader="DataLoader, 2 workers",
)
GAIN = dict(torch=ratio(3.0, 2.8, 3.2), forward=ratio(1.5, 1.4, 1.6), flow=ratio(0.98, 0.9, 1.05))


def test_kernel_report_says_two_paths_only_when_batch_1_ran_the_slow_path(capsys):
    sweep = {b: timed(f"b{b}", 0.01 * b**0.5) for b in (1, 2, 16)}
    slow_at_1 = {1: {"oneDNN": 1, "slow path (im2col + matmul)": 19}}
    slow_at_1 |= {b: {"oneDNN": 20, "slow path (im2col + matmul)": 0} for b in (2, 16)}
    assert rep.kernel_report(slow_at_1, sweep, 16, "cpu") == {1: 19, 2: 0, 16: 0}
    assert "19 of the 20 convolutions" in capsys.readouterr().out
    same = {b: {"oneDNN": 20, "slow path (im2col + matmul)": 0} for b in (1, 2, 16)}
    rep.kernel_report(same, sweep, 16, "cpu")
    assert "two kernel paths" not in capsys.readouterr().out  # the control


def test_verdicts_follow_the_measured_numbers(capsys):
    rep.verdicts(GAIN, (16, 8), {1: 19, 16: 0}, 20, WALLS, PIPE, on_gpu=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "3.00x for the task here" in out and "More than the case study" in out
    assert "19 of its 20 convolutions" in out
    assert "the lock version was 1.25x faster (the lock helped)" in out
    assert "DataLoader: best DataLoader, 2 workers, 1.33x" in out
    rep.verdicts(
        {**GAIN, "torch": ratio(1.2, 1.1, 1.3)},
        (16, 8),
        {1: 0, 16: 0},
        20,
        WALLS,
        PIPE,
        on_gpu=True,
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "Less than the case study" in out and "overlapped GPU work" in out
    assert "slow path" not in out and "the lock version" not in out


def test_case_study_table_multiplies_batch_and_pipeline_only_on_a_gpu():
    def total(on_gpu: bool) -> str:
        table = rep.case_study_table(GAIN, (16, 8), PIPE, on_gpu, "here", "cpu", [])
        return next(r["here"] for r in table.rows if r["step"] == "batch + pipeline")

    assert total(True) == "3.75x"  # 3.00 x 1.25
    assert total(False).startswith("n/a")


def test_runs_table_and_dependence_table_rows():
    class Run:
        meta = {"startup_s": 0.5}

        def busy_fraction(self, stage: str) -> float:
            return 1.2  # shown capped at 100%

    table = rep.runs_table(WALLS, GAINS, [dict.fromkeys(RUNS, Run())], "t")
    assert [r["run"] for r in table.rows] == list(RUNS)
    assert table.rows[1]["vs serial (IQR)"] == "2.00x (1.90-2.10)"
    assert table.rows[0]["model busy"] == "100%"
    dep = rep.dependence_table(
        {1: 0.0, 4: 1e-7}, {1: 0.0, 4: 0.2}, {1: (1.0, 1.0), 4: (0.99, 0.5)}, "cpu"
    )
    assert dep.rows[1]["pixels within tol"] == "50.0%"


def test_plots_draw_from_the_measurements():
    sweep = {b: timed(f"b{b}", 0.01 * b**0.5) for b in (1, 2, 4)}
    table = rep.sweep_report(sweep, 4, "resnet18, PyTorch on cpu (fp32)", 5)
    assert [r["batch"] for r in table.rows] == [1, 2, 4]
    rep.dependence_plot({1: 0.0, 4: 1e-7}, {1: 0.0, 4: 0.2}, 1e-5)


def test_batching_report_quotes_each_reference_run(monkeypatch, capsys):
    recs = [
        {"chapter": "05_parallelism", "name": "batch_gain_oneflow_graph", "value": 1.1},
        {"chapter": "05_parallelism", "name": "batch_gain_torch", "value": 3.35},
    ]
    runs = {"ref-cpu": recs, "partial-cpu": recs[1:]}  # one without OneFlow's: left out
    monkeypatch.setattr(rep.ledger, "reference_runs", lambda: runs)
    used = {"PyTorch eager": {1: timed("b1", 0.01), 16: timed("b16", 0.05, 16)}}
    table = rep.batching_report("05_parallelism", GAIN["flow"], GAIN["torch"], used, "n")
    out = " ".join(capsys.readouterr().out.split())
    assert "reference run (ref-cpu): OneFlow 1.10x, PyTorch 3.35x." in out
    assert "partial-cpu" not in out
    assert [r["ms per image"] for r in table.rows] == [10.0, 0.05 / 16 * 1e3]
