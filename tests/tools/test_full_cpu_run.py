"""tools/full_cpu_run.py (`make fullcpu`): what it reads from nbval's files and the table it writes."""

# course-test-group: no-oneflow
# ("oneflow" is only a framework name in the GPU estimate's tables)

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("full_cpu_run", ROOT / "tools" / "full_cpu_run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def _nb(path: Path, cells: list[tuple[str, list[dict]]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "source": src, "outputs": outs, "metadata": {}}
                    for src, outs in cells
                ]
            }
        )
    )
    return path


def test_gpu_skips_are_found_across_wrapped_lines(tmp_path):
    line = (
        "SKIPPED on this machine (no CUDA GPU): TensorRT INT8 at batch 16 on the\n"
        "    GPU. With a GPU this cell runs it for real.\n"
    )
    wrapped = (
        "SKIPPED on this machine (no CUDA GPU): CUDA events: the model on the GPU's clock. "
        "With a\n  GPU this cell runs it for real.\n"
    )
    nb = _nb(
        tmp_path / "x.ipynb",
        [
            ("import x", [{"output_type": "stream", "text": "hello\n"}]),
            ("y()\nz()", [{"output_type": "stream", "text": line}]),
            ("w()", [{"output_type": "stream", "text": wrapped}]),
            ("v()", [{"output_type": "stream", "text": "SKIPPED here: TensorRT INT8.\nwhy\n"}]),
        ],
    )
    assert run.gpu_skips(nb) == [
        {"cell": 1, "what": "TensorRT INT8 at batch 16 on the GPU"},
        {"cell": 2, "what": "CUDA events: the model on the GPU's clock"},
        {"cell": 3, "what": "TensorRT INT8."},
    ]
    assert run.code_heads(nb) == ["import x", "y()", "w()", "v()"]
    assert run.gpu_skips(tmp_path / "absent.ipynb") == []


def _train_line(accuracy: float, seconds: float = 333.0) -> str:
    """What a training cell prints: TrainResult's own line (one source with the pages)."""
    import numpy as np

    from helpers.workload.training import TrainResult

    fit = TrainResult(np.array([2.1, 2.0, 1.9]), seconds, 32, val_accuracy=accuracy)
    return str(fit)


def test_trainings_are_read_with_their_bar_across_wrapped_lines(tmp_path):
    import textwrap

    six = textwrap.fill(f"{_train_line(0.188)}; chance 12.5%, the bar 15.6%", 88)
    assert "\n" in six  # wrapped as chapter 6's say() wraps it
    nb = _nb(
        tmp_path / "x.ipynb",
        [
            ("import x", [{"output_type": "stream", "text": "hello\n"}]),
            ("fit = t()", [{"output_type": "stream", "text": six + "\n"}]),
            ("fit2 = t()", [{"output_type": "stream", "text": _train_line(0.5, 12.0) + "\n"}]),
            ("print(fit)", [{"output_type": "stream", "text": str(_train_line(None))}]),
        ],
    )
    got = run.trainings(nb)
    assert got == [
        {
            "cell": 1,
            "steps": 3,
            "batch": 32,
            "train_s": 333.0,
            "device": "cpu",
            "accuracy": pytest.approx(0.188),
            "bar": pytest.approx(0.156),
        },
        {
            "cell": 2,
            "steps": 3,
            "batch": 32,
            "train_s": 12.0,
            "device": "cpu",
            "accuracy": pytest.approx(0.5),
            "bar": None,
        },
    ]  # a fit without held-out accuracy is not a training the table can judge
    assert run.trainings(tmp_path / "absent.ipynb") == []


def test_junit_cells_and_the_error_line(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="nb" name="Cell 0" time="1.25"/>'
        '<testcase name="Cell 1" time="30"><failure message="nbval">Traceback\n'
        "  File x\n#x1B[0;31mAssertionError#x1B[0m: 3 != 4\n</failure></testcase>"
        '<testcase name="Cell 2" time="0"><skipped message="Triton cannot run here"/>'
        "</testcase></testsuite></testsuites>"
    )
    cells = run.junit_cells(junit)
    assert [c["outcome"] for c in cells] == ["passed", "failed", "skipped"]
    assert cells[1] == {
        "cell": 1,
        "seconds": 30.0,
        "outcome": "failed",
        "message": "AssertionError: 3 != 4",
    }
    assert cells[2]["message"] == "Triton cannot run here"


