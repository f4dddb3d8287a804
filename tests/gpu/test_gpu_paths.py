"""The course's GPU branches that do not need OneFlow, exercised on a real CUDA GPU.

Run by ``tools/gpu_check.sh`` with a bare ``python3`` (torch, numpy, pytest; torchvision and
onnxruntime when present). On a machine without a CUDA GPU every test skips with one line saying
why. What is checked:

- timing: ``timer.benchmark`` synchronises (its median agrees with CUDA events; without
  synchronisation it measures only the launch);
- matmul ceilings per math mode (fp32, TF32, bf16, fp16), which "% of peak" must divide by;
- the precision policy under real TF32 vs strict float32 on ResNets (torchvision), and on which
  side of the CPU emulation (round-to-nearest or truncation) real TF32 falls;
- chapter 4's exactness proof: input gradients bit-exact under deterministic algorithms;
- a batch sweep; profiling by device time (not by CPU time); ONNX Runtime CUDA with I/O binding.
- full mode's training recipes (chapters 2 and 8: ResNet-101, 224 px, full steps) learn, which
  ``make fullcpu`` cannot run (``tools/training_proxy.py``).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="no PyTorch: the GPU checks need torch")

from helpers.core import comparison, precision  # noqa: E402 - after the torch check
from helpers.measure import timer  # noqa: E402

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(
    not CUDA,
    reason=f"no CUDA GPU: torch {torch.__version__} reports torch.cuda.is_available() False",
)


def event_seconds(fn: Callable[[], Any], repeats: int = 10, warmup: int = 3) -> float:
    """Median seconds of ``fn`` on the GPU, timed with CUDA events (device time, no host clock)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def torchvision_resnet(arch: str, batch: int, size: int, seed: int = 0) -> tuple[Any, Any]:
    """A torchvision ResNet on the GPU with BatchNorm calibrated on a batch (chapter 6's setting)."""
    tv = pytest.importorskip("torchvision", reason="no torchvision: the ResNet checks need it")
    torch.manual_seed(seed)
    model = getattr(tv.models, arch)(weights=None, num_classes=8).cuda()
    gen = torch.Generator().manual_seed(seed)
    data = torch.randn(2 * batch, 3, size, size, generator=gen).cuda()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = 1.0
    with precision.strict_fp32(), torch.no_grad():
        model.train()(data[batch:])
    return model.eval(), data[:batch]


# ------------------------------------------------------------------------------------- timing
def test_timing_synchronises_and_agrees_with_cuda_events(record):
    with precision.strict_fp32():
        a = torch.randn(4096, 4096, device="cuda")
        step = lambda: a @ a  # noqa: E731
        synced = timer.benchmark(step, framework="torch", warmup=3, repeats=10)
        events = event_seconds(step)
        unsynced = timer.benchmark(step, framework="torch", warmup=3, repeats=10, sync=False)
    torch.cuda.synchronize()
    record(synced_ms=synced.median * 1e3, events_ms=events * 1e3, unsynced_ms=unsynced.median * 1e3)
    assert 0.5 * events <= synced.median <= 2 * events + 1e-3
    assert unsynced.median < 0.5 * synced.median  # only the launch: why every timing synchronises


def test_matmul_ceilings_per_math_mode(record):
    n = 8192
    flop = 2 * n**3
    a32 = torch.randn(n, n, device="cuda")
    peaks = {}
    with precision.strict_fp32():
        assert precision.torch_math_mode("cuda", op="matmul") == "fp32"
        peaks["fp32"] = flop / event_seconds(lambda: a32 @ a32, repeats=5) / 1e12
    before = precision.set_tf32(True)
    try:
        tf32_mode = precision.torch_math_mode("cuda", op="matmul")
        peaks["tf32"] = flop / event_seconds(lambda: a32 @ a32, repeats=5) / 1e12
    finally:
        precision.restore_tf32(before)
    for mode, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = a32.to(dtype)
        peaks[mode] = flop / event_seconds(lambda: a @ a, repeats=5) / 1e12  # noqa: B023
    capability = torch.cuda.get_device_capability()
    record(device=torch.cuda.get_device_name(), capability=capability, tflops=peaks)
    if capability >= (8, 0):
        assert tf32_mode == "tf32"
        assert peaks["tf32"] > 2 * peaks["fp32"]  # tensor cores: the fp32 ceiling is the wrong one
        assert peaks["bf16"] > peaks["tf32"]
    else:
        assert tf32_mode == "fp32"


