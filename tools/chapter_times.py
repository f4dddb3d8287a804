"""Each chapter's "Time" line, generated from measured run times and the page's own size.

A chapter header states how long the chapter takes: running it (measured: nbval's wall time of the
whole notebook in quick mode on a named CPU; a full-size run on the same CPU; a GPU estimate
labelled as one), reading it and doing its exercises (estimated from its words, code lines and
exercises, and said to be estimates). The measured figures live in
``results/reference/chapter_times.json``; this tool writes every chapter's "**Time:**" paragraph
from it, so a page cannot state a time nobody measured. CPUs differ (two-core cloud machines more
than twofold in quick mode): ``record --also`` and ``record-full`` keep another CPU's quick or
full-size run beside the reference CPU's, each page names both, and the workshop plans with the
slower.

    python tools/chapter_times.py record _build/nbval_times/quick.json   # a quiet nbval run's times
    python tools/chapter_times.py record --also _build/nbval_times/quick.json  # another CPU's
    python tools/chapter_times.py record-full results/reference/<cpu>-full-cpu  # make fullcpu's
    python tools/chapter_times.py write                                  # rewrite the Time lines
    python tools/chapter_times.py check                                  # exit 1 if a page differs
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from helpers.core import cuda_compat, machine_needs  # noqa: E402
from helpers.core.hardware import describe_machine, machine_facts, same_machine  # noqa: E402

TIMES = ROOT / "results" / "reference" / "chapter_times.json"
WORDS_PER_MIN = 180  # reading along in a room, while the teacher walks through the code
CODE_LINES_PER_MIN = 25
# A reader on their own, for the first time and often in a second language: the walkthroughs
# found the room's pace 1.5-2x short for them (../shared/reviews, issue 37)
FIRST_WORDS_PER_MIN = 120
FIRST_CODE_LINES_PER_MIN = 15
MIN_PER_EXERCISE = 7  # learners took 3-14 minutes per exercise in the walkthroughs
HIDDEN = {"remove-input", "remove-cell", "hide-cell", "hide-input"}
_TIME_PARA = re.compile(r"\*\*Time:\*\*.*?(?=\n\n|\Z)", re.S)

__all__ = [
    "page_size",
    "time_line",
    "first_reading",
    "chapters",
    "write",
    "check",
    "record",
    "room_minutes",
    "slowest_quick",
    "workshop_block",
]


def chapters(root: Path = ROOT) -> list[Path]:
    """The chapter notebooks (appendices have no Time line)."""
    return sorted(p for p in (root / "notebooks").glob("[0-9][0-9]*.ipynb"))


def _cells(nb: Path) -> list[dict[str, Any]]:
    return json.loads(nb.read_text(encoding="utf-8"))["cells"]


def page_size(nb: Path) -> dict[str, int]:
    """Words of prose, lines of code shown (hidden and solution cells excluded), exercises."""
    words = lines = 0
    exercises = 0
    in_exercises = False  # exercises may go on in the cells after the heading, one per cell
    for c in _cells(nb):
        src = "".join(c["source"])
        tags = set(c.get("metadata", {}).get("tags", []))
        if c["cell_type"] == "markdown":
            if "**Time:**" in src:
                src = _TIME_PARA.sub("", src)
            words += len(re.findall(r"[A-Za-z0-9][\w'-]*", src))
            block = re.search(r"^## Exercises\s*$(.*?)(?=^#{1,2} |\Z)", src, re.M | re.S)
            if block:
                in_exercises = not re.search(r"^#{1,2} ", block.group(1), re.M)
                exercises += len(re.findall(r"^\d+\. ", block.group(1), re.M))
            elif in_exercises and re.search(r"^#{1,2} ", src, re.M):
                in_exercises = False
            elif in_exercises:
                exercises += len(re.findall(r"^\d+\. ", src, re.M))
        elif c["cell_type"] == "code" and not tags & HIDDEN:
            lines += sum(1 for line in src.splitlines() if line.strip())
    strict = any("set_tf32(False)" in "".join(c["source"]) for c in _cells(nb))
    return {"words": words, "code_lines": lines, "exercises": exercises, "strict_fp32": strict}


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def _cpus(times: dict[str, Any]) -> list[dict[str, Any]]:
    """The other CPUs than the reference, in the order they are numbered (2, 3 ...): those
    whose quick runs were kept, in that order, then those with a full-size run only."""
    cpus = [o["machine"] for o in times.get("quick_also", [])]
    for o in times.get("full_cpu_also", []):
        if not any(same_machine(o["machine"], m) for m in cpus):
            cpus.append(o["machine"])
    return cpus


def cpu_numbers(times: dict[str, Any], machines: list[dict[str, Any]]) -> list[int]:
    """Each machine's CPU number on every page (the workshop, book/setup.md, the Time lines):
    2, 3 ... as ``_cpus`` orders them; a machine not yet recorded gets the next free number."""
    cpus = _cpus(times)
    numbers = []
    for m in machines:
        if not any(same_machine(m, c) for c in cpus):
            cpus.append(m)
        numbers.append(next(i for i, c in enumerate(cpus) if same_machine(m, c)) + 2)
    return numbers


def _numbered(times: dict[str, Any], field: str) -> list[tuple[int, dict[str, Any]]]:
    """The entries of ``quick_also`` or ``full_cpu_also``, each with its CPU's number."""
    entries = times.get(field, [])
    numbers = cpu_numbers(times, [o["machine"] for o in entries])
    return sorted(zip(numbers, entries, strict=True), key=lambda t: t[0])