def test_table_rows_and_failures():
    row = {
        "notebook": "04_pruning",
        "passed": False,
        "rc": 1,
        "wall_s": 600.0,
        "peak_pss_mib": 2048,
        "peak_kernel_pss_mib": 1900,
        "peak_rss_mib": 3072,
        "pss_read": True,
        "load_max": 2.1,
        "cells": 20,
        "failed": [{"cell": 7, "head": "f()", "message": "ValueError: x", "seconds": 1}],
        "nbval_skipped": [],
        "gpu_skips": [{"cell": 3, "what": "CUDA graphs", "head": "g()"}],
        "slowest": [{"cell": 9, "seconds": 120.0, "head": "h()"}],
        "started": "2026-12-01T23:00:00Z",
    }
    sizes = {
        "arch": "resnet101", "image_size": 224, "batch_size": 16, "batch_sweep": [1, 16],
        "train_images": 4096, "warmup": 2, "repeats": 5, "train_steps": 30,
    }  # fmt: skip
    data = {
        "machine": {
            "cpu": "X",
            "cores": 2,
            "cpu_features": ["avx2"],
            "memory_gib": 8,
            "sizes": sizes,
        },
        "chapters": {"04_pruning": row},
        "finished": "2026-12-01T23:10:00Z",
    }
    text = run.table(data)
    assert (
        "| 04_pruning | FAILED (rc 1) | 10.0 min | 2.0 GiB (RSS 3.0 GiB) | cell 3: CUDA graphs "
        "| cell 9, 2.0 min |" in text
    )
    # a run from before PSS was read says what it summed
    old = {k: v for k, v in row.items() if "pss" not in k}
    assert run.peak_text(old) == "RSS 3.0 GiB"
    assert "- 04_pruning, cell 7 (`f()`): ValueError: x" in text
    assert "Trainings" not in text  # nothing recorded, nothing said
    t = {"cell": 4, "steps": 30, "batch": 32, "train_s": 330.0, "device": "cpu"}
    row["trainings"] = [t | {"accuracy": 0.188, "bar": 0.156}, t | {"accuracy": 0.9, "bar": None}]
    data["machine"]["cpu_family"] = "family 25, model 1"
    text = run.table(data)
    assert "X (family 25, model 1), 2 cores, AVX2, 8 GiB" in text
    assert (
        "- 04_pruning, cell 4: 30 steps of batch 32 in 5.5 min on cpu, 18.8% held out (bar 15.6%)"
        in text
    )
    assert "on cpu, 90.0% held out\n" in text


def test_notebooks_by_prefix():
    assert [p.stem for p in run.notebooks(["07"])] == ["07_onnx_runtimes", "07a_oneflow_to_onnx"]
    assert [p.stem[:3] for p in run.notebooks(["07a", "00", "07"])] == ["07a", "00_", "07_"]
    with pytest.raises(SystemExit, match="99"):
        run.notebooks(["99"])


def test_slug_names_the_cpu_features(monkeypatch):
    from helpers.record import ledger

    assert (
        ledger.cpu_features_tag(["avx2", "avx512f", "avx512_vnni", "amx_int8"]) == "avx512-vnni-amx"
    )
    assert ledger.cpu_features_tag(["avx2"]) == "avx2"
    assert ledger.cpu_features_tag([]) == "no-avx2"
    monkeypatch.setenv("COURSE_MODE", "full")
    from helpers.core import environment

    environment.environment_report.cache_clear()
    try:
        env = environment.environment_report()
        slug = ledger.machine_slug(features=True)
        if env["gpu"]:  # a GPU names the machine: the CPU's features add nothing
            assert slug == ledger.machine_slug()
        else:
            assert slug.endswith(ledger.cpu_features_tag(env["flags"]) + "-full")
    finally:
        environment.environment_report.cache_clear()


_gspec = importlib.util.spec_from_file_location("gpu_estimate", ROOT / "tools" / "gpu_estimate.py")
gpu = importlib.util.module_from_spec(_gspec)
_gspec.loader.exec_module(gpu)


def test_pass_time_is_the_slower_roof_plus_launches():
    c = {"flops": 1e12, "bytes": 1e9, "ops": 100}
    a100 = gpu.GPUS["A100"]
    compute = 1e12 / (gpu.COMPUTE_EFF * a100["tf32"] * 1e12)
    assert gpu.pass_seconds(c, "A100") == pytest.approx(compute + 100 * gpu.LAUNCH_S)
    memory_bound = {"flops": 1e6, "bytes": 1e10, "ops": 0}
    expected = 1e10 / (gpu.MEMORY_EFF * gpu.GPUS["L4"]["tb_s"] * 1e12)
    assert gpu.pass_seconds(memory_bound, "L4") == pytest.approx(expected)


