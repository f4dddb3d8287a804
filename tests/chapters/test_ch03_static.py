"""helpers.chapters.ch03_static: chapter 3's speedup table and figure, and its timings as deployed."""

from __future__ import annotations

import pytest
from tiny_models import images as _x
from tiny_models import tiny_classifier

from helpers.chapters import ch03_static
from helpers.compiling.graphs import StaticMeasurement
from helpers.core.comparison import assert_outputs_close
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio


def small(framework: str):
    return tiny_classifier(framework, width=4, classes=3)


def _m(label, times, items=1):
    return Measurement(label, list(times), items=items)


def _results():
    eager = _m("eager", [10.0, 10.0, 10.0, 10.0])
    return {
        ("PyTorch", "eager", 1): eager,
        # 2x faster in every round; 0.5 s paid once (build 0.6 + first call 4.9 - one call 5)
        ("PyTorch", "trace", 1): StaticMeasurement("trace", 0.6, 4.9, _m("t", [5.0] * 4)),
        # faster in two rounds, slower in two: inconclusive, no break-even
        ("PyTorch", "script", 1): StaticMeasurement("s", 0.1, 10.0, _m("s", [8, 9, 11, 12])),
        ("OneFlow", "eager", 1): _m("oe", [4.0, 4.0, 4.0, 4.0]),
        ("OneFlow", "nn.Graph", 1): _m("og", [5.0, 5.0, 5.0, 5.0]),  # slower
    }


def test_ratios_and_rows_read_each_variant_against_its_own_eager():
    ratios = ch03_static.ratios(_results())
    assert set(ratios) == {
        ("PyTorch", "trace", 1),
        ("PyTorch", "script", 1),
        ("OneFlow", "nn.Graph", 1),
    }
    assert ratios["PyTorch", "trace", 1].median == pytest.approx(2.0)
    assert ratios["OneFlow", "nn.Graph", 1].median == pytest.approx(0.8)
    rows = {(r["framework"], r["variant"]): r for r in ch03_static.speedup_rows(_results())}
    assert (
        rows["PyTorch", "eager"]["verdict"] == "baseline"
        and rows["PyTorch", "eager"]["speedup"] is None
    )
    trace = rows["PyTorch", "trace"]
    assert trace["verdict"] == "faster" and trace["compile_s"] == pytest.approx(0.5)
    assert trace["break_even"] == "0"  # 0.5 s / 5 s saved per call
    assert trace["per-round IQR"] == ratios["PyTorch", "trace", 1].interval != "-"
    assert rows["PyTorch", "script"]["verdict"] == "inconclusive"
    assert rows["PyTorch", "script"]["break_even"] == "-"
    assert rows["OneFlow", "nn.Graph"]["verdict"] == "slower"
    assert rows["OneFlow", "nn.Graph"]["compile_s"] is None  # a plain Measurement: no compile cost
    assert ch03_static.best_torch_routes(_results())[1]["variant"] == "trace"
    assert ratios["PyTorch", "script", 1].reading == "inconclusive"
    with pytest.raises(KeyError, match="no eager measurement for OneFlow at batch 16"):
        ch03_static.ratios({("OneFlow", "nn.Graph", 16): _m("g", [1.0])})


def test_plot_shows_spread_and_reported_factor():
    ratios = list(ch03_static.ratios(_results()).values())
    ax = ch03_static.plot_speedups(["a", "b", "c"], ratios, [None, 1.25, None], title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="same length"):
        ch03_static.plot_speedups(["a"], ratios, [None])


