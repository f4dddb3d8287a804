"""helpers.measure.measurement: Measurement statistics and printing, speedups, paired ratios."""

from __future__ import annotations

import pytest

from helpers.measure.measurement import (
    SPREAD_WARNING,
    Measurement,
    RatioSummary,
    paired_ratio,
    percentile,
)


def _ms(values):
    return [v / 1e3 for v in values]


def test_measurement_percentiles_on_known_times():
    m = Measurement("known", _ms(range(1, 101)))  # 1..100 ms
    assert m.mean == pytest.approx(0.0505)
    assert m.median == pytest.approx(0.0505)
    assert m.p99 == pytest.approx(0.09901)  # linear interpolation: 1 + 0.99 * 99 ms
    assert m.std == pytest.approx(0.029011, rel=1e-4)
    d = m.as_dict()
    assert d["repeats"] == 100 and d["p99_s"] == pytest.approx(m.p99)


def test_measurement_order_does_not_matter_and_single_value():
    m = Measurement("rev", _ms(range(100, 0, -1)))
    assert m.p99 == pytest.approx(0.09901)
    one = Measurement("one", [0.002])
    assert one.std == 0.0 and one.p99 == one.median == 0.002


def test_measurement_rejects_empty_and_bad_items():
    with pytest.raises(ValueError, match="no timings"):
        Measurement("empty", [])
    with pytest.raises(ValueError, match="items"):
        Measurement("bad", [0.1], items=0)
    for bad in (float("nan"), -0.001, float("inf"), "1"):
        with pytest.raises(ValueError, match="each time in seconds must be a finite number >= 0"):
            Measurement("bad", [0.1, bad])


def test_measurement_spread_statistics():
    m = Measurement("known", _ms(range(1, 101)))  # 1..100 ms
    assert m.p25 == pytest.approx(0.02575) and m.p75 == pytest.approx(0.07525)
    assert m.iqr == pytest.approx(0.0495) and m.relative_iqr == pytest.approx(0.0495 / 0.0505)
    assert "p99/p50 1.96" in str(m)  # 0.09901 / 0.0505
    assert m.runs == 100 and m.as_dict()["iqr_s"] == pytest.approx(m.iqr)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_measurement_str_leads_with_median_and_p99():
    text = str(Measurement("eager", _ms([10, 10, 10, 10, 12]), items=2, warmup=3))
    assert text == (
        "eager: median 10.00 ms, p99 11.92 ms per call (5 runs after 3 warm-up)\n"
        "  spread: IQR 0.00 ms (0% of the median), p99/p50 1.19; mean 10.40 +- 0.89 ms; 200.0\n"
        "    items/s at the median"
    )
    assert max(len(line) for line in text.splitlines()) <= 88  # the book's column: no scrolling


def test_measurement_warns_when_the_spread_is_large():
    steady = Measurement("steady", _ms([10, 10.2, 10.4, 10.6, 10.8]))  # IQR 0.4 ms = 4 %
    assert not steady.noisy and "WARNING" not in str(steady)
    noisy = Measurement("noisy", _ms([8, 10, 12, 14, 30]))  # IQR 4 ms = 33 % of the median
    assert noisy.relative_iqr > SPREAD_WARNING and noisy.noisy
    text = str(noisy)
    assert "\n  WARNING: the IQR is 33% of the median (over 10%)" in text
    assert max(len(line) for line in text.splitlines()) <= 88
    # the threshold itself: just under and just over 10 % of the median
    assert not Measurement("under", _ms([9.6, 9.9, 10, 10.4, 10.4])).noisy  # IQR 5 %
    assert Measurement("over", _ms([9, 9.4, 10, 10.5, 11])).noisy  # IQR 11 %
    # fewer than 4 runs: no quartiles to speak of, no warning
    assert not Measurement("few", _ms([1, 5, 9])).noisy