def test_estimate_moves_cells_to_the_gpu_and_keeps_oneflow_on_an_h100(monkeypatch):
    monkeypatch.setitem(
        gpu.WORK,
        "99_x",
        [((1,), "torch", ("matmul", 1024), 10), ((2,), "oneflow", ("matmul", 1024), 10)],
    )
    row = {
        "wall_s": 100.0,
        "cells_timed": [{"cell": n, "seconds": 30.0, "outcome": "passed"} for n in range(3)],
    }
    one = gpu.device_seconds(("matmul", 1024), "A100")
    a100 = gpu.estimate("99_x", row, "A100")
    assert a100["host_s"] == pytest.approx(40.0)  # cells 1 and 2 move to the GPU
    assert a100["device_s"] == pytest.approx(20 * one)
    h100 = gpu.estimate("99_x", row, "H100")  # OneFlow 0.9.0 has no Hopper kernels
    assert h100["host_s"] == pytest.approx(70.0)
    assert h100["device_s"] == pytest.approx(10 * gpu.device_seconds(("matmul", 1024), "H100"))


def test_a_resnet101_forward_costs_what_torchvision_counts():
    c = gpu.cost(("resnet101", "fwd", 1, 224))
    assert 15e9 < c["flops"] < 16e9  # 7.8 GMACs: torchvision's 7.8 GFLOPS counts MACs
    assert c["ops"] > 300 and c["bytes"] > 1e8


def test_full_cpu_folders_are_not_reference_ledgers(tmp_path):
    from helpers.record import ledger

    (tmp_path / "x-quick").mkdir()
    (tmp_path / "x-quick" / "00_measuring.json").write_text("[]")
    (tmp_path / "cpu-full-cpu").mkdir()
    (tmp_path / "cpu-full-cpu" / "full_cpu.json").write_text("{}")
    assert ledger.reference_runs(tmp_path) == {"x-quick": []}


def test_setup_md_shows_the_committed_full_size_run():
    """book/setup.md's table and the paragraph under it are generated from the committed run
    (``tools/gpu_estimate.py --write-setup``); a changed wall time no longer matches."""
    times = json.loads((ROOT / "results" / "reference" / "chapter_times.json").read_text())
    folder = ROOT / times["full_cpu_source"].split("/full_cpu.json")[0]
    run = json.loads((folder / "full_cpu.json").read_text())
    est = json.loads((folder / "gpu_estimate.json").read_text())
    assert gpu.reference_folder() == folder  # whatever other CPUs' folders sort after it
    others = gpu.other_runs(run)
    text = gpu.SETUP.read_text(encoding="utf-8")
    assert gpu.setup_block(run, est, others) in text, "run tools/gpu_estimate.py --write-setup"
    run["chapters"]["04_pruning"]["wall_s"] += 60
    assert gpu.setup_block(run, est, others) not in text


def test_setup_md_gives_another_cpus_full_size_run_a_column():
    """Another CPU's ``make fullcpu`` run: a column of its wall times ('not run' where it did
    not), and a paragraph that names the CPU and compares the chapters both passed."""
    ch = {"cells_timed": [{"cell": 4, "seconds": 500.0}, {"cell": 35, "seconds": 40.0}]}
    row = {"passed": True, "started": "2026-12-02T05:00:00Z", "peak_rss_mib": 2048} | ch
    run = {"machine": {"sizes": {"train_steps": 30}}, "chapters": {}}
    run["chapters"] = {"04_a": row | {"wall_s": 120.0}, "06_b": row | {"wall_s": 600.0}}
    est = {"chapters": {k: {g: {"total_s": 60.0} for g in gpu.GPUS} for k in run["chapters"]}}
    amd = {"cpu": "AMD EPYC", "cpu_family": "family 25, model 1", "cores": 2}
    amd |= {"cpu_features": ["avx2"], "memory_gib": 23.5}
    slow = ch | {"cells_timed": [{"cell": 35, "seconds": 560.0}, {"cell": 4, "seconds": 1100.0}]}
    other = {"machine": amd, "finished": "2026-12-02T19:00:00Z"}
    other["chapters"] = {"06_b": row | slow | {"wall_s": 2400.0, "started": "2026-12-03T01:00Z"}}
    table = gpu.setup_table(run, est, [other])
    assert (
        "| chapter | CPU 1, full size (measured) | peak memory (CPU 1) | CPU 2, full size" in table
    )
    assert "| 04_a | 2.0 min | 2.0 GiB | not run | 60 s |" in table
    assert "| 06_b | 10.0 min | 2.0 GiB | 40.0 min | 60 s |" in table
    text = " ".join(gpu.others_summary(run, [other]).split())
    assert text.startswith("CPU 2 (AMD EPYC (family 25, model 1), 2 cores, AVX2, 23.5 GiB)")
    assert "on 2026-12-03" in text and "1 pass; not run there: 04_a" in text
    assert "it took 40 minutes against 10 on CPU 1, from 4.0x to 4.0x" in text
    assert "in minutes, 06_b (4.0x, 30.0 min more), spent longest in cell 4 (18.3 min)" in text
    # the chapter furthest apart is the one a plan feels, in minutes, not by ratio:
    other["chapters"]["04_a"] = row | {"wall_s": 360.0, "started": "2026-12-03T01:00Z"}
    other["chapters"]["06_b"]["wall_s"] = 1500.0  # 2.5x, but 15 minutes against 4
    text = " ".join(gpu.others_summary(run, [other]).split())
    assert "from 2.5x to 3.0x CPU 1's time" in text
    assert "furthest apart in minutes, 06_b (2.5x, 15.0 min more)" in text
    assert gpu.setup_table(run, est).startswith("| chapter | 2-core CPU, full size")
    assert gpu.others_summary(run, []) == ""