# The 1-minute load average includes the chapter's own kernel threads and child processes
# (chapter 2's OneFlow children took a quiet 2-core machine to 2.3): other jobs are suspected
# only above this many times the cores.
BUSY_LOAD = 1.5


def _span(seconds: list[float]) -> str:
    """``'27-72 s'``, ``'1.9-5.8 min'``, or one figure when the runs agree to the unit shown."""
    lo, hi = _minutes(min(seconds)), _minutes(max(seconds))
    if lo == hi:
        return lo
    (a, unit_a), (b, unit_b) = lo.rsplit(" ", 1), hi.rsplit(" ", 1)
    return f"{a}-{b} {unit_a}" if unit_a == unit_b else f"{lo} to {hi}"


def _hours(minutes: float) -> str:
    """``'about 50 min'`` or ``'about 1 h 45'``, to the nearest 5 minutes."""
    m = max(5, int(5 * round(minutes / 5)))
    return f"about {m} min" if m < 60 else f"about {m // 60} h {m % 60:02d}"


def first_reading(size: dict[str, int]) -> int:
    """Minutes a reader on their own needs to read a page for the first time."""
    return math.ceil(
        size["words"] / FIRST_WORDS_PER_MIN + size["code_lines"] / FIRST_CODE_LINES_PER_MIN
    )


def time_line(stem: str, size: dict[str, int], times: dict[str, Any]) -> str:
    """A chapter's one-line "**Time:**": reading, exercises and running (the range of the quick
    runs on every CPU), in total; the line links to ``book/workshop.md`` for where each comes from."""
    runs = [times["quick"].get(stem), *(o["quick"].get(stem) for o in times.get("quick_also", []))]
    runs = [r for r in runs if r]
    read, ex = first_reading(size), size["exercises"] * MIN_PER_EXERCISE
    total = read + ex + (max(runs) / 60 if runs else 0.0)
    text = f"**Time:** {_hours(total)}: {read} min reading, {ex} min for its "
    text += f"{size['exercises']} exercise" + ("s" if size["exercises"] != 1 else "")
    if runs:
        text += f", {_span(runs)} running in quick mode on 2 cores"
    gpu = times.get("gpu_estimate", {}).get(stem)
    if gpu:
        text += f" (full size on a GPU: {_span(list(gpu.values()))}, estimated at TF32 peaks"
        if size.get("strict_fp32"):
            text += "; its float32 rows run strict float32: expect longer"
        text += ")"
    text += " ([how these were measured](../book/workshop.md))."
    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False))


