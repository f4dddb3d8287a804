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


def test_each_variant_states_the_threads_its_runtime_has(tiny, torch_mod):
    """Chapter 8's thread-matched comparison: the threads each variant states are read back from
    what runs it (the ONNX Runtime session's options, PyTorch's getter, the compiled model)."""
    model, path, _, _ = tiny
    saved = torch_mod.get_num_threads()
    try:
        for n in (1, 2):
            ort = cpu_target.ort_variant("ort", path, n)
            options = ort.call.__self__.handle.get_session_options()  # the runner's session
            assert (options.intra_op_num_threads, options.inter_op_num_threads) == (n, 1)
            assert ort.threads == n and ort.settings["inter_op_threads"] == 1
            torch_n = cpu_target.torch_variants(model, n)
            assert torch_mod.get_num_threads() == n
            assert {v.threads for v in torch_n.values()} == {n}
            ov = cpu_target.openvino_variant("ov", path, n)
            assert ov.threads == ov.settings["threads"] == n
    finally:
        torch_mod.set_num_threads(saved)


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
    assert all("threads" in t and "precision" in t for t in text)
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


# ---- chapter 8's bookkeeping: tables, generated sentences, ledger records ----


def _m(label, times, items=1):
    from helpers.measure.measurement import Measurement

    return Measurement(label=label, times_s=list(times), items=items, threads=2)


def _timed(per_call):
    """{batch: (rows, runs)} as measure_variants returns them, from per-call seconds per variant."""
    out = {}
    for b, calls in per_call.items():
        runs = {k: _m(k, t, items=b) for k, t in calls.items()}
        rows = [
            {
                "variant": k,
                "precision": "int8" if "int8" in k else "fp32",
                "threads": 2,
                "device": "cpu",
                "batch": b,
                "median_s": runs[k].median,
            }
            for k in calls
        ]
        out[b] = (rows, runs)
    return out


def test_format_rows_names_the_model_its_accuracy_comes_from():
    row = {
        "variant": "v",
        "precision": "int8",
        "threads": 2,
        "median_s": 0.5,
        "p25_s": 0.4,
        "p75_s": 0.6,
        "vs_eager": 2.0,
        "accuracy": 0.75,
        "drop_points": 0.39,
    }
    text = cpu_target.format_rows([row], "accuracy (ResNet-18 trained, 32 px)")[0]
    assert text["accuracy (ResNet-18 trained, 32 px)"] == "75.00%" and "accuracy" not in text
    assert text["drop (points)"] == "+0.39"


def test_task_row_shows_what_was_required_and_the_controls():
    from helpers.core.comparison import assert_task_level

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(32, 8)) * 4
    check = assert_task_level(
        ref + rng.normal(0, 0.01, ref.shape),
        ref,
        mode="int8",
        logits=True,
        network="resnet18",
        name="int8",
    )
    row = cpu_target.task_row(check, accuracy=0.70, reference=0.72)
    assert row["nearest own"] == "100%" and row["drop (points)"] == "+2.00"
    assert row["controls (negated / shifted)"].endswith("%") and "decided rows kept" in row


def test_small_model_sentences_say_inconclusive_when_the_interval_holds_one():
    u8, s8 = "ORT int8 (QDQ, U8S8)", "ORT int8 (QDQ, S8S8)"
    calls = {
        1: {
            "PyTorch eager fp32": [4e-3] * 5,
            "ORT fp32": [1e-3] * 5,
            u8: [1e-3, 0.9e-3, 1.1e-3, 1e-3, 1e-3],
            s8: [3e-3] * 5,
        },
        8: {
            "PyTorch eager fp32": [20e-3] * 5,
            "ORT fp32": [8e-3] * 5,
            u8: [2e-3] * 5,
            s8: [6e-3] * 5,
        },
    }
    executed = {f: {"integer convs (QLinearConv)": 20} for f in ("U8S8", "S8S8")}
    text = " ".join(cpu_target.small_model_sentences(_timed(calls), executed, 32))
    assert "U8S8 against S8S8: **3.00x faster**" in text
    assert "inconclusive" in text and "4.00x faster at batch 8" in text  # batch 1 holds 1


def test_best_path_takes_the_fastest_within_the_accuracy_bound():
    rows = [
        {"variant": "eager", "vs_eager": 1.0, "drop_points": 0.0},
        {"variant": "fast but wrong", "vs_eager": 9.0, "drop_points": 3.0},
        {"variant": "fast", "vs_eager": 5.0, "drop_points": 0.4},
        {"variant": "slow", "vs_eager": 2.0, "drop_points": -0.4},
    ]
    assert cpu_target.best_path(rows, 1.0)["variant"] == "fast"
    rows[2]["passed"] = False  # its recipe failed the task-level check
    assert cpu_target.best_path(rows, 1.0)["variant"] == "fast"
    assert cpu_target.best_path(rows, 1.0, passed_only=True)["variant"] == "slow"
    with pytest.raises(ValueError, match="within"):
        cpu_target.best_path(rows[:2], 1.0)


