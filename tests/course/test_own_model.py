"""Your own model through the chapters: each chapter's own-model path on classifiers no chapter uses.

The course's pages run ResNets and a MobileNetV2 embedder. A reader brings another network; these
tests run each chapter's tools on two architectures the course never uses (torchvision's
``mobilenet_v3_small``, whose BatchNorms have momentum 0.01 and eps 1e-3, and ``regnet_y_400mf``,
whose flowvision namesake is a different network), at quick sizes. The capstone's whole ladder on
your model is ``make ladder MODEL=...``: ``COURSE_SLOW_TESTS=1`` runs it here too.

Chapters 1, 2 and 6 (the OneFlow twins) import OneFlow: this file is in the oneflow group.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.core import comparison, precision
from helpers.workload import data, models

ARCHS = ("mobilenet_v3_small", "regnet_y_400mf")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def images():
    torch.set_num_threads(2)
    return torch.from_numpy(data.normalize(data.make_images(16, 64, seed=3)[0]))


def calibrated(arch, images, framework="torch"):
    torch.manual_seed(0)
    net = models.build_classifier(framework, arch, num_classes=8)
    return models.calibrate_batchnorm(net, images).eval()


# ---- the float32 bound and the training check (chapters 2, 6, 10) ----


@pytest.mark.parametrize("arch", ARCHS)
def test_a_network_the_course_has_not_measured_gets_its_own_bound(arch, images):
    net = calibrated(arch, images)
    precision.MEASURED_ACCUMULATION.pop(arch, None)
    found = precision.measure_accumulation(net, images, name=arch)
    assert found.factor >= max(found.units.values())  # never below what was measured
    assert precision.tolerance("fp32", network=arch).accumulation == found.factor
    with torch.no_grad(), precision.strict_fp32():
        ref = net(images)
        cl = net.to(memory_format=torch.channels_last)(
            images.contiguous(memory_format=torch.channels_last)
        )
        comparison.assert_outputs_close(cl, ref, mode="fp32", network=arch)  # a real variant
        first_bn = next(m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d))
        first_bn.eps *= 100  # a planted bug: the same check must fail
        with pytest.raises(AssertionError):
            comparison.assert_outputs_close(net(images), ref, mode="fp32", network=arch)


def test_an_explicit_accumulation_wins_over_the_network_and_unknown_names_do_not_raise(capsys):
    assert precision.tolerance("fp32", network="resnet101", accumulation=8).accumulation == 8
    assert precision.tolerance("fp32", network="resnet101", accumulation="op").accumulation == 8
    loose = precision.tolerance("fp32", network="never_measured_net")
    assert loose.accumulation == precision.ACCUMULATION["network"]
    assert "measure_accumulation" in capsys.readouterr().out  # says how to measure it


def test_the_training_check_says_what_to_change_and_the_recipe_does_it():
    """MobileNetV3's BatchNorm momentum (0.01) leaves its running statistics behind the weights:
    eval mode sits at chance while each batch's own statistics decide; recomputed, it decides."""
    from helpers.workload import training

    torch.manual_seed(0)
    train, val = data.make_splits(1024, 256, 64, num_classes=8)  # quick mode's sizes
    net = models.build_classifier("torch", "mobilenet_v3_small", num_classes=8)
    fit = training.train_classifier(net, train, steps=60, batch_size=32, val=val, progress=False)
    advice = training.chance_advice(net, fit, val, 8)
    assert "BatchNorm running statistics (momentum 0.01)" in advice
    assert "calibrate_batchnorm" in advice
    with pytest.raises(AssertionError, match="chance_advice"):
        training.assert_above_chance(fit.val_accuracy, len(val.y), 8)
    # the recipe for your own model follows the advice (one more step, then the statistics)
    fit = training.train_until_above_chance(
        net, train, val, steps=1, classes=8, batch_size=32, progress=False
    )
    assert fit.val_accuracy > training.above_chance_bar(len(val.y), 8)
    assert any("BatchNorm statistics recomputed" in n for n in fit.notes), fit.notes