WORKSHOP = ROOT / "book" / "workshop.md"
_BLOCK = re.compile(r"(<!-- chapter-times:start.*?-->\n).*?(<!-- chapter-times:end -->)", re.S)
DISCUSSION_MIN = 10  # per chapter in a room: the teacher's demonstration and questions
# The plans: (session, [(chapter, exercises done in the room)]), in order. A day is 6 hours of
# contact time in two halves; `workshop_block` says how long each session takes from the
# measured times, and tests/tools/test_chapter_times.py fails when a session does not fit its length.
SESSION_MIN = 165  # a half day: 2 h 45 min between breaks
PLANS: dict[str, list[tuple[str, list[tuple[str, int]]]]] = {
    "One day": [
        (
            "morning",
            [("00_measuring", 1), ("03_dynamic_to_static", 1), ("06_compile_optimisations", 1)],
        ),
        (
            "afternoon",
            [("07_onnx_runtimes", 1), ("08_int8_quantization", 1), ("09_triton_serving", 1)],
        ),
    ],
    "Two days": [
        (
            "day 1 morning",
            [("00_measuring", 2), ("01_migration", 1), ("02_precision_alignment", 1)],
        ),
        (
            "day 1 afternoon",
            [("03_dynamic_to_static", 2), ("04_pruning", 1), ("05_parallelism", 1)],
        ),
        (
            "day 2 morning",
            # chapter 7's second exercise moved to chapter 9 when chapter 7 grew (AOTInductor)
            [("06_compile_optimisations", 1), ("07_onnx_runtimes", 1), ("08_int8_quantization", 1)],
        ),
        (
            "day 2 afternoon",
            [("09_triton_serving", 2), ("09b_production_front", 1), ("10_capstone", 1)],
        ),
    ],
}


def room_reading(size: dict[str, int]) -> float:
    """Minutes to read a page in a room, along with the teacher."""
    return size["words"] / WORDS_PER_MIN + size["code_lines"] / CODE_LINES_PER_MIN


def room_minutes(stem: str, exercises: int, times: dict[str, Any], root: Path = ROOT) -> int:
    """Minutes a chapter takes in a room: participants read while it runs (the longer of the two,
    on the slowest CPU measured), then do ``exercises`` of its exercises, plus the teacher's
    discussion."""
    read = room_reading(page_size(root / "notebooks" / f"{stem}.ipynb"))
    run = slowest_quick(stem, times) / 60
    return math.ceil(max(read, run) + exercises * MIN_PER_EXERCISE + DISCUSSION_MIN)


def slowest_quick(stem: str, times: dict[str, Any]) -> float:
    """A chapter's quick-mode seconds on the slowest CPU measured (0 when none was)."""
    runs = [times["quick"], *(o["quick"] for o in times.get("quick_also", []))]
    return max((r[stem] for r in runs if stem in r), default=0.0)


def _title(nb: Path) -> str:
    first = "".join(_cells(nb)[0]["source"]).splitlines()[0]
    return first.lstrip("# ").split(":")[0]


PEAK_SUMS = {  # what a process tree's peak memory sums (conftest.py records which)
    "pss": "the sum of their proportional memory, shared pages counted once",
    "rss": "the sum of their resident memory, an upper bound",
}