def test_target_sentences_derive_the_bound_from_the_measured_ceiling():
    base, best = "PyTorch eager fp32", "OpenVINO int8 (NNCF)"
    runs = {base: _m(base, [1.0, 1.1, 0.9]), best: _m(best, [0.2, 0.21, 0.19])}
    rows = [
        {
            "variant": base,
            "median_s": 1.0,
            "batch": 16,
            "precision": "fp32",
            "gops": 100.0,
            "pct_of_ceiling": 50.0,
            "vs_eager": 1.0,
        },
        {
            "variant": best,
            "median_s": 0.2,
            "batch": 16,
            "precision": "int8",
            "gops": 500.0,
            "pct_of_ceiling": 62.5,
            "vs_eager": 5.0,
            "drop_points": 0.0,
        },
    ]
    text = " ".join(cpu_target.target_sentences(rows, runs, {"int8": 800.0}, rows[1]))
    assert "8.0x eager" in text and "62% of that bound" in text and "goal" not in text.lower()
    assert "failed the task-level check" not in text
    text = " ".join(cpu_target.target_sentences(rows, runs, {"int8": 800.0}, rows[1], rows[0]))
    assert "failed the task-level check" in text and f"**{base}**" in text
    assert "62% of this CPU's int8 ceiling" in text and "nan" not in text
    no_vnni = [rows[0], {**rows[1], "pct_of_ceiling": float("nan")}]  # no int8 ceiling
    text = " ".join(cpu_target.target_sentences(no_vnni, runs, {"fp32": 200.0}, no_vnni[1]))
    assert "no int8 ceiling measured on this CPU" in text and "nan" not in text
    assert "fp32 eager runs at 50% of this CPU's fp32 ceiling" in text


def test_preprocess_and_ablation_sentences_follow_the_numbers():
    folded = cpu_target.preprocess_sentence(
        {"exported": {"Conv": 20}, "pre-processed": {"Conv": 20}}
    )
    assert "had already folded" in folded
    fold = cpu_target.preprocess_sentence(
        {"exported": {"Conv": 20, "BatchNormalization": 20}, "pre-processed": {"Conv": 20}}
    )
    assert "folded 20 of them" in fold
    rows = [
        {"calibration images": n, "weights": w, "mean cosine": c, "nearest own": 1.0}
        for n, w, c in ((1, "per-channel", 0.7), (32, "per-channel", 0.9), (32, "per-tensor", 0.8))
    ]
    assert "closer to fp32 than per-tensor" in cpu_target.ablation_sentence(rows)
    rows[2]["mean cosine"] = 0.95
    assert "further from fp32" in cpu_target.ablation_sentence(rows)


def test_quiet_progress_swallows_rich_output_and_restores_the_console(capsys):
    import rich
    from rich.progress import track

    console = rich.get_console()
    before = console.file
    with cpu_target.quiet_progress():
        for _ in track(range(3), description="hidden"):
            pass
        rich.print("hidden too")
    assert "hidden" not in capsys.readouterr().out
    assert rich.get_console() is console and console.file is before


def test_wait_policy_names_every_framework(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    line = cpu_target.wait_policy()
    assert "PASSIVE" in line and "ONNX Runtime sleep" in line and "OpenVINO" in line
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert "ONNX Runtime spin" in cpu_target.wait_policy()


@pytest.mark.parametrize("mixed", [False, True])
def test_nncf_quantize_inserts_fake_quantize_and_keeps_the_function(tiny, mixed, capsys):
    """The page's nncf_quantize (saved here): FakeQuantize nodes, outputs still the model's."""
    from helpers.core.comparison import assert_task_level

    _, path, x, want = tiny
    with cpu_target.quiet_progress():  # and NNCF's bars stay off the output
        q = cpu_target.nncf_quantize(path, x, mixed=mixed)
    assert any(op.get_type_name() == "FakeQuantize" for op in q.get_ops())
    assert "Statistics collection" not in capsys.readouterr().out
    got = cpu_target.openvino_variant("int8", q, 1).call(x)
    assert got.shape == want.shape
    assert_task_level(got, want, mode="int8", name="tiny int8")


def test_a_missing_ceiling_is_said_not_printed_as_nan():
    """A CPU without 8-bit dot products has no int8 ceiling: the sentence says so."""
    assert cpu_target.ceiling_share({"precision": "int8", "pct_of_ceiling": 45.2}) == (
        "45% of this CPU's int8 ceiling"
    )
    for row in ({"precision": "int8", "pct_of_ceiling": float("nan")}, {"precision": "int8"}):
        assert cpu_target.ceiling_share(row) == "no int8 ceiling measured on this CPU"
