"""How close to the limit: this machine's matmul ceilings and a model's FLOPs (a roofline's axes).

The ceiling depends on the math mode: a float32 model on an Ampere-or-newer GPU runs its
convolutions in TF32 by default, several times above the IEEE float32 peak, so :func:`ceilings`
measures one peak per mode. A CPU with 8-bit dot products (VNNI, AMX) adds an ``int8`` ceiling,
the best of three integer kernels, by which chapter 8 divides every INT8 runtime's rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers.core import hardware, precision
from helpers.core.checks import check_int
from helpers.measure.timer import time_loop

__all__ = [
    "ceilings",
    "count_flops",
]


def _peak(fn: Callable[[], Any], ops: float, repeats: int, sync: Any = None) -> float:
    """Giga-operations per second of the fastest of ``repeats`` calls: the peak, not the typical."""
    return ops / min(time_loop(fn, warmup=1, repeats=repeats, sync=sync)) / 1e9


def _check_sizes(n: int, repeats: int) -> None:
    check_int("n", n, minimum=16)
    check_int("repeats", repeats)


def matmul_peak_gflops(
    dtype: str = "float32",
    n: int = 1024,
    repeats: int = 5,
    device: Any = "cpu",
    *,
    tf32: bool = False,
) -> float:
    """Best observed GFLOP/s of an ``n x n`` PyTorch matmul (the fastest of ``repeats`` calls).

    ``float32`` runs with TF32 off unless ``tf32=True`` (a CUDA GPU only; without TF32 tensor cores
    or with ``NVIDIA_TF32_OVERRIDE=0`` it still runs in float32); the settings are restored.
    """
    import torch

    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    _check_sizes(n, repeats)
    dev = torch.device(device)
    if dev.type == "cpu" and dtype == "float16":
        raise ValueError("float16 matmul is not a meaningful CPU peak; use bfloat16 on CPU")
    if tf32 and (dtype != "float32" or dev.type != "cuda"):
        raise ValueError("tf32=True is for float32 matrices on a CUDA GPU")
    a, b = (torch.randn(n, n, device=dev).to(getattr(torch, dtype)) for _ in range(2))
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    before = precision.set_tf32(tf32)
    try:
        with torch.inference_mode():
            return _peak(lambda: a @ b, 2 * n**3, repeats, sync)
    finally:
        precision.restore_tf32(before)


def conv1x1_peak_gflops(dtype: str = "float32", n: int = 1024, repeats: int = 5) -> float:
    """Best observed GFLOP/s of a CPU 1x1 convolution, ``n`` to ``n`` channels on 64x64 pixels.

    A 4096 x ``n`` x ``n`` GEMM in oneDNN (channels-last), which PyTorch's and OpenVINO's CPU
    convolutions use. On some CPUs (AMD EPYC) PyTorch's float32 matmul goes to a BLAS that skips
    the widest vector units and convolutions beat the "peak" matmul: take the better of the two.
    """
    import torch
    import torch.nn.functional as F

    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    _check_sizes(n, repeats)
    cl = torch.channels_last
    x = torch.randn(1, n, 64, 64).to(getattr(torch, dtype), memory_format=cl)
    w = torch.randn(n, n, 1, 1).to(getattr(torch, dtype), memory_format=cl)
    with torch.inference_mode():
        return _peak(lambda: F.conv2d(x, w), 2 * 4096 * n * n, repeats)


INT8_KERNELS = ("onednn", "ort", "openvino")


def int8_matmul_peak_gops(n: int = 1024, repeats: int = 5, kernel: str = "onednn") -> float:
    """Best observed integer GOP/s (multiply and add counted apart) of an 8-bit GEMM on the CPU.

    ``'onednn'``: ``torch._int_mm`` (s8 x s8 -> s32, oneDNN; ``ONEDNN_VERBOSE=1`` prints the ISA:
    "AVX-512 with Intel DL Boost" is VNNI). ``'ort'``: ONNX Runtime's ``MatMulInteger``, u8
    activations and s8 weights (MLAS's U8S8 GEMM has VNNI kernels; its S8S8 one not on every
    CPU). ``'openvino'``: a Q/DQ 1x1 convolution (4096 x ``n`` x ``n``), checked to run as a
    u8 x i8 oneDNN convolution, the kernel its INT8 models use. Threads: PyTorch's count.
    """
    import torch

    if kernel not in INT8_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(INT8_KERNELS)}, got {kernel!r}")
    _check_sizes(n, repeats)
    if n % 8:
        raise ValueError(f"n must be a multiple of 8, got {n!r}")
    gen = torch.Generator().manual_seed(0)
    if kernel == "onednn":
        a = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=gen)
        b = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=gen)
        with torch.inference_mode():
            return _peak(lambda: torch._int_mm(a, b), 2 * n**3, repeats)
    elif kernel == "openvino":
        return _openvino_int8_conv_gops(n, repeats, torch.get_num_threads())
    else:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        w = torch.randint(-127, 128, (n, n), dtype=torch.int8, generator=gen).numpy()
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])],
            "int8_peak",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [n, n])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [n, n])],
            [helper.make_tensor("B", TensorProto.INT8, [n, n], w.tobytes(), raw=True)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        a = torch.randint(0, 256, (n, n), dtype=torch.uint8, generator=gen).numpy()
        return _peak(lambda: session.run(None, {"A": a}), 2 * n**3, repeats)


def _openvino_int8_conv_gops(n: int, repeats: int, threads: int) -> float:
    import numpy as np
    import openvino as ov
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shape = [1, n, 64, 64]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd"], ["y"]),
    ]
    consts = [
        numpy_helper.from_array(np.float32(0.02), "xs"),
        numpy_helper.from_array(np.uint8(128), "xz"),
        numpy_helper.from_array(rng.integers(-127, 128, (n, n, 1, 1), dtype=np.int8), "w"),
        numpy_helper.from_array(np.float32(0.01), "ws"),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_conv_peak",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        consts,
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(onnx_model.SerializeToString(), b""),
        "CPU",
        {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"},
    )
    conv_precisions = {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Convolution"
    }
    if not conv_precisions <= {"u8", "i8"}:
        raise RuntimeError(f"OpenVINO ran the int8 peak convolution in {conv_precisions}, not int8")
    request = compiled.create_infer_request()
    x = rng.standard_normal(shape, dtype=np.float32)
    return _peak(lambda: request.infer({0: x}), 2 * 4096 * n * n, repeats)


def ceilings(device: Any, n: int = 1024, repeats: int = 5) -> dict[str, float]:
    """The peak GFLOP/s of each math mode ``device`` offers, keyed by mode; a model's ceiling is
    ``ceilings(...)[precision.torch_math_mode(device)]``.

    CPU: 'fp32' and 'bf16', each the better of a matmul and a 1x1 convolution, and 'int8' (GOP/s)
    with 8-bit dot products. CUDA: 'fp32' (TF32 off), 'tf32' where in effect, 'bf16' where native,
    'fp16'.
    """
    import torch

    dev = torch.device(device)  # "cpu", "cuda" or a torch.device
    peaks = {"fp32": matmul_peak_gflops("float32", n, repeats, dev)}
    if dev.type == "cuda":
        before = precision.set_tf32(True)
        try:
            tf32_in_effect = precision.torch_math_mode(dev, op="matmul") == "tf32"
        finally:
            precision.restore_tf32(before)
        if tf32_in_effect:
            peaks["tf32"] = matmul_peak_gflops("float32", n, repeats, dev, tf32=True)
        if torch.cuda.is_bf16_supported(including_emulation=False):  # Ampere+, not emulated
            peaks["bf16"] = matmul_peak_gflops("bfloat16", n, repeats, dev)
        peaks["fp16"] = matmul_peak_gflops("float16", n, repeats, dev)
    else:
        peaks["fp32"] = max(peaks["fp32"], conv1x1_peak_gflops("float32", n, repeats))
        # Without bf16 instructions PyTorch's emulated bf16 matmul slows down as it grows
        # (minutes a call at n=2048 on an AVX2-only CPU): measure it where it is fastest.
        bf16_n = n if hardware.has_bf16_instructions() else min(n, 512)
        peaks["bf16"] = max(
            matmul_peak_gflops("bfloat16", bf16_n, repeats, dev),
            conv1x1_peak_gflops("bfloat16", n, repeats),
        )
        if hardware.has_int8_dot_product():
            peaks["int8"] = max(int8_matmul_peak_gops(n, repeats, k) for k in INT8_KERNELS)
    return peaks


def count_flops(model: Any, example_input: Any) -> int:
    """Floating-point operations of one forward pass of a PyTorch model (``torch.utils.flop_counter``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            "count_flops needs a torch.nn.Module (count OneFlow models through their PyTorch twin)"
        )
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        model(example_input)
    return int(counter.get_total_flops())