def test_deployed_rows_put_both_math_modes_side_by_side():
    strict = ch03_static.ratios(_results())
    ratio = paired_ratio(_m("e", [3.0, 3.0, 3.0]), _m("s", [2.0, 2.0, 2.0]))
    deployed = {
        "math": {"PyTorch": "tf32"},
        "rows": [
            {"framework": "PyTorch", "variant": "trace", "work": "inference (trace)", "batch": 1,
             "ratio": ratio.as_record()},
            {"framework": "PyTorch", "variant": "freeze", "work": "inference (freeze)", "batch": 1,
             "ratio": ratio.as_record()},
        ],
    }  # fmt: skip
    rows = ch03_static.deployed_rows(deployed, strict)
    assert (
        rows[0]["fp32 (above)"] == "2.00x faster"
        and rows[0]["default math"] == "tf32: 1.50x faster"
    )
    assert rows[1]["fp32 (above)"] == "-"  # not timed in this process


@pytest.mark.slow
def test_deployed_timings_runs_both_frameworks_on_a_cpu(torch_mod):
    """The GPU-only cell's function, at tiny sizes on the CPU, OneFlow forced on."""
    out = ch03_static.deployed_timings(
        arch="resnet18",
        image_size=32,
        num_classes=4,
        batches=[1, 2],
        torch_routes={"1": "trace", "2": "freeze"},
        warmup=1,
        repeats=2,
        threads=1,
        oneflow=True,
    )
    assert out["math"] == {"PyTorch": "fp32", "OneFlow": "fp32"}
    got = [(r["framework"], r["variant"], r["batch"]) for r in out["rows"]]
    assert got == [
        ("OneFlow", "task graph", 1),
        ("OneFlow", "nn.Graph", 1),
        ("OneFlow", "nn.Graph", 2),
        ("PyTorch", "trace", 1),
        ("PyTorch", "freeze", 2),
    ]
    for r in out["rows"]:
        assert r["ratio"].keys() == {"value", "unit", "p25", "p75", "rounds"}
        assert r["ratio"]["rounds"] == 2 and r["ratio"]["p25"] <= r["ratio"]["value"]


def test_the_verdict_reads_the_interval_not_the_median():
    """Catches M28 (the verdict from ``|median - 1| < 5%``): a 1.3x median whose per-round
    interval holds 1 is inconclusive; a 1.02x one whose interval lies above 1 is faster."""
    wide = RatioSummary(median=1.3, p25=0.9, p75=1.6, rounds=4, ratios=(0.9, 1.2, 1.4, 1.6))
    tight = RatioSummary(
        median=1.02, p25=1.01, p75=1.03, rounds=4, ratios=(1.01,) * 2 + (1.03,) * 2
    )
    assert wide.reading == "inconclusive" and tight.reading == "faster"


@pytest.mark.parametrize("route", ["trace", "script", "freeze"])
def test_torch_static_routes_match_eager(torch_mod, route):
    m = small("torch").eval()
    x = torch_mod.from_numpy(_x())
    static = ch03_static.torch_static(m, x, route)
    with torch_mod.no_grad():
        assert_outputs_close(static(x), m(x), atol=1e-5, name=route)


def test_torch_static_bad_inputs(torch_mod):
    m = small("torch")
    x = torch_mod.from_numpy(_x())
    with pytest.raises(ValueError, match="unknown route 'onnx'"):
        ch03_static.torch_static(m, x, "onnx")
    with pytest.raises(ValueError, match="eval mode"):
        ch03_static.torch_static(m.train(), x, "freeze")
    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        ch03_static.torch_static(object(), x, "trace")
    compiled = ch03_static.torch_static(m.eval(), x, "compile")  # lazy: compiles at the 1st call
    assert callable(compiled)


def test_trace_reports_its_warnings_on_stdout(capsys):
    import torch

    class Checked(torch.nn.Module):
        def forward(self, x):
            if x.shape[1] != 3:  # read while tracing: trace decides it once and warns
                raise ValueError("need 3 channels")
            return x * 2

    x = torch.ones(2, 3)
    traced = ch03_static.torch_static(Checked(), x, "trace")
    out = capsys.readouterr().out
    assert out.count("trace warned at test_ch03_static.py:") == 1, out
    assert "`if x.shape[1] != 3:" in out and "Python boolean" in out
    torch.testing.assert_close(traced(x), x * 2)