# ---------------------------------------------------------------- precision policy, real TF32
@pytest.mark.parametrize("arch", ["resnet18", "resnet50", "resnet101"])
def test_precision_policy_under_real_tf32(arch, record):
    """Case study 1's full-mode setting (224 px, batch 16): strict float32 vs real TF32 on the GPU."""
    model, x = torchvision_resnet(arch, batch=16, size=224)
    with torch.inference_mode():
        with precision.strict_fp32():
            assert precision.torch_math_mode("cuda") == "fp32"
            ref = model(x)
            emulated = {}
            for rounding in ("nearest", "truncate"):
                with precision.emulate_tf32(model, rounding=rounding):
                    emulated[rounding] = model(x)
        before = precision.set_tf32(True)
        try:
            mode = precision.torch_math_mode("cuda")
            real = model(x)
        finally:
            precision.restore_tf32(before)
        cpu_ref = model.cpu()(x.cpu())  # float32 on the CPU: another device, same precision
        model.cuda()
    scale = precision.output_scale(ref)
    tol = precision.tolerance(mode, scale=scale)
    fp32 = precision.tolerance("fp32", scale=scale)

    def rel(a: Any, b: Any) -> float:
        return comparison.compare(a, b).max_abs / scale

    record(
        mode=mode,
        scale=scale,
        tf32_vs_fp32=rel(real, ref),
        tolerance_tf32_atol=tol.atol / scale,
        tolerance_fp32_atol=fp32.atol / scale,
        emulated_nearest_vs_fp32=rel(emulated["nearest"], ref),
        emulated_truncate_vs_fp32=rel(emulated["truncate"], ref),
        real_vs_emulated_nearest=rel(real, emulated["nearest"]),
        real_vs_emulated_truncate=rel(real, emulated["truncate"]),
        gpu_fp32_vs_cpu_fp32=rel(ref, cpu_ref),
    )
    if torch.cuda.get_device_capability() >= (8, 0):
        assert mode == "tf32"
        assert not torch.equal(real, ref)  # TF32 really was in effect
    comparison.assert_outputs_close(real, ref, **tol.as_kwargs(), name=f"{arch} {mode} vs fp32")
    comparison.assert_outputs_close(ref.cpu(), cpu_ref, **fp32.as_kwargs(), name="GPU vs CPU fp32")


# ------------------------------------------------------------------ chapter 4's exactness proof
def test_input_gradients_are_bit_exact_with_deterministic_algorithms(record):
    model, x = torchvision_resnet("resnet18", batch=8, size=112)

    def saliency(train_params: bool) -> tuple[Any, Any]:
        for p in model.parameters():
            p.requires_grad_(train_params)
            p.grad = None
        xg = x.clone().requires_grad_(True)
        logits = model(xg)
        logits[:, 0].sum().backward()
        return logits.detach(), xg.grad

    with precision.strict_fp32():
        try:  # PyTorch flags AdaptiveAvgPool2d's CUDA backward as nondeterministic: it raises
            with precision.deterministic():
                saliency(False)
            strict_error = None
        except RuntimeError as err:
            strict_error = str(err).split(".")[0]
        with (
            warnings.catch_warnings(record=True) as caught,
            precision.deterministic(warn_only=True),
        ):
            warnings.simplefilter("always")
            runs = [saliency(True), saliency(True), saliency(False), saliency(False)]
    record(
        warn_only_false_raises=strict_error,
        warn_only_true_warnings=sorted({str(w.message).split(".")[0] for w in caught}),
    )
    for logits, grad in runs[1:]:
        assert torch.equal(logits, runs[0][0])
        assert torch.equal(grad, runs[0][1])  # bit for bit, with and without parameter gradients


# ---------------------------------------------------------------------------------- batch sweep
def test_batch_sweep_gains_throughput(record):
    model, x = torchvision_resnet("resnet18", batch=64, size=112)
    rates = {}
    with torch.inference_mode():
        for batch in (1, 4, 16, 64):
            xb = x[:batch].contiguous()
            step = lambda xb=xb: model(xb)  # noqa: E731
            m = timer.benchmark(step, framework="torch", warmup=3, repeats=10, items=batch)
            rates[batch] = m.throughput
    record(images_per_s=rates)
    assert rates[64] > 4 * rates[1]  # a GPU needs a batch to fill it


