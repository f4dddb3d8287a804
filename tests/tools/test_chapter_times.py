"""Each chapter's "Time" line and the workshop plans come from measured times (issue 22)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from helpers.core.hardware import same_machine

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("chapter_times", ROOT / "tools" / "chapter_times.py")
ct = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ct)


def test_pages_and_workshop_state_the_measured_times():
    stale = ct.check()
    assert not stale, f"run `python tools/chapter_times.py write`: these differ: {stale}"


@pytest.fixture
def copy_of_course(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("artifacts")
    )
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "book" / "workshop.md", tmp_path / "book" / "workshop.md")
    (tmp_path / "results" / "reference").mkdir(parents=True)
    shutil.copy(ct.TIMES, tmp_path / "results" / "reference" / ct.TIMES.name)
    return tmp_path


def test_a_time_typed_by_hand_is_caught(copy_of_course: Path):
    """The control: edit one page's Time line or the workshop's table and the check names it."""
    assert ct.check(copy_of_course) == []
    nb = copy_of_course / "notebooks" / "04_pruning.ipynb"
    text = nb.read_text(encoding="utf-8")
    nb.write_text(text.replace("**Time:** ", "**Time:** about 15 minutes. ", 1), encoding="utf-8")
    ws = copy_of_course / "book" / "workshop.md"
    ws.write_text(
        ws.read_text(encoding="utf-8").replace(" min |", " minutes |", 1), encoding="utf-8"
    )
    assert ct.check(copy_of_course) == ["04_pruning", "workshop"]
    ct.write(copy_of_course)
    assert ct.check(copy_of_course) == []


def test_every_session_of_both_plans_fits():
    times = ct._load_times()
    for plan, sessions in ct.PLANS.items():
        for name, items in sessions:
            minutes = sum(ct.room_minutes(stem, n, times) for stem, n in items)
            assert minutes <= ct.SESSION_MIN, f"{plan}, {name}: {minutes} min"
    two_days = {stem for _, items in ct.PLANS["Two days"] for stem, _ in items}
    assert two_days >= {nb.stem for nb in ct.chapters() if nb.stem != "07a_oneflow_to_onnx"}


def test_every_chapter_has_a_measured_run_time():
    times = ct._load_times()
    assert {nb.stem for nb in ct.chapters()} <= set(times["quick"])


def test_the_workshop_names_what_its_peaks_sum(tmp_path: Path):
    """Runs whose peaks sum PSS say so; one kept run from before (RSS) makes the text say
    RSS. Only the last passing run of each chapter counts: an older RSS run replaced by a
    PSS one, or a failed one, changes nothing."""
    run = {"notebook": "04_pruning", "seconds": 60.0, "passed": True, "loadavg": 1.0}
    run |= {"time": "2026-12-02T06:00:00", "peak_tree_mb": 900, "peak_process_mb": 800}
    other = run | {"notebook": "05_parallelism", "peak_sums": "pss"}
    old = run | {"loadavg": 9.0, "time": "2026-11-30T06:00:00"}  # RSS, replaced below
    failed = other | {"passed": False, "loadavg": 7.0, "peak_sums": "rss"}
    runs, out = tmp_path / "runs.json", tmp_path / "times.json"
    for sums, kind, words in (("pss", "pss", "proportional"), (None, "rss", "upper bound")):
        rows = [old, other, run | ({"peak_sums": sums} if sums else {}), failed]
        runs.write_text(json.dumps(rows))
        times = ct.record(runs, {"cpu": "X"}, out)
        assert times["quick_peak_sums"] == kind
        assert times["quick_loadavg_max"] == 1.0  # the kept runs' load
        assert times["quick_date"] == "2026-12-02"
        committed = ct._load_times() | {"quick_peak_sums": times["quick_peak_sums"]}
        block = ct.workshop_block(committed)
        assert words in block.split("The heaviest chapter")[1].split("\n")[0]


def test_the_times_file_holds_the_committed_full_size_run(tmp_path: Path):
    """chapter_times.json's full-size times and GPU estimates are those of the committed
    ``make fullcpu`` folder (``record-full`` reproduces them); a changed wall time shows."""
    folder = Path(ct._load_times()["full_cpu_source"].split("/full_cpu.json")[0])
    out = tmp_path / "times.json"
    shutil.copy(ct.TIMES, out)
    assert ct.record_full(ROOT / folder, out) == ct._load_times()
    changed = tmp_path / "run"
    shutil.copytree(ROOT / folder, changed)
    run = json.loads((changed / "full_cpu.json").read_text())
    run["chapters"]["04_pruning"]["wall_s"] += 60
    (changed / "full_cpu.json").write_text(json.dumps(run))
    assert (
        ct.record_full(changed, out)["full_cpu"]["04_pruning"]
        != ct._load_times()["full_cpu"]["04_pruning"]
    )


def test_the_time_line_is_one_total_and_links_to_where_it_comes_from():
    """Reading at a first reader's pace, the exercises and the slowest quick run, summed; the
    CPUs, dates and loads are the workshop guide's, not the page's."""
    times = ct._load_times()
    stem = "04_pruning"
    size = ct.page_size(ct.ROOT / "notebooks" / f"{stem}.ipynb")
    line = " ".join(ct.time_line(stem, size, times).split())
    read = ct.first_reading(size)
    assert f"{read} min reading, {7 * size['exercises']} min for its" in line
    assert read > size["words"] / ct.WORDS_PER_MIN  # slower than the room's pace
    slowest = ct.slowest_quick(stem, times)
    assert ct._minutes(slowest) in line and "running in quick mode on 2 cores" in line
    total = read + 7 * size["exercises"] + slowest / 60
    assert ct._hours(total) in line
    assert "](../book/workshop.md)" in line and "load average" not in line
    assert "strict float32" in line  # chapter 4 computes in IEEE float32; the estimate is TF32
    assert "strict float32" not in " ".join(
        ct.time_line(
            "08_int8_quantization",
            ct.page_size(ct.ROOT / "notebooks" / "08_int8_quantization.ipynb"),
            times,
        ).split()
    )
    assert ct._span([27.0, 72.0]) == "27-72 s" and ct._span([27.0, 120.0]) == "27 s to 2.0 min"
    assert ct._hours(103) == "about 1 h 45" and ct._hours(48) == "about 50 min"


def test_another_cpu_is_kept_beside_the_reference_and_rooms_plan_with_the_slower(
    tmp_path: Path,
):
    """``record --also``: a second CPU's quick run. Each page names both, the workshop's
    table shows both and its rooms take the slower; a rerun on that CPU replaces its entry."""
    out = tmp_path / "times.json"
    shutil.copy(ct.TIMES, out)
    times = ct._load_times()
    times.pop("quick_also", None)
    out.write_text(json.dumps(times))
    stem = "10_capstone"
    slow = times["quick"][stem] * 3 + 7200  # long enough to outlast reading it
    run = {"notebook": stem, "seconds": slow, "passed": True, "loadavg": 2.1}
    run |= {"time": "2026-12-02T13:00:00"}
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([run]))
    amd = {"cpu": "AMD EPYC", "cores": 2, "flags": ["avx2"], "cpu_family": "family 25, model 1"}
    with pytest.raises(ValueError, match="reference CPU"):
        ct.record(runs, times["machine"], out, also=True)
    got = ct.record(runs, amd, out, also=True)
    assert got["quick"] == times["quick"]  # the reference run is untouched
    assert got["quick_also"][0]["quick"] == {stem: slow}
    size = ct.page_size(ct.ROOT / "notebooks" / f"{stem}.ipynb")
    line = " ".join(ct.time_line(stem, size, got).split())
    assert ct._minutes(slow) in line  # the page's range reaches the slower CPU
    block = ct.workshop_block(got)
    assert "CPU 2, AMD EPYC (family 25, model 1)" in block
    assert f"{ct._minutes(times['quick'][stem])} / {ct._minutes(slow)}" in block
    assert ct.room_minutes(stem, 0, got) > ct.room_minutes(stem, 0, times)
    run["seconds"] = 1.0  # the same CPU again: its entry is replaced, not added
    runs.write_text(json.dumps([run]))
    got = ct.record(runs, amd, out, also=True)
    assert len(got["quick_also"]) == 1 and got["quick_also"][0]["quick"][stem] == 1.0
    assert ct.room_minutes(stem, 0, got) == ct.room_minutes(stem, 0, times)


def test_another_cpus_full_size_run_is_kept_beside_the_reference(tmp_path: Path):
    """``record-full`` on another CPU's folder keeps its wall times beside the reference's
    (the reference's full-size times and GPU estimates untouched); each page's Time line and
    the workshop's full-size column name it; a rerun on that CPU replaces its entry."""
    out = tmp_path / "times.json"
    times = ct._load_times()
    times.pop("full_cpu_also", None)
    out.write_text(json.dumps(times))
    amd = {"cpu": "AMD EPYC", "cpu_family": "family 25, model 1", "cores": 2}
    amd |= {"cpu_features": ["avx2"], "memory_gib": 23.5}
    row = {"wall_s": 2877.4, "passed": True, "started": "2026-12-02T18:06:34Z"}
    run = {"machine": amd, "finished": "2026-12-02T19:00:00Z"}
    run["chapters"] = {
        "06_compile_optimisations": row | {"load_max": 3.4},
        "09_triton_serving": row | {"passed": False, "wall_s": 60.0},
    }
    folder = tmp_path / "amd-full-cpu"
    folder.mkdir()
    (folder / "full_cpu.json").write_text(json.dumps(run))  # no gpu_estimate.json: not read
    got = ct.record_full(folder, out)
    for field in ("full_cpu", "full_cpu_source", "gpu_estimate", "machine"):
        assert got[field] == times[field], field
    (entry,) = got["full_cpu_also"]
    assert entry["full"] == {"06_compile_optimisations": 2877.4}  # the passing chapters
    assert entry["failed"] == ["09_triton_serving"] and entry["date"] == "2026-12-02"
    stem = "06_compile_optimisations"
    block = ct.workshop_block(got)
    full_ref = ct._minutes(times["full_cpu"][stem])
    assert f"| {full_ref} / 48 min |" in block
    assert "full size on the CPU (measured on CPU 1 / 2)" in block
    assert "not measured" in block.split("| 4. Algorithmic pruning")[1].split("\n")[0]
    run["chapters"][stem]["wall_s"] = 600.0  # the same CPU again: replaced, not added
    (folder / "full_cpu.json").write_text(json.dumps(run))
    got = ct.record_full(folder, out)
    assert len(got["full_cpu_also"]) == 1 and got["full_cpu_also"][0]["full"][stem] == 600.0


def test_machines_compare_by_model_family_cores_and_flags():
    a = {"cpu": "AMD EPYC", "cpu_family": "family 25, model 1", "cores": 2, "flags": ["avx2"]}
    b = {"cpu": "AMD EPYC", "cpu_family": "family 25, model 1", "cores": 2}
    assert same_machine(a, b | {"cpu_features": ["avx2"], "memory_gib": 23.5})
    assert not same_machine(a, a | {"cpu_family": "family 23, model 49"})
    assert not same_machine(a, a | {"flags": ["avx2", "avx512f"]})
    assert not same_machine(a, a | {"cores": 4})


def test_the_rented_room_figures_come_from_the_plans_and_the_estimates(monkeypatch):
    """GPU-hours are the plans' sessions; the card table's OneFlow column follows compute
    capability (Hopper: the CPU); a card below full mode's GPU need is named, not hidden."""
    times = ct._load_times()
    f = ct.room_figures(times)
    assert f["plan_hours"] == {
        plan: len(sessions) * ct.SESSION_MIN / 60 for plan, sessions in ct.PLANS.items()
    }
    cards = {c["card"]: c for c in f["cards"]}
    assert cards["H100, H800"]["oneflow_gpu"] is False and cards["H20"]["oneflow_gpu"] is False
    assert cards["A100, A800"]["oneflow_gpu"] is True and cards["L20"]["oneflow_gpu"] is True
    whole_a100 = sum(v["A100"] for v in times["gpu_estimate"].values()) / 60
    assert cards["A100, A800"]["whole_min"] == pytest.approx(whole_a100)
    block = ct.room_block(times)
    assert "Every card here holds" in block and f"{f['plan_hours']['Two days']:.1f}" in block
    monkeypatch.setattr(ct, "CARDS", [*ct.CARDS, ("RTX 4060", (8, 9), "8", None)])
    assert "All but RTX 4060 hold" in ct.room_block(times)  # the control: an 8 GB card
    zh = ct.room_block(times, zh=True)
    assert "除 RTX 4060 外" in zh and "显卡" in zh


def test_the_hub_totals_scale_the_measured_quick_peaks():
    times = ct._load_times() | {
        "quick_shm": {"mib": {"09_triton_serving": 40.0, "05_parallelism": 2.0}, "date": "d"}
    }
    f = ct.room_figures(times)
    assert f["shm_mib"] == 40.0 and f["shm_chapter"] == "09_triton_serving"
    block = ct.room_block(times)
    hub = f["hub"]
    assert f"{2 * hub} cores" in block and f"`/dev/shm` {40.0 * hub:.0f} MiB" in block
    assert f"{f['quick_gib'] * hub:.0f} GiB of RAM" in block
