"""A fake capstone for the ladder's tests: each rung's cost modelled, timings with shared noise.

Imported by tests/measure/test_ladder.py (the climb) and tests/chapters/test_ch10_ladder.py and
test_ch10_report.py (its page's views); tests/ is on sys.path as the folder of tests/conftest.py.
"""

from __future__ import annotations

from helpers.measure import ladder as climbing
from helpers.measure.measurement import Measurement

NOISE = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.01]  # a slow spell hits a whole round
ROUNDS = len(NOISE)


def cost(s):
    """Seconds per image of the path the settings `s` describe (a model of the capstone)."""
    t = 0.08
    t /= 2.0 if s.get("pruned") else 1.0
    t /= 4.0 if s.get("batch", 1) > 1 else 1.0
    t *= 1.3 if s.get("pipeline") else 1.0  # slower here: must not be carried upward
    t /= s.get("fold", 1.0)
    t /= 2.0 if s.get("forward") else 1.0
    t /= 5.0 if s.get("int8") else 1.0
    return t


def build(s):
    return climbing.Timed(lambda s=dict(s): cost(s), items=2)


def fake_timer(fns, *, items, repeats, wobble=None, **_):
    """benchmark_interleaved's stand-in: each path's cost, scaled by the same round noise."""
    out = {}
    for label, fn in fns.items():
        per_image = fn()
        w = (wobble or {}).get(label, [1.0] * repeats)
        times = [per_image * items[label] * n * x for n, x in zip(NOISE[:repeats], w)]
        out[label] = Measurement(label, times_s=times, items=items[label])
    return out


R = climbing.Rung
RUNGS = [
    R("graph", {"static graph (torch.compile)": {"fold": 1.6}}, label="static graph", later=True),
    R("pruning", {"pruning": {"pruned": True}}),
    R("batching", {"batching": {"batch": 16}}),
    R(
        "pipelining",
        {"pipelining": {"pipeline": True}},
        controls={"A/A: pipelining again": {"pipeline": True}},
        twins=(("pipelining", "A/A: pipelining again"),),
        why=lambda row: "two cores",
    ),
    R(
        "compiler",
        {"compiler (torch.compile)": {"fold": 0.99}, "compiler (folding)": {"fold": 1.25}},
    ),
    R(
        "fwd",
        {"forward only": {"forward": True}},
        label="forward only",
        forward_only=True,
        branch="pipelining",
        task_change=True,
    ),
    R("int8", {"INT8 runtime": {"int8": True}}, label="INT8 runtime", forward_only=True),
]


def climb(rungs=RUNGS, **kw):
    timer = kw.pop("timer", fake_timer)
    return climbing.climb({}, rungs, build, rounds=ROUNDS, timer=timer, **kw)