def workshop_block(times: dict[str, Any], root: Path = ROOT) -> str:
    """The generated part of ``book/workshop.md``: per-chapter times and peaks, and the plans."""
    also = times.get("quick_also", [])
    on = f" on CPU 1{''.join(f' / {n + 2}' for n in range(len(also)))}" if also else ""
    full_also = _numbered(times, "full_cpu_also")
    full_on = f" on CPU 1{''.join(f' / {n}' for n, _ in full_also)}" if full_also else ""
    rows = [
        f"| chapter | runs in (quick, measured{on}) | full size on the CPU (measured{full_on}) "
        "| reading (estimate) | exercises (estimate) | peak memory, process tree (measured) |",
        "|---|---|---|---|---|---|",
    ]
    quick_runs = [times["quick"], *(o["quick"] for o in also)]
    full_runs = [times.get("full_cpu", {}), *(o["full"] for _, o in full_also)]
    for nb in chapters(root):
        size = page_size(nb)
        quick_text, full_text = (
            " / ".join(_minutes(r[nb.stem]) if r.get(nb.stem) else "not measured" for r in runs)
            for runs in (quick_runs, full_runs)
        )
        peak = times.get("quick_peak_mb", {}).get(nb.stem)
        read = math.ceil(room_reading(size))
        rows.append(
            f"| {_title(nb)} | {quick_text} | {full_text} | {read} min | "
            f"{size['exercises']} x {MIN_PER_EXERCISE} min | "
            f"{f'{peak[0] / 1024:.1f} GiB' if peak else 'not measured'} |"
        )
    out = "\n".join(rows) + "\n\n"
    machine = times["machine"]
    first = "CPU 1, " if also else ""
    out += (
        f"Measured on {first}{describe_machine(machine)}, {times['quick_date']}, quick "
        f"mode under nbval (the busiest minute's load average: {times['quick_loadavg_max']:.1f})"
    )
    for n, o in enumerate(also):
        out += (
            f"; CPU {n + 2}, {describe_machine(o['machine'])}, {o['date']} (load average up to "
            f"{o['loadavg_max']:.1f})"
        )
    if also:
        stems = [nb.stem for nb in chapters(root) if all(nb.stem in o["quick"] for o in also)]
        total = [sum(times["quick"][st] for st in stems)]
        total += [sum(o["quick"][st] for st in stems) for o in also]
        out += (
            ". The whole quick run took "
            + " / ".join(_minutes(t) for t in total)
            + " on them: give a room the slower, as the plans below do"
        )
    out += ".\n"
    named = []
    for n, o in full_also:  # a CPU without a quick run is described here; a busy run says so
        m, load = o["machine"], o["loadavg_max"]
        seen = any(same_machine(m, q["machine"]) for q in also)
        named.append(
            f"CPU {n}" + ("" if seen else f" ({describe_machine(m)})") + f" on {o['date']}"
        )
        named[-1] += f" (load average up to {load:.1f})" if load > BUSY_LOAD * m["cores"] else ""
    if named:
        out += "\nFull size (`make fullcpu`, the fewest repeats): CPU 1, " + ", ".join(named)
        out += "; a chapter another CPU has not run at full size says not measured.\n"
    peaks = times.get("quick_peak_mb", {})
    if peaks:
        stem = max(peaks, key=lambda k: peaks[k][0])
        gb = peaks[stem][0] / 1024
        out += (
            f"\nThe heaviest chapter, {_title(root / 'notebooks' / f'{stem}.ipynb')}, peaked at "
            f"{gb:.1f} GiB for its whole process tree (kernel, servers, workers; "
            f"{PEAK_SUMS[times.get('quick_peak_sums', 'rss')]}): give each participant at least "
            f"{math.ceil(gb * 1.25)} GiB, one chapter's kernel at a time.\n"
        )
    for plan, sessions in PLANS.items():
        out += f"\n### {plan}\n\n| session | chapters (exercises in the room) | minutes |\n"
        out += "|---|---|---|\n"
        for name, items in sessions:
            total = sum(room_minutes(st, n, times, root) for st, n in items)
            chs = ", ".join(
                f"{_title(root / 'notebooks' / f'{st}.ipynb').split('.')[0]} ({n})"
                for st, n in items
            )
            out += f"| {name} | {chs} | {total} of {SESSION_MIN} |\n"
    return out


# A room of rented GPUs: the cards Chinese rentals offer, each with its compute capability and
# memory (the cards' datasheets) and the column of tools/gpu_estimate.py that estimates it where
# one does: the A800 is the A100's chip and the H800 the H100's, each with a slower link between
# GPUs, which one GPU per participant does not use; the RTX 4090, L20 and H20 have no column.
CARDS: list[tuple[str, tuple[int, int], str, str | None]] = [
    ("A100, A800", (8, 0), "40 / 80", "A100"),
    ("RTX 4090, 4090D", (8, 9), "24", None),
    ("L20", (8, 9), "48", None),
    ("L4", (8, 9), "24", "L4"),
    ("H100, H800", (9, 0), "80", "H100"),
    ("H20", (9, 0), "96", None),
]
ROOM = 30  # participants of the review's two-day workshop on rented GPUs
HUB = 20  # participants of one shared hub (The Littlest JupyterHub's room)
_ROOM_BLOCK = re.compile(r"(<!-- rented-room:start.*?-->\n).*?(<!-- rented-room:end -->)", re.S)
ZH_INDEX = ROOT / "book" / "zh" / "index.md"