def test_a_cpu_has_one_number_on_every_page():
    """book/setup.md numbers the other CPUs as the workshop and the Time lines do: a CPU with
    a quick run kept keeps its number, one with a full-size run only comes after those (the
    committed Genoa run is CPU 3 in both, not CPU 2 in setup.md)."""
    ct = gpu.ct
    times = ct._load_times()
    quick = [o["machine"] for o in times["quick_also"]]
    new = {"cpu": "Some CPU", "cores": 2, "cpu_features": ["avx2"], "memory_gib": 8.0}
    runs = [{"machine": m, "chapters": {}} for m in [new, *quick]]
    free = len(ct._cpus(times)) + 2  # after those with quick or full-size runs kept
    assert gpu.cpu_numbers(runs) == [free, *range(2, len(quick) + 2)]
    table = gpu.setup_table({"chapters": {}}, {"chapters": {}}, runs[:1])
    assert f"| CPU {free}, full size (measured) |" in table
    numbered = dict(ct._numbered(times, "full_cpu_also"))
    others = gpu.other_runs({"machine": times["machine"]})
    for n, o in zip(gpu.cpu_numbers(others), others, strict=True):
        assert ct.same_machine(numbered[n]["machine"], o["machine"]), n


def test_setup_md_states_each_training_from_the_run():
    """The trainings' sentence is generated from what the run recorded; a run from before the
    field was recorded says so instead of a figure."""
    base = {"passed": True, "wall_s": 60.0, "started": "2026-12-02T00:00:00Z"}
    t6 = {"cell": 4, "steps": 30, "batch": 32, "train_s": 330.0, "device": "cpu"}
    rows = {
        "06_x": {**base, "trainings": [{**t6, "accuracy": 0.188, "bar": 0.156}]},
        "10_y": {**base, "trainings": [{**t6, "cell": 3, "accuracy": 0.25, "bar": 0.156}]},
        "08_z": {**base, "trainings": [{**t6, "steps": 60, "accuracy": 0.9, "bar": 0.5}]},
    }
    run_ = {"machine": {"sizes": {"train_steps": 30}}, "chapters": rows}
    text = " ".join(gpu.training_summary(run_).split())
    assert (
        "06_x cell 4, 30 steps of batch 32 in 5.5 min on cpu: 18.8% against the bar of 15.6%"
        in text
    )
    assert "10_y cell 3" in text and "25.0%" in text
    assert "The smallest margin at 30 steps: 3.2 points (06_x)" in text  # 08_z trains 60 steps
    del rows["10_y"]["trainings"]
    assert "predates the recording" in gpu.training_summary(run_)


def test_the_bar_is_read_from_the_pages_own_line():
    """assert_above_chance's line (chapters 2, 6 and 10) names its bar as BAR_RE reads it."""
    from helpers.workload import training

    line = training.assert_above_chance(0.3, 256, 10)
    bar = float(run.BAR_RE.search(line).group(1)) / 100
    assert bar == pytest.approx(training.above_chance_bar(256, 10), abs=5e-4)


def test_the_peak_is_placed_in_the_cell_that_ran_then():
    """Cells run one after another and the last ends with the run: counted back from the
    end, cells of 5, 60 and 20 s in a 130 s run span 45-50, 50-110 and 110-130 s; the
    kernel's start lies in none."""
    cells = [{"cell": 0, "seconds": 5.0}, {"cell": 1, "seconds": 60.0}]
    cells += [{"cell": 2, "seconds": 20.0}]
    assert run.cell_at(cells, 130.0, 120.0) == 2
    assert run.cell_at(cells, 130.0, 100.0) == 1
    assert run.cell_at(cells, 130.0, 47.0) == 0
    assert run.cell_at(cells, 130.0, 10.0) is None  # before the first cell: kernel start
    assert run.cell_at(cells, 130.0, None) is None  # a run from before peak_at was read
    row = {"peak_pss_mib": 2048, "peak_rss_mib": 3072, "peak_cell": 3}
    assert run.peak_text(row) == "2.0 GiB (RSS 3.0 GiB), in cell 3"
