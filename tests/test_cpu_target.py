"""helpers.chapters.ch08_cpu_target: the CPU deployment target's variants, streams runner and table (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chapters import ch08_cpu_target as cpu_target
from helpers.deploy import export


@pytest.fixture()
def tiny(torch_mod, tmp_path):
    nn = torch_mod.nn
    torch_mod.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).eval()
    x = torch_mod.randn(5, 3, 8, 8)
    path = export.export_onnx(model, x[:2], tmp_path / "tiny.onnx").path
    with torch_mod.no_grad():
        want = model(x).numpy()
    return model, path, x.numpy(), want


def test_streams_runner_keeps_every_image_in_its_place(tiny):
    """Two streams, an odd batch: the split halves come back in the batch's order, not finishing order."""
    _, path, x, want = tiny
    one = cpu_target.openvino_variant("one", path, 2, streams=1)
    two = cpu_target.openvino_variant("two", path, 2, streams=2)
    assert two.settings["hint"] == "THROUGHPUT" and two.settings["streams"] == 2
    assert one.settings["hint"] == "LATENCY" and two.threads == 2 and two.precision == "fp32"
    np.testing.assert_allclose(two.call(x), one.call(x), rtol=0, atol=0)
    np.testing.assert_allclose(two.call(x), want, rtol=1e-4, atol=1e-5)
    assert two.call(x[:1]).shape == (1, 4)  # a batch smaller than the streams


def test_openvino_variant_rejects_bad_settings(tiny):
    _, path, _, _ = tiny
    with pytest.raises(ValueError, match="streams"):
        cpu_target.openvino_variant("x", path, 2, streams=3)
    with pytest.raises(ValueError, match="precision"):
        cpu_target.openvino_variant("x", path, 2, precision="int4")
    with pytest.raises(ValueError, match="threads"):
        cpu_target.openvino_variant("x", path, 0)


def test_build_variants_rejects_unknown_names_and_drops_bf16(tiny, tmp_path):
    model, path, x, _ = tiny
    with pytest.raises(ValueError, match="unknown variant"):
        cpu_target.build_variants(
            model, path, x, threads=1, work_dir=tmp_path, which=["TensorFlow"]
        )
    got = cpu_target.build_variants(
        model,
        path,
        x,
        threads=1,
        work_dir=tmp_path,
        which=["PyTorch eager fp32", "PyTorch bf16 autocast + channels-last", "ORT fp32"],
        bf16=False,
    )
    assert list(got) == ["PyTorch eager fp32", "ORT fp32"]
    assert all(v.threads == 1 and v.device == "cpu" for v in got.values())


def test_measure_variants_rows_name_what_ran_and_use_their_own_ceiling():
    """Each row: runtime, device, precision, threads; % of the ceiling of the row's own precision."""

    def sleeper(s):
        import time

        return lambda x: time.sleep(s) or x

    variants = {
        "PyTorch eager fp32": cpu_target.Variant(
            "PyTorch eager fp32", "eager", "fp32", 2, sleeper(0.004), framework="numpy"
        ),
        "int8": cpu_target.Variant("int8", "rt", "int8", 2, sleeper(0.001), framework="numpy"),
    }
    rows, runs = cpu_target.measure_variants(
        variants,
        np.zeros((4, 1), np.float32),
        warmup=0,
        repeats=3,
        flops=1e6,
        ceilings={"fp32": 1.0, "int8": 4.0},
    )
    assert [r["variant"] for r in rows] == list(variants)
    assert all({"runtime", "device", "precision", "threads"} <= set(r) for r in rows)
    assert rows[0]["vs_eager"] == 1.0 and rows[1]["vs_eager"] > 1.0
    for r, ceiling in zip(rows, (1.0, 4.0)):
        assert r["ceiling_gops"] == ceiling
        assert r["pct_of_ceiling"] == pytest.approx(100 * 1e6 / r["median_s"] / 1e9 / ceiling)
    text = cpu_target.format_rows(rows)
    assert all("threads" in t and "device" in t for t in text)
    with pytest.raises(ValueError, match="baseline"):
        cpu_target.measure_variants({"int8": variants["int8"]}, np.zeros((1, 1)))


def test_best_ceilings_keeps_the_higher_measurement_and_flags_rows_above_it():
    rows = [
        {"precision": "int8", "gops": 300.0, "ceiling_gops": 200.0, "pct_of_ceiling": 150.0},
        {"precision": "fp32", "gops": 90.0, "ceiling_gops": 100.0, "pct_of_ceiling": 90.0},
    ]
    best = cpu_target.best_ceilings(
        rows, {"int8": 200.0, "fp32": 100.0}, {"int8": 400.0, "fp32": 80.0}
    )
    assert best == {"int8": 400.0, "fp32": 100.0}
    assert rows[0]["ceiling_gops"] == 400.0 and rows[0]["pct_of_ceiling"] == pytest.approx(75.0)
    assert not rows[0]["over_ceiling"]
    cpu_target.best_ceilings(rows, {"int8": 250.0, "fp32": 50.0})
    assert rows[0]["over_ceiling"] and rows[1]["over_ceiling"]