def room_figures(times: dict[str, Any], root: Path = ROOT) -> dict[str, Any]:
    """The numbers of the rented-room section, each from a measurement or an estimate file:
    GPU-hours per plan, each card's estimate of a whole full run, the hub's totals."""
    needs = machine_needs.NEEDS
    est = times.get("gpu_estimate", {})
    whole = {g: sum(v[g] for v in est.values()) for g in next(iter(est.values()), {})}
    plans = {plan: len(sessions) * SESSION_MIN / 60 for plan, sessions in PLANS.items()}
    slowest_run = max(  # minutes, the slowest estimated chapter on any GPU column
        (s / 60, stem) for stem, per in est.items() for s in per.values()
    )
    reading = {
        stem: room_reading(page_size(root / "notebooks" / f"{stem}.ipynb"))
        for _, sessions in PLANS["Two days"]
        for stem, _ in sessions
    }
    runs_shorter = all(
        max(est.get(stem, {}).values(), default=0) / 60 < read for stem, read in reading.items()
    )
    peaks = times["quick_peak_mb"]
    heavy = max(peaks, key=lambda k: peaks[k][0])
    shm = times.get("quick_shm", {})
    shm_mib = shm.get("mib", {})
    shm_heavy = max(shm_mib, key=lambda k: shm_mib[k]) if shm_mib else None
    cards = [
        {
            "card": name,
            "cc": f"{cc[0]}.{cc[1]}",
            "memory_gb": mem,
            "oneflow_gpu": cuda_compat.runs_on(cc, cuda_compat.ONEFLOW_CUDA_ARCHS),
            "column": col,
            "whole_min": whole[col] / 60 if col else None,
            # the smallest memory the card is sold with, in GB, against the need in GiB
            "holds_full": float(mem.split("/")[0]) * 1e9 >= needs["full_gpu_gib"] * 2**30,
        }
        for name, cc, mem, col in CARDS
    ]
    return {
        "cards": cards,
        "full_gpu_gib": needs["full_gpu_gib"],
        "full_host_gib": needs["full_host_gib"],
        "full_host_chapter": needs["full_host_chapter"],
        "above_12": [(k, v) for k, v in sorted(needs["full_host_by_chapter"].items()) if v > 12],
        "plan_hours": plans,
        "room": ROOM,
        "runs_shorter": runs_shorter,
        "slowest_run": slowest_run,
        "hub": HUB,
        "quick_gib": peaks[heavy][0] / 1024,
        "quick_chapter": heavy,
        "quick_advice_gb": math.ceil(peaks[heavy][0] / 1024 * 1.25),
        "shm_mib": shm_mib[shm_heavy] if shm_heavy else None,
        "shm_chapter": shm_heavy,
        "shm_date": shm.get("date"),
    }


def _card_rows(f: dict[str, Any], zh: bool) -> list[str]:
    if zh:
        rows = [
            "| 显卡 | 计算能力 | 显存 (GB) | OneFlow 0.9.0 | 完整模式跑完全部章节（估计） |",
            "|---|---|---|---|---|",
        ]
    else:
        rows = [
            "| card | compute capability | memory (GB) | OneFlow 0.9.0 | whole full-mode run "
            "(estimate) |",
            "|---|---|---|---|---|",
        ]
    for c in f["cards"]:
        flow = (
            ("GPU" if zh else "on the GPU") if c["oneflow_gpu"] else ("CPU" if zh else "on the CPU")
        )
        if c["column"]:
            whole = (
                f"约 {c['whole_min']:.0f} 分钟（{c['column']} 一列）"
                if zh
                else f"about {c['whole_min']:.0f} min ({c['column']} column)"
            )
        else:
            whole = "没有估计" if zh else "no estimate"
        rows.append(f"| {c['card']} | {c['cc']} | {c['memory_gb']} | {flow} | {whole} |")
    return rows


