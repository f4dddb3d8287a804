"""helpers.chapters.ch08_cpu_target: the CPU deployment target's variants, streams runner and table (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chapters import ch08_cpu_target as cpu_target
from helpers.deploy import export


@pytest.fixture()
def tiny(torch_mod, tmp_path, tiny_classifier):
    model = tiny_classifier(seed=0).eval()
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


def test_one_thread_control_runs_on_one_thread_and_restores_the_count(tiny, torch_mod):
    """The one-thread PyTorch row: one thread inside each call, the process's count after it,
    and the same logits as the baseline."""
    model, _, x, _ = tiny
    saved = torch_mod.get_num_threads()
    try:
        base = cpu_target.torch_variants(model, 2)["PyTorch eager fp32"]
        seen = []
        one = cpu_target.torch_one_thread(model)
        model.register_forward_pre_hook(lambda *_: seen.append(torch_mod.get_num_threads()))
        np.testing.assert_allclose(one.call(x), base.call(x), rtol=1e-5, atol=1e-6)
        assert seen[0] == 1 and torch_mod.get_num_threads() == 2
        assert (one.label, one.threads, one.framework) == (cpu_target.ONE_THREAD, 1, "torch")
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
    assert rows[1]["ratio"].median == rows[1]["vs_eager"] and rows[1]["ratio"].rounds == 3
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


def test_nncf_quantize_inserts_fake_quantize_and_keeps_the_function(tiny, capsys):
    """The page's nncf_quantize (saved here): FakeQuantize nodes, outputs still the model's."""
    from helpers.core.comparison import assert_task_level

    _, path, x, want = tiny
    with cpu_target.quiet_progress():  # and NNCF's bars stay off the output
        q = cpu_target.nncf_quantize(path, x)
    assert any(op.get_type_name() == "FakeQuantize" for op in q.get_ops())
    assert "Statistics collection" not in capsys.readouterr().out
    got = cpu_target.openvino_variant("int8", q, 1).call(x)
    assert got.shape == want.shape
    assert_task_level(got, want, mode="int8", name="tiny int8")