# --------------------------------------------------------------------------- profiling on a GPU
def test_profile_by_device_time(record):
    from torch.profiler import ProfilerActivity, profile

    model, x = torchvision_resnet("resnet18", batch=16, size=224)
    with torch.inference_mode():
        model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
    events = prof.key_averages()
    device_attr = (
        "self_device_time_total"
        if hasattr(events[0], "self_device_time_total")
        else "self_cuda_time_total"
    )
    ops = [e for e in events if e.key.startswith("aten::")]
    by_device = max(ops, key=lambda e: getattr(e, device_attr))
    by_cpu = max(events, key=lambda e: e.self_cpu_time_total)
    record(top_by_device_time=by_device.key, top_by_self_cpu_time=by_cpu.key, sort_key=device_attr)
    assert "conv" in by_device.key  # on the device, the convolutions are the work


# ---------------------------------------------------------------- ONNX Runtime CUDA, I/O binding
def test_onnxruntime_cuda_with_io_binding(tmp_path, record):
    ort = pytest.importorskip("onnxruntime", reason="no onnxruntime installed")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (a CPU build)")
    model, x = torchvision_resnet("resnet18", batch=16, size=224)
    path = tmp_path / "resnet18.onnx"
    try:
        torch.onnx.export(
            model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False
        )
    except Exception as err:  # no exporter dependencies on this machine
        pytest.skip(f"torch.onnx.export failed here: {type(err).__name__}: {str(err)[:120]}")
    session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
    if "CUDAExecutionProvider" not in session.get_providers():
        pytest.skip("onnxruntime could not start its CUDA provider (CUDA/cuDNN libraries missing)")
    with torch.inference_mode(), precision.strict_fp32():
        ref = model(x)
    y = torch.empty_like(ref)
    binding = session.io_binding()
    x = x.contiguous()
    binding.bind_input("x", "cuda", 0, np.float32, tuple(x.shape), x.data_ptr())
    binding.bind_output("y", "cuda", 0, np.float32, tuple(y.shape), y.data_ptr())

    def bound() -> None:
        session.run_with_iobinding(binding)

    feed = {"x": x.cpu().numpy()}
    torch.cuda.synchronize()  # PyTorch's writes are done before ONNX Runtime's stream reads them
    bound()
    # ONNX Runtime's CUDA provider runs convolutions in TF32 on Ampere+ unless told otherwise
    mode = "tf32" if torch.cuda.get_device_capability() >= (8, 0) else "fp32"
    tol = precision.tolerance(mode, scale=precision.output_scale(ref))
    comparison.assert_outputs_close(
        y, ref, **tol.as_kwargs(), name="ORT CUDA (I/O binding) vs PyTorch"
    )
    with_copies = timer.benchmark(
        lambda: session.run(None, feed), framework="onnxruntime", repeats=10
    )
    on_device = timer.benchmark(bound, framework="onnxruntime", repeats=10)
    record(numpy_feed_ms=with_copies.median * 1e3, io_binding_ms=on_device.median * 1e3)
    assert on_device.median <= with_copies.median * 1.1  # no host<->device copies per call


# ----------------------------------------------------------- full mode's training, at 224 px
def _training_proxy() -> Any:
    """``tools/training_proxy.py``: the pages' full-mode training recipes, one source."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "training_proxy.py"
    spec = importlib.util.spec_from_file_location("training_proxy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def full_splits() -> tuple[Any, Any]:
    """Full mode's generated training and held-out images at 224 px, made once."""
    from helpers.core.environment import SIZES
    from helpers.workload import data

    full = SIZES["full"]
    return data.make_splits(
        full.train_images, full.val_images, full.image_size, num_classes=full.num_classes
    )


@pytest.mark.parametrize("name", ["ch2", "ch8"])
def test_full_mode_training_recipe_learns(name, full_splits, record):
    """What ``make fullcpu`` cannot run: chapters 2 and 8 train ResNet-101 at 224 px for full
    mode's steps on a GPU (300 of 32 images, 1,200 of 64), and assert it learned."""
    proxy = _training_proxy()
    r = proxy.run(name, 224, device="cuda", splits=full_splits)
    record(**{k: r[k] for k in ("val_accuracy", "needed", "untrained", "train_s", "math_mode")})
    assert r["learned"], (
        f"{name}: {r['val_accuracy']:.1%} held out, the page needs {r['needed']:.1%}"
    )