def room_block(times: dict[str, Any], root: Path = ROOT, zh: bool = False) -> str:
    """The generated part of the rented-room section (English, or Chinese for book/zh/)."""
    f = room_figures(times, root)
    hours = f["plan_hours"]
    one, two = hours["One day"], hours["Two days"]
    shm = f["shm_mib"]
    hub_shm_gib = shm * f["hub"] / 1024 if shm is not None else None
    hub_shm = (
        f"{hub_shm_gib:.1f} GiB"
        if hub_shm_gib and hub_shm_gib >= 1
        else f"{(shm or 0) * f['hub']:.0f} MiB"
    )
    rows = "\n".join(_card_rows(f, zh)) + "\n\n"
    above = ", ".join(f"{k} {v:.1f} GiB" for k, v in f["above_12"])
    short = [c["card"] for c in f["cards"] if not c["holds_full"]]
    if zh:
        holds = "每张卡的显存都超过" if not short else f"除 {'、'.join(short)} 外，显存都超过"
        text = rows + (
            f"{holds}完整模式最重一章的需求（约 {f['full_gpu_gib']:.1f} GiB，按元设备计数加上"
            "每个框架假定的 1 GiB，还没有在 GPU 上实测）。最后一列是 `tools/gpu_estimate.py` 按公开"
            "峰值给出的估计（A800 与 A100 同一芯片，H800 与 H100 同一芯片），不是实测；RTX 4090、L20 和 "
            "H20 没有对应的估计列。\n\n"
            f"**每位学员的 GPU 小时数**（实例只在上课时段开机）：一天的日程 {one:.1f} 小时，两天 {two:.1f}"
            f" 小时；{f['room']} 位学员分别约 {one * f['room']:.0f} 和 {two * f['room']:.0f} GPU 小时，"
            "另加讲师自己的一台（制作镜像、前一晚的 `make bench MODE=full`）。\n\n"
            f"**内存：** 完整模式下有几章的峰值超过 12 GiB（{above}，在 CPU 上以完整规模实测）。"
            f"内存少于 {f['full_host_gib']:.1f} GiB 的实例会自动选择 quick 模式，并输出一行原因。\n"
        )
        if hub_shm_gib is not None:
            text += (
                f"\n**共享服务器（{f['hub']} 人，quick 模式）合计：** {2 * f['hub']} 个 CPU 核"
                f"（quick 模式按每人 2 核测量），内存峰值 {f['quick_gib'] * f['hub']:.0f} GiB"
                f"（每人 {f['quick_gib']:.1f} GiB，{f['quick_chapter']}；按每人 "
                f"{f['quick_advice_gb']} GiB 准备则为 {f['quick_advice_gb'] * f['hub']} GiB），"
                f"`/dev/shm` {hub_shm}（每人峰值 {shm:.0f} MiB，{f['shm_chapter']}，每 0.1 秒采样一次，"
                "是下限；Docker 默认的 64 MB 不够）。\n"
            )
        return text
    holds = "Every card here holds" if not short else f"All but {', '.join(short)} hold"
    text = rows + (
        f"{holds} full mode's heaviest chapter (about {f['full_gpu_gib']:.1f} GiB of "
        "GPU memory, counted on PyTorch's meta device with 1 GiB assumed per framework: not yet "
        "measured on a GPU). The last column is `tools/gpu_estimate.py`'s estimate against "
        "published peaks, not a measurement; the A800 is estimated by the A100's column and the "
        "H800 by the H100's (the same chips), and the RTX 4090, L20 and H20 have no column.\n\n"
        f"**GPU-hours.** With each instance running only during the sessions, a participant "
        f"needs {one:.1f} GPU-hours for the one-day plan and {two:.1f} for the two-day plan: "
        f"{one * f['room']:.0f} and {two * f['room']:.0f} for a room of {f['room']}, plus the "
        "teacher's own instance (building the image, and `make bench MODE=full` the evening "
        "before, the whole-run estimate above)."
    )
    if f["runs_shorter"]:
        text += (
            " In full mode on these GPUs every chapter of the plans is estimated to run in less "
            f"time than its reading (the slowest, {f['slowest_run'][1]}, about "
            f"{f['slowest_run'][0]:.0f} min), so the plans' sessions hold as they are."
        )
    text += (
        f"\n\n**Host memory.** Measured at full size (on a CPU), {above} peak above 12 GiB. An "
        f"instance with less than {f['full_host_gib']:.1f} GiB of RAM chooses quick mode on its "
        "own and prints one line saying why; `make doctor` lists the chapters that do not fit.\n"
    )
    if hub_shm_gib is not None:
        text += (
            f"\n**Totals for a hub of {f['hub']}** (quick mode, one chapter's kernel each): "
            f"{2 * f['hub']} cores (quick mode was measured on 2 per participant); "
            f"{f['quick_gib'] * f['hub']:.0f} GiB of RAM if every kernel peaks at once "
            f"({f['quick_gib']:.1f} GiB each, {f['quick_chapter']}), "
            f"{f['quick_advice_gb'] * f['hub']} GiB at the {f['quick_advice_gb']} GiB each the next "
            f"section advises; `/dev/shm` {hub_shm} ({shm:.0f} MiB each at the peak, {f['shm_chapter']}: "
            f"measured {f['shm_date']}, the chapter's own mappings sampled every 0.1 s, so a lower "
            "bound; Docker's default of 64 MB is below it).\n"
        )
    return text


