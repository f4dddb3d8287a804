"""What a chapter's kernel computes, per cell: the probe of ``make fullcpu``.

``tools/full_cpu_run.py`` writes an IPython startup file into a private ``IPYTHONDIR`` that loads
this module and calls :func:`install`, so that only the kernels nbval starts for the full-size
CPU run load it (nothing lands in the chapter's namespace), and sets ``COURSE_PROBE_FILE`` to the
JSON file it writes (after every cell, so a kernel that dies leaves what it saw). It records, per
executed cell:

- ``wall``: the cell's wall time in the kernel;
- ``torch``: each top-level call of a PyTorch module (a module called from no other module), by
  signature (class, parameters, input shape and dtype, grad mode, math mode): count and wall
  seconds. The first time a signature is seen, after the cell, its floating-point operations
  (``torch.utils.flop_counter.FlopCounterMode``), the bytes its operators read and write (inputs
  plus outputs of every ATen operator, unfused) and its operator count are measured on the
  ``meta`` device (no data, no compute, the module's own hooks held off);
- ``backward``: calls of ``torch.autograd.backward`` / ``torch.autograd.grad`` and their seconds;
- ``other``: calls of ONNX Runtime's ``InferenceSession.run``, OpenVINO's compiled model and
  infer request, and Triton clients' ``infer``, with seconds and the input's spatial size.

What it cannot see: work in other processes (DataLoader workers, Triton's model, OneFlow
subprocesses), and OneFlow's own calls (they return before their work is done; it is counted
where the chapter waits for it). ``tools/gpu_estimate.py`` turns the file into a GPU estimate.

Hooks cost a few microseconds per module call; the probe is for the ``make fullcpu`` run
only, whose timings are not reference figures.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import weakref
from typing import Any

_OUT = os.environ.get("COURSE_PROBE_FILE")
_tl = threading.local()
_cells: list[dict[str, Any]] = []
_sigs: dict[str, dict[str, Any]] = {}  # signature -> flops, bytes, ops (None until measured)
_pending: dict[str, tuple[Any, Any, Any]] = {}  # signature -> (weakref to module, args, kwargs)
_installed: set[str] = set()
_lock = threading.Lock()


def _cell() -> dict[str, Any]:
    if not _cells:
        _cells.append(_new_cell("", 0))
    return _cells[-1]


def _new_cell(source: str, count: int) -> dict[str, Any]:
    return {
        "index": count,
        "head": source.strip().splitlines()[0][:100] if source.strip() else "",
        "chars": len(source),
        "wall": 0.0,
        "torch": {},
        "backward": [0, 0.0],
        "other": {},
        "_start": time.perf_counter(),
    }


def _add(bucket: dict[str, list], key: str, seconds: float, extra: Any = None) -> None:
    with _lock:
        entry = bucket.setdefault(key, [0, 0.0, extra])
        entry[0] += 1
        entry[1] += seconds


# ------------------------------------------------------------------------------------ PyTorch
def _spec(x: Any) -> Any:
    """A picklable description of a call argument: tensors become ('T', shape, dtype)."""
    import torch

    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), str(x.dtype).removeprefix("torch."))
    if isinstance(x, (list, tuple)):
        return type(x)(_spec(v) for v in x)
    if isinstance(x, dict):
        return {k: _spec(v) for k, v in x.items()}
    if isinstance(x, (int, float, bool, str, type(None))):
        return x
    raise TypeError("unsupported argument")  # the call is timed, its work not measured


def _first_tensor(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(x, dict):
        return _first_tensor(list(x.values()))
    return None


def _math(dtype: str) -> str:
    import torch

    if dtype in ("float16", "bfloat16"):
        return dtype
    if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
        return "autocast"
    return "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"


def _install_torch() -> None:
    import torch
    from torch.nn.modules import module as nn_module

    params = weakref.WeakKeyDictionary()

    def n_params(mod: Any) -> int:
        try:
            return params[mod]
        except (KeyError, TypeError):
            n = sum(p.numel() for p in mod.parameters())
            try:
                params[mod] = n
            except TypeError:
                pass
            return n

    def pre(mod: Any, args: Any) -> None:
        if torch.compiler.is_compiling() or getattr(_tl, "probing", False):
            return
        depth = getattr(_tl, "depth", 0)
        _tl.depth = depth + 1
        if depth == 0:
            _tl.start, _tl.call = time.perf_counter(), (mod, args)

    def post(mod: Any, args: Any, out: Any) -> None:
        if torch.compiler.is_compiling() or getattr(_tl, "probing", False):
            return
        _tl.depth = max(0, getattr(_tl, "depth", 1) - 1)
        if _tl.depth or getattr(_tl, "call", (None,))[0] is not mod:
            return
        seconds = time.perf_counter() - _tl.start
        _tl.call = (None, None)
        x = _first_tensor(args)
        if x is None or type(x).__name__ in ("Proxy", "FunctionalTensor"):
            return
        try:
            dtype = str(x.dtype).removeprefix("torch.")
            grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            sig = (
                f"{type(mod).__name__}|{n_params(mod)}|{tuple(x.shape)}|{dtype}|"
                f"{'grad' if grad else 'nograd'}|{'train' if mod.training else 'eval'}|"
                f"{x.device.type}|{_math(dtype)}"
            )
        except Exception:  # noqa: BLE001 - a call the probe cannot describe is not counted
            return
        _add(_cell()["torch"], sig, seconds)
        if sig not in _sigs and sig not in _pending:
            try:
                _pending[sig] = (weakref.ref(mod), _spec(args), None)
            except TypeError:
                _sigs[sig] = {"flops": None, "bytes": None, "ops": None, "why": "arguments"}

    nn_module.register_module_forward_pre_hook(pre)
    nn_module.register_module_forward_hook(post, always_call=True)

    def timed(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with _lock:
                    b = _cell()["backward"]
                    b[0] += 1
                    b[1] += time.perf_counter() - start

        wrapper.__wrapped__ = fn
        return wrapper

    torch.autograd.backward = timed(torch.autograd.backward)
    torch.autograd.grad = timed(torch.autograd.grad)


def _measure_pending() -> None:
    """FLOPs, bytes and operators of each new signature, on the meta device (after the cell)."""
    if not _pending:
        return
    import torch
    from torch.nn.utils import prune
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import FlopCounterMode

    class Traffic(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes, self.ops = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            for t in (args, kwargs or {}, out):
                tree_map(self._count, t)
            return out

        def _count(self, t: Any) -> Any:
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
            return t

    def meta(spec: Any) -> Any:
        if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "T":
            return torch.empty(spec[1], dtype=getattr(torch, spec[2]), device="meta")
        if isinstance(spec, (list, tuple)):
            return type(spec)(meta(v) for v in spec)
        if isinstance(spec, dict):
            return {k: meta(v) for k, v in spec.items()}
        return spec

    for sig, (ref, args, _) in list(_pending.items()):
        del _pending[sig]
        mod = ref()
        mod = getattr(mod, "_orig_mod", mod)  # torch.compile's wrapper: never compile again here
        if mod is None or isinstance(mod, torch.jit.ScriptModule):
            _sigs[sig] = {"flops": None, "bytes": None, "ops": None, "why": "gone"}
            continue
        held = []
        _tl.probing = True
        try:
            for m in mod.modules():  # hold off the chapter's hooks (pruning's masks stay)
                for name in ("_forward_hooks", "_forward_pre_hooks"):
                    hooks = getattr(m, name)
                    off = {
                        k: h for k, h in hooks.items() if not isinstance(h, prune.BasePruningMethod)
                    }
                    for k in off:
                        del hooks[k]
                    held.append((hooks, off))
            state = {
                k: torch.empty_like(v, device="meta")
                for k, v in {**dict(mod.named_parameters()), **dict(mod.named_buffers())}.items()
            }
            counter, traffic = FlopCounterMode(display=False), Traffic()
            grad = "|grad|" in sig
            with torch.set_grad_enabled(grad), counter, traffic:
                torch.func.functional_call(mod, state, meta(args))
            _sigs[sig] = {
                "flops": int(counter.get_total_flops()),
                "bytes": int(traffic.bytes),
                "ops": traffic.ops,
                "weights_bytes": int(sum(v.numel() * v.element_size() for v in state.values())),
            }
        except Exception as err:  # noqa: BLE001 - the call stays counted, its work unknown
            _sigs[sig] = {"flops": None, "bytes": None, "ops": None, "why": repr(err)[:160]}
        finally:
            _tl.probing = False
            for hooks, off in held:
                hooks.update(off)


# ------------------------------------------------------------------------ other runtimes
def _spatial(x: Any) -> int | None:
    """The last dimension of the first array-like input (the image size), if any."""
    if isinstance(x, dict):
        x = next(iter(x.values()), None)
    elif isinstance(x, (list, tuple)):
        x = x[0] if x else None
    shape = getattr(x, "shape", None)
    try:
        return int(shape[-1]) if shape is not None and len(shape) == 4 else None
    except Exception:  # noqa: BLE001
        return None


def _wrap(owner: Any, attr: str, name: str, arg: int) -> None:
    fn = getattr(owner, attr, None)
    if fn is None or getattr(fn, "_course_probe", False):
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tl, "other", False):  # nested (OpenVINO's __call__ runs infer)
            return fn(*args, **kwargs)
        _tl.other = True
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _tl.other = False
            size = _spatial(args[arg]) if len(args) > arg else _spatial(kwargs.get("inputs"))
            _add(_cell()["other"], f"{name}|{size}", time.perf_counter() - start)

    wrapper._course_probe = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__doc__ = fn.__doc__
    try:
        setattr(owner, attr, wrapper)
    except (AttributeError, TypeError):
        pass


def _install_others() -> None:
    mods = sys.modules
    if "onnxruntime" in mods and "onnxruntime" not in _installed:
        _installed.add("onnxruntime")
        from onnxruntime.capi import onnxruntime_inference_collection as oic

        _wrap(oic.Session, "run", "onnxruntime", 2)  # run(self, output_names, input_feed)
    if "openvino" in mods and "openvino" not in _installed:
        _installed.add("openvino")
        ov = mods["openvino"]
        _wrap(ov.CompiledModel, "__call__", "openvino", 1)
        _wrap(ov.InferRequest, "infer", "openvino", 1)
    for client in ("tritonclient.http", "tritonclient.grpc"):
        if client in mods and client not in _installed:
            _installed.add(client)
            _wrap(mods[client].InferenceServerClient, "infer", "triton", 2)


# ------------------------------------------------------------------------------ the cells
def _pre_run_cell(info: Any) -> None:
    if "torch" in sys.modules and "torch" not in _installed:
        _installed.add("torch")
        _install_torch()
    _install_others()
    from IPython import get_ipython

    ip = get_ipython()
    _cells.append(_new_cell(getattr(info, "raw_cell", "") or "", ip.execution_count))


def _post_run_cell(result: Any) -> None:
    cell = _cell()
    cell["wall"] = time.perf_counter() - cell["_start"]
    cell["error"] = not getattr(result, "success", True)
    _install_others()
    if "torch" in _installed:
        try:
            _measure_pending()
        except Exception:  # noqa: BLE001 - the probe must never fail a chapter
            pass
    _write()


def _write() -> None:
    if not _OUT:
        return
    cells = [{k: v for k, v in c.items() if not k.startswith("_")} for c in _cells]
    data = {"pid": os.getpid(), "cells": cells, "signatures": _sigs}
    tmp = f"{_OUT}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, _OUT)


def install() -> bool:
    """Start probing this IPython kernel (when ``COURSE_PROBE_FILE`` names the output file)."""
    if not _OUT:
        return False
    from IPython import get_ipython

    ip = get_ipython()
    ip.events.register("pre_run_cell", _pre_run_cell)
    ip.events.register("post_run_cell", _post_run_cell)
    atexit.register(_write)
    return True


STARTUP = """# make fullcpu's probe (tools/full_cpu_probe.py): nothing is left in the namespace
def _course_probe(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_full_cpu_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


_course_probe({path!r})
del _course_probe
"""