def test_the_training_check_asks_for_more_steps_when_nothing_was_learned():
    from helpers.workload import training

    train, val = data.make_splits(64, 64, 32, num_classes=8)
    net = models.build_classifier("torch", "resnet18", num_classes=8)
    fit = training.train_classifier(net, train, steps=1, batch_size=16, val=val, progress=False)
    fit.val_accuracy = 0.125
    assert "train longer (steps=2 or more" in training.chance_advice(net, fit, val, 8)


# ---- chapters 1 and 2: the OneFlow twin, migrated and aligned ----


MODEL_FILE = """
import torch
import torchvision
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torchvision.models.{arch}(num_classes=8)

    def forward(self, images):
        return torch.flatten(self.body(images), 1)
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_chapter_1_migrates_your_model_file_and_the_output_check_judges_the_twin(
    arch, images, tmp_path
):
    from helpers.porting import migration

    path = tmp_path / f"own_{arch}.py"
    path.write_text(MODEL_FILE.format(arch=arch))
    assert migration.missing_apis(path) == []  # every torch/torchvision name exists in OneFlow
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        mine = importlib.import_module(path.stem).Net()
        flow_mod = migration.import_with_mock_torch(path)
    finally:
        sys.path.remove(str(tmp_path))
    models.calibrate_batchnorm(mine, images).eval()
    twin = models.transfer_weights(mine, flow_mod.Net()).eval()  # same keys, same shapes
    import oneflow as flow

    with torch.no_grad(), precision.strict_fp32():
        want = mine(images)
    got = twin(flow.tensor(images.numpy()))
    if arch == "regnet_y_400mf":  # flowvision's stem convolution has no padding
        with pytest.raises(AssertionError):
            comparison.assert_outputs_close(got, want, mode="fp32", network=arch)
        assert models.oneflow_counterpart(arch) is None  # the namesake exists: only outputs tell
    else:
        comparison.assert_outputs_close(got, want, mode="fp32", network=arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_chapter_2_alignment_report_on_your_model(arch, images):
    from helpers.porting import alignment

    net = calibrated(arch, images)
    twin = models.twin(net, "oneflow", models.build_classifier, arch, num_classes=8).eval()
    reference = models.twin(net, "torch", models.build_classifier, arch, num_classes=8)
    report = alignment.alignment_report(
        reference.double().eval(), {"PyTorch": net, "OneFlow": twin}, images.numpy()
    )
    text = str(report)
    assert "PyTorch" in text and "OneFlow" in text
    errors = {row.name: row.comparison.max_abs for row in report.rows}
    if arch == "regnet_y_400mf":  # the report shows the twin is another network
        assert errors["OneFlow"] > 1000 * errors["PyTorch"]
    else:
        assert errors["OneFlow"] < 100 * max(errors["PyTorch"], 1e-9)


# ---- chapter 5: the pipeline runners, any model, any stage, from a script ----


def test_chapter_5_runners_take_your_model_and_a_forward_only_stage(images):
    from helpers.chapters import ch05_pipeline as pl

    net = calibrated("mobilenet_v3_small", images)
    jpegs = data.make_jpeg_dataset(8, 96, seed=2)
    job = pl.Job(jpegs, 4, 48, "cpu", stage=pl.forward)
    serial = pl.run_serial(net, job, threads=1)
    two = pl.run_two_process(net, job, threads_per_worker=1)
    assert serial.logits().shape == (8, 8)
    np.testing.assert_allclose(two.logits(), serial.logits(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="top level of an importable module"):
        pl.Job(jpegs, 4, 48, "cpu", stage=lambda m, x, d: m(x))
    with pytest.raises(ValueError, match="freezes them"):  # the saliency stage: frozen weights
        pl.run_serial(net, pl.Job(jpegs, 4, 48, "cpu"))


SCRIPT = """
import torch
from helpers.chapters import ch05_pipeline as pl
from helpers.workload import data, models