def _swap(path: Path, block: re.Pattern[str], body: str, dry: bool) -> bool:
    text = path.read_text(encoding="utf-8")
    if not block.search(text):
        raise ValueError(f"{path}: no generated block {block.pattern[:30]!r}")
    new = block.sub(lambda m: m.group(1) + body + m.group(2), text)
    if new != text and not dry:
        path.write_text(new, encoding="utf-8")
    return new != text


def _workshop(times: dict[str, Any], root: Path, dry: bool) -> bool:
    path = root / WORKSHOP.relative_to(ROOT)
    changed = _swap(path, _BLOCK, workshop_block(times, root), dry)
    for page, zh in ((path, False), (root / ZH_INDEX.relative_to(ROOT), True)):
        if page.exists() and _ROOM_BLOCK.search(page.read_text(encoding="utf-8")):
            changed |= _swap(page, _ROOM_BLOCK, room_block(times, root, zh=zh), dry)
    return changed


def _load_times(path: Path = TIMES) -> dict[str, Any]:
    return json.loads(path.read_text())


def _rewrite(nb: Path, times: dict[str, Any], dry: bool) -> bool:
    data = json.loads(nb.read_text(encoding="utf-8"))
    for c in data["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown" and "**Time:**" in src:
            new = _TIME_PARA.sub(lambda _: time_line(nb.stem, page_size(nb), times), src, count=1)
            if new == src:
                return False
            if not dry:
                c["source"] = new.splitlines(keepends=True)
                nb.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
            return True
    raise ValueError(f"{nb.name}: no '**Time:**' paragraph in any markdown cell")


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every chapter's Time line from the times file; the chapters that changed."""
    times = _load_times(root / TIMES.relative_to(ROOT))
    changed = [nb.stem for nb in chapters(root) if _rewrite(nb, times, dry=False)]
    return changed + (["workshop"] if _workshop(times, root, dry=False) else [])


def check(root: Path = ROOT) -> list[str]:
    """The chapters whose Time line differs from what the times file gives."""
    times = _load_times(root / TIMES.relative_to(ROOT))
    stale = [nb.stem for nb in chapters(root) if _rewrite(nb, times, dry=True)]
    return stale + (["workshop"] if _workshop(times, root, dry=True) else [])


def _save(times: dict[str, Any], out: Path) -> dict[str, Any]:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(times, indent=1) + "\n")
    return times


