"""helpers.measure.ladder: the climb, each rung timed on the last kept path (a fake capstone)."""

from __future__ import annotations

import math

import pytest
from ladder_support import ROUNDS, RUNGS, R, climb, fake_timer

from helpers.measure import ladder as climbing


def test_each_rung_builds_on_the_last_kept_path_only():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    # pipelining is slower: not kept, and no path above it contains it
    assert by["pipelining"]["verdict"] == "not kept (slower)"
    assert by["compiler"]["base"] == "batching"
    assert not lad.paths["compiler (folding)"].get("pipeline")
    assert not lad.paths["forward only"].get("pipeline")  # the branch leaves from what was kept
    assert by["fwd"]["base"] == "batching" and by["int8"]["base"] == "forward only"
    # the control: the same climb with pipelining kept carries it into every path above
    lad_loose = climb(keep=lambda r: True)
    assert lad_loose.paths["compiler (folding)"]["pipeline"]
    assert {r["key"]: r["base"] for r in lad_loose.rows}["compiler"] == "pipelining"


def test_factors_are_paired_over_the_base_and_the_end_is_measured():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    assert by["graph"]["verdict"] == "measured, not built on" and not by["graph"]["kept"]
    assert by["graph"]["base"] == "naive" and math.isclose(by["graph"]["factor"], 1.6)
    assert math.isclose(by["pruning"]["factor"], 2.0) and by["pruning"]["kept"]
    assert math.isclose(by["batching"]["factor"], 4.0)
    assert by["compiler"]["candidate"] == "compiler (folding)"  # the faster candidate
    assert math.isclose(by["compiler"]["factor"], 1.25) and by["compiler"]["kept"]
    assert lad.final == "compiler (folding)"
    assert math.isclose(lad.end_to_end.median, 10.0)  # 2 * 4 * 1.25, timed together
    assert set(lad.final_stage) == {"naive", "compiler (folding)"}
    assert math.isclose(by["compiler"]["cumulative"], 10.0)  # the chained estimate
    # the forward-only branch is a task change: shown, never counted as a speed-up
    assert by["fwd"]["verdict"] == "a different task" and math.isclose(by["fwd"]["factor"], 2.0)
    assert math.isclose(by["int8"]["factor"], 5.0) and by["int8"]["kept"]
    assert [r["candidate"] for r in lad.kept()] == ["pruning", "batching", "compiler (folding)"]
    assert by["pruning"]["reported"] is None
    # the case study's factors by rung key
    by = {r["key"]: r for r in climb(reported={"batching": 2.55, "pruning": 2.33}).rows}
    assert by["batching"]["reported"] == 2.55 and by["pruning"]["reported"] == 2.33


def test_a_dropped_rung_says_why_from_its_numbers():
    lad = climb()
    by = {r["key"]: r for r in lad.rows}
    reason = by["pipelining"]["reason"]
    assert reason.startswith("slower: 0.77x") and "lies below 1" in reason
    assert reason.endswith("; two cores")  # the page's own reason, from the rung's why
    assert by["graph"]["reason"].startswith("measured, not built on")
    assert by["pruning"]["reason"] == ""  # kept: nothing to explain
    # an inconclusive rung: faster on average, slower in some rounds
    wobble = {"compiler (folding)": [0.9, 1.35, 0.9, 1.35, 0.9, 1.35, 0.9, 1.35, 0.9]}
    wobble["compiler (torch.compile)"] = [1.0] * ROUNDS
    lad = climb(timer=lambda fns, **kw: fake_timer(fns, wobble=wobble, **kw))
    row = {r["key"]: r for r in lad.rows}["compiler"]
    assert row["verdict"] == "not kept (inconclusive)" and "holds 1" in row["reason"]
    assert "compiler (torch.compile) 0.99x" in row["reason"]  # the other candidate's factor
    assert lad.final == "batching" and math.isclose(lad.end_to_end.median, 8.0)


def test_a_candidate_that_fails_its_check_is_never_kept():
    """The fastest candidate gives a wrong answer: another is kept, or none, and it says why."""

    def check(label, settings, base):
        return "3 rows nearest another class" if settings.get("fold") == 1.25 else None

    lad = climb(check=check)
    row = {r["key"]: r for r in lad.rows}["compiler"]
    assert row["candidate"] == "compiler (torch.compile)"  # the slower one that is right
    assert not row["kept"] and "compiler (folding) fails its check: 3 rows" in row["reason"]
    assert lad.failed == {"compiler (folding)": "3 rows nearest another class"}
    assert lad.final == "batching"
    # a rung whose only candidate fails is not kept, whatever its factor
    lad = climb(check=lambda label, s, base: "wrong" if s.get("batch") == 16 else None)
    row = {r["key"]: r for r in lad.rows}["batching"]
    assert row["verdict"] == "not kept (fails its check)" and math.isclose(row["factor"], 4.0)
    assert row["reason"] == "fails its check: wrong"  # the path's name is the row's already
    assert "batch" not in lad.paths["compiler (folding)"]  # never built on
    # a control or the naive path that fails stops the climb: the method itself is broken
    with pytest.raises(AssertionError, match="A/A: pipelining again fails its check"):
        climb(check=lambda label, s, base: "wrong" if label.startswith("A/A") else None)


def test_climb_rejects_bad_ladders():
    with pytest.raises(ValueError, match="no rungs"):
        climb([])
    with pytest.raises(ValueError, match="unique"):
        climb(RUNGS + [RUNGS[1]])
    with pytest.raises(ValueError, match="unique"):
        climb([R("a", {"x": {}}), R("b", {"x": {}})])
    with pytest.raises(ValueError, match="no candidates"):
        climb([R("a", {})])
    with pytest.raises(ValueError, match="branch"):
        climb([R("a", {"x": {}}, branch="a")])
    with pytest.raises(ValueError, match="later"):
        climb([R("a", {"x": {}}, later=True)])
    with pytest.raises(ValueError, match="no branch"):
        climb([R("a", {"x": {"forward": True}}, forward_only=True)])


def test_a_climb_with_real_timings():
    """The real benchmark_interleaved: a path 4x as fast is kept, one 4x slower is dropped.

    Sleeps, not spins: a busy machine delays a sleeping call by its scheduling jitter only."""
    import time

    def real(s):
        t = 0.02 / (4.0 if s.get("fast") else 1.0) * (4.0 if s.get("slow") else 1.0)
        return climbing.Timed(lambda: time.sleep(t), items=1, framework="none")

    rungs = [R("a", {"fast": {"fast": True}}), R("b", {"slow": {"slow": True}})]
    lad = climbing.climb({}, rungs, real, rounds=9)
    assert [r["verdict"] for r in lad.rows] == ["baseline", "kept", "not kept (slower)"]
    assert lad.final == "fast" and lad.end_to_end.median > 2.0
