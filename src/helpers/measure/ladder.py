"""A speed-up ladder: each rung built on the last kept one, kept only when it pays.

Chapter 10's method, for any task on any model (the page builds the paths; this module climbs)::

    naive = {"variant": "original", "batch": 1, "workers": 1}      # the settings of a path
    rungs = [Rung("pruning", {"pruning": {"variant": "single_forward"}}), ...]
    lad = climb(naive, rungs, build, rounds=15)   # build(settings) -> Timed(call, items)

A **path** is a dict of settings. A **rung** offers candidate changes to the kept path (its
*base*); base, candidates and controls (an A/A twin) are timed in one interleaved run, each
candidate's factor the paired ratio base / candidate. The fastest is **kept** only when
``keep(ratio)`` (:func:`keep_rule`: the per-round interval wholly above 1); a rung not kept leaves
the base as it was, and its row says why. A candidate failing the page's ``check`` is shown but
never kept. Last, naive and final path are timed together: the **end-to-end** factor, measured
(the product of the kept factors is only its estimate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.measure.timer import benchmark_interleaved

__all__ = [
    "Timed",
    "Rung",
    "Ladder",
    "chain",
    "climb",
]

Settings = Mapping[str, Any]
Change = Mapping[str, Any] | Callable[[Settings], Settings]


@dataclass(frozen=True)
class Timed:
    """One timed call of a path: ``call()`` processes ``items`` images; ``framework`` says how
    the timer waits for its work."""

    call: Callable[[], Any]
    items: int
    framework: str = "torch"


@dataclass(frozen=True)
class Rung:
    """Candidate changes (label -> settings to update, or a function of the base's settings),
    controls timed beside them (never picked), ``twins`` kept apart in the rounds. ``why(row)``:
    the page's reason when dropped. A ``later`` rung is measured, never built on; a forward-only
    one leaves from the path kept right after rung ``branch``; a ``task_change`` is always taken,
    its factor never counted as a speed-up."""

    key: str
    candidates: Mapping[str, Change]
    label: str = ""
    controls: Mapping[str, Change] = field(default_factory=dict)
    twins: Sequence[tuple[str, str]] = ()
    forward_only: bool = False
    branch: str | None = None
    later: bool = False
    task_change: bool = False
    why: Callable[[Mapping[str, Any]], str] | None = None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.key)


def keep_rule(ratio: RatioSummary) -> bool:
    """A rung is kept only when its per-round interval (p25-p75) lies wholly above 1."""
    return ratio.p25 > 1.0


def chain(ratios: Sequence[RatioSummary]) -> RatioSummary:
    """The product of factors measured in separate runs, medians and quartiles multiplied: an
    estimate (the quartiles of a product are not the product of quartiles)."""
    if not ratios:
        return RatioSummary(1.0, 1.0, 1.0, 0, ())
    return RatioSummary(
        median=math.prod(r.median for r in ratios),
        p25=math.prod(r.p25 for r in ratios),
        p75=math.prod(r.p75 for r in ratios),
        rounds=min(r.rounds for r in ratios),
        ratios=(),
    )


@dataclass
class Ladder:
    """What :func:`climb` measured: ``rows``, one per rung after the naive baseline (the pick
    as ``candidate`` over its ``base``, ``factor``/``ratio``, ``kept``, ``verdict``, ``reason``,
    ``cumulative``: :func:`chain` of the kept factors so far); ``paths``: each path's settings;
    ``end_to_end``: naive / ``final`` timed together (None when nothing was kept); ``failed``:
    the candidates whose check failed, with the reason."""

    rows: list[dict[str, Any]]
    paths: dict[str, dict[str, Any]]
    stages: list[dict[str, Measurement]]
    naive: str
    final: str
    end_to_end: RatioSummary | None
    final_stage: dict[str, Measurement] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def kept(self) -> list[dict[str, Any]]:
        """The kept rows of the task (the forward-only branch's left out)."""
        return [r for r in self.rows[1:] if r["kept"] and not r["forward_only"]]

    def measurement(self, label: str) -> Measurement:
        """The last measurement of path ``label`` (from the last stage that timed it)."""
        for stage in reversed([*self.stages, self.final_stage]):
            if label in stage:
                return stage[label]
        raise KeyError(f"no path {label!r} was timed")


def _apply(base: Settings, change: Change) -> dict[str, Any]:
    if callable(change):
        return dict(change(dict(base)))
    return {**base, **change}


def _ms(m: Measurement) -> float:
    return m.median / m.items * 1e3


def climb(
    naive: Settings,
    rungs: Sequence[Rung],
    build: Callable[[dict[str, Any]], Timed],
    *,
    rounds: int = 15,
    keep: Callable[[RatioSummary], bool] = keep_rule,
    progress: bool = False,
    timer: Callable[..., dict[str, Measurement]] = benchmark_interleaved,
    check: Callable[[str, dict[str, Any], str | None], str | None] | None = None,
    reported: Mapping[str, float] | None = None,
) -> Ladder:
    """Climb ``rungs`` from the ``naive`` settings, each rung on the last kept path.

    Each stage is one ``timer`` run (benchmark_interleaved's arguments; a test gives a fake) of
    ``rounds`` rounds after one warm-up. ``build`` and then ``check(label, settings, base_label)``
    are called once per path: ``check`` returns None when the answer is right, else the reason.
    ``reported``: the case study's factor by rung key. The first path is labelled ``naive``.
    """
    naive_label = "naive"
    if not rungs:
        raise ValueError("no rungs given")
    keys = [r.key for r in rungs]
    if len(set(keys)) != len(keys) or naive_label in keys:
        raise ValueError(f"rung keys must be unique and differ from {naive_label!r}: {keys}")
    labels = [naive_label]
    for r in rungs:
        if not r.candidates:
            raise ValueError(f"rung {r.key!r} has no candidates")
        labels += [*r.candidates, *r.controls]
    if len(set(labels)) != len(labels):
        raise ValueError(f"path labels must be unique across the ladder: {labels}")
    for r in rungs:
        if r.branch is not None and (not r.forward_only or r.branch not in keys):
            raise ValueError(f"rung {r.key!r}: branch must name a rung, on a forward-only rung")
        if r.later and r.forward_only:
            raise ValueError(f"rung {r.key!r}: a forward-only rung cannot be 'later'")
        if r.task_change and (r.later or len(r.candidates) != 1):
            raise ValueError(f"rung {r.key!r}: a task change has one candidate and is not 'later'")
        if r.forward_only and r.branch is not None and keys.index(r.branch) > keys.index(r.key):
            raise ValueError(f"rung {r.key!r} branches from {r.branch!r}, a rung above it")

    paths: dict[str, dict[str, Any]] = {naive_label: dict(naive)}
    timed: dict[str, Timed] = {}
    base_of: dict[str, str | None] = {naive_label: None}
    failed: dict[str, str] = {}
    candidates = {c for r in rungs for c in r.candidates}

    def timed_of(label: str) -> Timed:
        if label not in timed:
            timed[label] = build(dict(paths[label]))
            reason = check(label, dict(paths[label]), base_of[label]) if check else None
            if reason and label not in candidates:
                raise AssertionError(
                    f"{label} fails its check, and it is not a candidate: {reason}"
                )
            if reason:
                failed[label] = reason
        return timed[label]

    def run(labels: list[str], twins: Sequence[tuple[str, str]]) -> dict[str, Measurement]:
        runs = {label: timed_of(label) for label in labels}
        return timer(
            {k: t.call for k, t in runs.items()},
            items={k: t.items for k, t in runs.items()},
            framework={k: t.framework for k, t in runs.items()},
            apart=list(twins),
            warmup=1,
            repeats=rounds,
            progress=progress,
            seed=len(stages),
        )

    stages: list[dict[str, Measurement]] = []
    rows: list[dict[str, Any]] = []
    level_of: dict[str, list[RatioSummary]] = {naive_label: []}
    task: str = naive_label  # the last kept task path
    fwd: str | None = None  # the last kept path of the forward-only branch
    after: dict[str, str] = {}  # rung key -> the task path kept right after it
    pending: list[Rung] = []
    for rung in rungs:
        if rung.forward_only:
            base = after[rung.branch] if rung.branch is not None else fwd
            if base is None:
                raise ValueError(f"forward-only rung {rung.key!r} has no branch to build on")
        else:
            base = task
        for label, change in {**rung.candidates, **rung.controls}.items():
            paths[label] = _apply(paths[base], change)
            base_of[label] = base
        if rung.later:
            pending.append(rung)
            continue
        group, pending = [*pending, rung], []
        stage_labels = [base] + [lab for r in group for lab in (*r.candidates, *r.controls)]
        measured = run(stage_labels, [t for r in group for t in r.twins])
        stages.append(measured)
        if not rows:
            rows.append(_baseline_row(naive_label, measured[naive_label]))
        for r in group:
            ratios = {c: paired_ratio(measured[base], measured[c]) for c in r.candidates}
            right = [c for c in ratios if c not in failed] or list(ratios)
            pick = max(right, key=lambda c: ratios[c].median)
            ratio = ratios[pick]
            kept = (r.task_change or bool(keep(ratio))) and not r.later and pick not in failed
            level = level_of[base] + ([ratio] if kept and not r.task_change else [])
            verdict, why = _verdict(ratio, kept, r.later)
            row = {
                "rung": r.label,
                "key": r.key,
                "candidate": pick,
                "base": base,
                "ms_per_image": _ms(measured[pick]),
                "factor": ratio.median,
                "ratio": ratio,
                "candidates": ratios,
                "kept": kept,
                "verdict": "not kept (fails its check)"
                if pick in failed
                else ("a different task" if r.task_change else verdict),
                "reason": "",
                "cumulative": chain(level).median,
                "reported": (reported or {}).get(r.key),
                "forward_only": r.forward_only,
                "stage": measured,
            }
            # why it was not kept, and every other candidate that failed its check
            parts = [
                f"{c} fails its check: {failed[c]}" for c in ratios if c in failed and c != pick
            ]
            if not kept:
                own = r.why(row) if r.why is not None and pick not in failed else ""
                others = ", ".join(f"{c} {x.median:.2f}x" for c, x in ratios.items() if c != pick)
                first = f"fails its check: {failed[pick]}" if pick in failed else why
                parts = [first, others, own, *parts]
            row["reason"] = "; ".join(part for part in parts if part)
            rows.append(row)
            if kept:
                level_of[pick] = level
            if r.forward_only:
                fwd = pick if kept else base
            else:
                task = pick if kept else task
                after[r.key] = task
    if pending:
        raise ValueError(f"the last rung {pending[-1].key!r} is 'later': nothing to time it with")
    final_stage: dict[str, Measurement] = {}
    e2e = None
    if task != naive_label:
        final_stage = run([naive_label, task], [])
        e2e = paired_ratio(final_stage[naive_label], final_stage[task])
    return Ladder(rows, paths, stages, naive_label, task, e2e, final_stage, failed)


def _verdict(ratio: RatioSummary, kept: bool, later: bool) -> tuple[str, str]:
    """A rung's verdict, and why it was not built on, from its numbers."""
    if kept:
        return "kept", ""
    if later:
        why = "measured, not built on: the ladder applies it again further up"
        return "measured, not built on", why
    span = f"{ratio.median:.2f}x, its per-round interval {ratio.p25:.2f}-{ratio.p75:.2f}"
    if ratio.reading == "slower":
        return "not kept (slower)", f"slower: {span} lies below 1"
    if ratio.reading == "faster":
        return "not kept (inconclusive)", (
            f"faster ({ratio.median:.2f}x), but the page's keep rule refused it"
        )
    return "not kept (inconclusive)", f"inconclusive: {span} holds 1"


def _baseline_row(label: str, m: Measurement) -> dict[str, Any]:
    one = RatioSummary(1.0, 1.0, 1.0, len(m.times_s), ())
    return {
        "rung": label,
        "key": label,
        "candidate": label,
        "base": "",
        "ms_per_image": _ms(m),
        "factor": 1.0,
        "ratio": one,
        "candidates": {},
        "kept": True,
        "verdict": "baseline",
        "reason": "",
        "cumulative": 1.0,
        "reported": None,
        "forward_only": False,
    }