def _beside(out: Path, field: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Another CPU's run into ``field`` of the times file, replacing that CPU's earlier one."""
    times = _load_times(out)
    others = [o for o in times.get(field, []) if not same_machine(o["machine"], entry["machine"])]
    times[field] = [*others, entry]
    return _save(times, out)


def record(
    runs_file: Path, machine: dict[str, Any], out: Path = TIMES, *, also: bool = False
) -> dict[str, Any]:
    """Put the last passing quick-mode run of each chapter from ``runs_file`` into the times
    file: its time and peak memory; the date, load and what the peaks sum from those runs.
    ``also``: another CPU's run, kept beside the reference one (times, date and load only;
    it replaces an earlier run of the same CPU and flags)."""
    runs = json.loads(Path(runs_file).read_text())
    kept = {r["notebook"]: r for r in runs if r["passed"]}  # the last passing run of each
    if not kept:
        raise ValueError(f"{runs_file}: no passing run to record")
    quick = {k: kept[k]["seconds"] for k in sorted(kept) if k[:2].isdigit()}
    date = max(r["time"] for r in kept.values())[:10]
    load = max(r["loadavg"] for r in kept.values())
    if also:
        if same_machine(machine, _load_times(out)["machine"]):
            raise ValueError("this is the reference CPU: record its run without --also")
        entry = {"machine": machine, "quick": quick, "date": date, "loadavg_max": load}
        return _beside(out, "quick_also", entry)
    peaks = {k: r for k, r in kept.items() if r.get("peak_tree_mb")}
    sums = {r.get("peak_sums", "rss") for r in peaks.values()}  # runs before PSS summed RSS
    times = _load_times(out) if out.exists() else {}
    times.update(
        machine=machine,
        quick=quick,
        quick_peak_mb={
            k: [r["peak_tree_mb"], r["peak_process_mb"]] for k, r in sorted(peaks.items())
        },
        quick_peak_sums="pss" if sums == {"pss"} else "rss",
        quick_date=date,
        quick_loadavg_max=load,
    )
    return _save(times, out)


def record_full(folder: Path, out: Path = TIMES) -> dict[str, Any]:
    """Put a ``make fullcpu`` run's passing wall times and its GPU estimates
    (``tools/gpu_estimate.py``, run first) from ``folder`` into the times file. A run on
    another CPU than the reference's goes beside it (``full_cpu_also``: wall times, failures,
    date, load; it replaces an earlier run of the same CPU)."""
    full = json.loads((folder / "full_cpu.json").read_text())
    rows = {k: v for k, v in full["chapters"].items() if k[:2].isdigit()}
    passed = {k: v["wall_s"] for k, v in sorted(rows.items()) if v["passed"]}
    failed = sorted(set(rows) - set(passed))
    where = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    source = f"{where.as_posix()}/full_cpu.json"
    times = _load_times(out)
    if not same_machine(full["machine"], times["machine"]):
        m = dict(full["machine"])
        m["flags"] = m.pop("cpu_features", m.get("flags"))  # older runs' key
        entry = {
            "machine": {k: m.get(k) for k in ("cpu", "cpu_family", "cores", "flags")},
            "full": passed,
            "failed": failed,
            "date": max(v["started"] for v in rows.values())[:10],
            "loadavg_max": max(v.get("load_max", 0.0) for v in rows.values()),
            "source": source,
        }
        return _beside(out, "full_cpu_also", entry)
    times["full_cpu"] = passed
    times["full_cpu_source"] = f"{source} (make fullcpu: full sizes, fewest repeats" + (
        f"; failed: {', '.join(failed)})" if failed else ")"
    )
    times["gpu_estimate"] = json.loads((folder / "gpu_estimate.json").read_text())["gpu_estimate"]
    return _save(times, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record a quiet nbval run's times")
    rec.add_argument("runs", type=Path)
    rec.add_argument("--also", action="store_true", help="another CPU's run, beside the reference")
    full = sub.add_parser("record-full", help="record a make fullcpu run and its GPU estimates")
    full.add_argument("folder", type=Path)
    sub.add_parser("write", help="rewrite every chapter's Time line")
    sub.add_parser("check", help="exit 1 when a chapter's Time line differs from the file")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        machine = {k: machine_facts()[k] for k in ("cpu", "cpu_family", "cores", "flags")}
        print(json.dumps(record(args.runs, machine, also=args.also), indent=1))
        return 0
    if args.cmd == "record-full":
        times = record_full(args.folder)
        shown = ("full_cpu_source", "full_cpu", "full_cpu_also")
        print(json.dumps({k: times[k] for k in shown if k in times}, indent=1))
        return 0
    if args.cmd == "write":
        print("rewrote:", ", ".join(write()) or "nothing")
        return 0
    stale = check()
    if stale:
        print("Time lines differ from results/reference/chapter_times.json:", ", ".join(stale))
        print("run: python tools/chapter_times.py write")
        return 1
    print("chapter_times: every Time line matches the measured times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