def test_paired_ratio_median_and_spread():
    base = Measurement("base", [0.010, 0.012, 0.011, 0.020], items=1)
    fast = Measurement("fast", [0.005, 0.006, 0.0055, 0.010], items=1)
    r = paired_ratio(base, fast)
    assert r.rounds == 4 and r.median == pytest.approx(2.0) and r.interval == "2.00-2.00"
    assert "2.00x" in str(r) and "4 rounds" in str(r)
    per_item = Measurement("batch 2", [0.010] * 4, items=2)
    assert paired_ratio(base, per_item).ratios[0] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="one interleaved run"):
        paired_ratio(base, Measurement("short", [0.01]))


def test_measurement_round_trips_through_a_dict():
    """What a subprocess sends back (as_dict + times_s) becomes the same Measurement again."""
    from helpers.measure.machine import MachineLoad
    from helpers.measure.measurement import measurement_from_dict

    load = MachineLoad(2.0, 0.5, 0.0, 1.0, 1.5, resolution_s=0.04)
    m = Measurement(
        "x", [0.01, 0.02, 0.03], items=4, threads=2, device="cpu", cpu_s=3.0, wall_s=2.0
    )
    m.load = load
    back = measurement_from_dict({**m.as_dict(), "times_s": m.times_s})
    assert back.times_s == m.times_s and back.items == 4 and back.threads == 2
    assert back.cores_used == pytest.approx(1.5) and back.contended is True
    assert back.load.others_cores == pytest.approx(0.25)


def test_a_ratio_whose_interval_holds_one_is_inconclusive():
    base = Measurement("base", [0.010, 0.011, 0.010, 0.012, 0.010], items=1)
    same = Measurement("same", [0.011, 0.010, 0.010, 0.010, 0.011], items=1)
    fast = Measurement("fast", [0.005, 0.006, 0.005, 0.006, 0.005], items=1)
    r = paired_ratio(base, same)
    assert not r.conclusive and r.verdict().startswith("inconclusive")
    assert paired_ratio(base, fast).verdict() == "2.00x faster"
    assert paired_ratio(fast, base).verdict() == "0.50x slower"
    # the sentences' reading: the spread always said, once
    assert paired_ratio(base, fast).stated == "2.00x faster (per-round IQR 2.00-2.00)"
    assert paired_ratio(base, fast).short == "2.00x (2.00-2.00)"  # one interval spelling
    assert r.stated == r.verdict() and r.stated.count("per-round IQR") == 1


def test_two_ratios_are_apart_only_when_their_intervals_do_not_meet():
    base = Measurement("base", [0.010, 0.011, 0.010, 0.012, 0.010], items=1)
    same = Measurement("same", [0.011, 0.010, 0.010, 0.010, 0.011], items=1)
    fast = Measurement("fast", [0.005, 0.006, 0.005, 0.006, 0.005], items=1)
    noise, gain = paired_ratio(base, same), paired_ratio(base, fast)
    assert gain.apart_from(noise) and noise.apart_from(gain)
    assert not noise.apart_from(noise)


def test_an_interval_that_reaches_one_holds_one():
    """Catches M12 (``conclusive`` with ``>=``/``<=``): a per-round interval that starts or ends
    exactly at 1.00 holds 1, so the ratio is inconclusive."""
    up = RatioSummary(median=1.2, p25=1.0, p75=1.4, rounds=4, ratios=(1.0, 1.0, 1.4, 1.4))
    down = RatioSummary(median=0.8, p25=0.6, p75=1.0, rounds=4, ratios=(0.6, 0.6, 1.0, 1.0))
    for r in (up, down):
        assert not r.conclusive and r.verdict().startswith("inconclusive")


def test_a_measurement_without_a_load_is_unknown_not_quiet():
    """Catches M14 (``Measurement.contended`` as ``bool(...)``): with no load probe the load is
    unknown (None), not quiet (False)."""
    m = Measurement("m", [0.01, 0.01], items=1)
    assert m.load is None and m.contended is None and m.as_dict()["contended"] is None