def main():
    net = models.build_classifier("torch", "mobilenet_v3_small", num_classes=8).eval()
    job = pl.Job(data.make_jpeg_dataset(4, 64, seed=1), 2, 32, "cpu", stage=pl.forward)
    print("logits", pl.run_two_process(net, job).logits().shape)

{call}
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_chapter_5_from_a_script_says_why_the_main_guard_is_needed(tmp_path, guarded):
    call = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    path = tmp_path / "service.py"
    path.write_text(SCRIPT.format(call=call))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env
    )
    if guarded:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "logits (4, 8)" in done.stdout
    else:  # refused in the parent, at once, with the fix: no worker ever starts
        assert done.returncode != 0
        assert f"{path}:11" in done.stderr and 'if __name__ == "__main__":' in done.stderr
        assert "died" not in done.stderr


def test_chapter_5_a_failing_stage_reaches_the_parent_with_its_traceback(tmp_path):
    from helpers.chapters import ch05_pipeline as pl

    (tmp_path / "own_stage.py").write_text(
        "def broken(model, x, device):\n    raise KeyError('my stage failed')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import own_stage

        net = models.build_classifier("torch", "mobilenet_v3_small", num_classes=8).eval()
        job = pl.Job(data.make_jpeg_dataset(4, 64, seed=1), 2, 32, "cpu", stage=own_stage.broken)
        with pytest.raises(RuntimeError, match="(?s)Traceback.*own_stage.py.*my stage failed"):
            pl.run_two_process(net, job)
    finally:
        sys.path.remove(str(tmp_path))


# ---- chapter 6: the switches on your model, OneFlow's passes where flowvision has it ----


@pytest.mark.parametrize("arch", ARCHS)
def test_chapter_6_switches_on_your_model(arch, images):
    from torch.fx.experimental.optimization import fuse

    net = calibrated(arch, images)
    with torch.no_grad(), precision.strict_fp32():
        ref = net(images)
        folded = fuse(net)
        n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
        assert n_bn == 0  # every BatchNorm folded into its convolution
        comparison.assert_outputs_close(folded(images), ref, mode="fp32", network=arch)


def test_chapter_6_oneflow_graph_switches_run_on_your_model(images, tmp_path):
    from helpers.chapters import ch06_switches as ch06
    from helpers.core.subprocess_run import run_in_subprocess

    net = calibrated("mobilenet_v3_small", images)
    np.savez(tmp_path / "w.npz", **models.state_dict_numpy(net))
    np.save(tmp_path / "x.npy", images[:4].numpy())
    kwargs = dict(
        arch="mobilenet_v3_small",
        num_classes=8,
        weights_path=str(tmp_path / "w.npz"),
        input_path=str(tmp_path / "x.npy"),
        variants=[{"name": "graph"}, {"name": "add fusion", "add_fusion": True}],
        out_dir=str(tmp_path / "out"),
        warmup=1,
        repeats=2,
    )
    target = f"{ch06.__name__}:oneflow_graph_ablation"
    out = run_in_subprocess(target, kwargs, timeout_s=600)["result"]
    with torch.no_grad():
        want = net(images[:4]).numpy()
    for name in ("graph", "add fusion"):
        got = np.load(out["variants"][name]["output"])
        comparison.assert_outputs_close(got, want, mode="fp32", network="mobilenet_v3_small")
    assert models.oneflow_counterpart("convnext_tiny") == "flowvision 0.2.1 has no convnext_tiny"


# ---- chapters 7-9: your backbone exported, quantized and served ----


def test_chapter_7_embedder_from_your_backbone_through_onnx_runtime(images, tmp_path):
    from helpers.chapters import ch07_runtimes as ch07
    from helpers.deploy import export, runtimes

    emb = models.calibrate_batchnorm(ch07.build_embedder("regnet_y_400mf", 16), images).eval()
    net = ch07.network_of(emb, "regnet_y_400mf", images)
    report = export.export_and_verify(emb, images[:2], tmp_path / "emb.onnx", network=net)
    session = runtimes.create_session(report.path, "cpu", intra_op_threads=1, verbose=False)
    with torch.no_grad(), precision.strict_fp32():
        want = emb(images).numpy()
    comparison.assert_outputs_close(session.run(images.numpy()), want, mode="fp32", network=net)


@pytest.fixture(scope="module")
def own_onnx(tmp_path_factory, images):
    """Your classifier (mobilenet_v3_small), trained a little so that it decides, in ONNX."""
    from helpers.deploy import export
    from helpers.workload import training

    torch.manual_seed(0)
    train, val = data.make_splits(512, 128, 64, num_classes=8)
    net = models.build_classifier("torch", "mobilenet_v3_small", num_classes=8)
    fit = training.train_until_above_chance(
        net, train, val, steps=30, classes=8, batch_size=32, progress=False
    )
    root = tmp_path_factory.mktemp("own")
    path = export.export_and_verify(net.eval(), torch.from_numpy(val.x[:2]), root / "own.onnx")
    return net, val, path.path, fit


def test_chapter_8_int8_on_your_model_is_judged_at_task_level(own_onnx, tmp_path):
    """INT8 of your model, judged by the course's one INT8 rule (chapters 8 and 10, the bench):
    whatever it decides, the reason is the rule's and its control fails."""
    from helpers.deploy import quantization, runtimes

    net, val, path, _ = own_onnx
    q = quantization.quantize_onnx(path, tmp_path / "own.int8.onnx", val.x[:64])
    got = runtimes.create_session(q.path, "cpu", intra_op_threads=1, verbose=False).run(val.x)
    with torch.no_grad():
        want = net(torch.from_numpy(val.x)).numpy()
    try:
        check = comparison.assert_classifier_logits(got, want, val.y, mode="int8")
        assert check.nearest_own == 1.0 and max(check.controls.values()) < 1.0
    except AssertionError as err:  # rejected: the rule says which part failed
        assert "task-level check" in str(err) or "no row is decided" in str(err), err
    with pytest.raises(AssertionError):  # the control: negated logits must fail
        comparison.assert_classifier_logits(-got, want, mode="int8")


def test_chapter_9_serves_your_model(own_onnx, tmp_path):
    from helpers.serving import triton_client, triton_repo, triton_server

    reason = triton_server.unavailable_reason()
    if reason:
        pytest.skip(reason)
    net, val, path, _ = own_onnx
    spec = triton_repo.TensorSpec
    triton_repo.python_runtime_model(
        tmp_path / "repo",
        "own",
        path,
        runtime="onnxruntime",
        inputs=[spec("image", (3, 64, 64))],
        outputs=[spec("logits", (8,))],
        max_batch_size=8,
        threads=1,
    )
    server = triton_server.TritonServer(tmp_path / "repo", models=["own"]).start()
    try:
        got = triton_client.infer("http", server.http_url, "own", {"image": val.x[:8]}, "logits")
    finally:
        server.stop()
    with torch.no_grad():
        want = net(torch.from_numpy(val.x[:8])).numpy()
    comparison.assert_outputs_close(got, want, mode="fp32", network="mobilenet_v3_small")


# ---- chapter 10: the ladder on your model (minutes: only when asked) ----


@pytest.mark.skipif(
    os.environ.get("COURSE_SLOW_TESTS") != "1", reason="minutes: set COURSE_SLOW_TESTS=1"
)
@pytest.mark.parametrize("arch", ARCHS)
def test_chapter_10_ladder_on_your_model(arch, tmp_path):
    env = {**os.environ, "COURSE_MODEL": arch, "COURSE_FEWEST": "1", "COURSE_MODE": "quick"}
    env["COURSE_RESULTS_DIR"] = str(tmp_path / "results")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            str(ROOT / "notebooks" / "10_capstone.ipynb"),
            "--nbval-lax",
            "--nbval-cell-timeout=1800",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, textwrap.shorten(done.stdout[-3000:], 3000)
