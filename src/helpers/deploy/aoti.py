"""AOTInductor: a PyTorch model compiled ahead of time into one ``.pt2`` file (chapters 7 and 10).

Chapter 7 writes both functions on its page (``#@save`` cells below). :func:`run_package` runs
the file in a fresh process (``run_in_subprocess``) with no model code: this module imports torch
and NumPy only, and it returns the modules that process imported (chapter 7 checks them).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._inductor.config as inductor_config

__all__ = ["compile_package", "run_package"]


# ---- saved from notebooks/07_onnx_runtimes.ipynb by tools/save_cells.py: edit it there ----
def compile_package(
    model: torch.nn.Module,
    example: torch.Tensor,
    path: str | Path,
    *,
    max_batch: int = 64,
) -> Path:
    """torch.export with a batch of 1 to ``max_batch``, then AOTInductor: one ``.pt2``
    file holding the compiled kernels and the weights. ``model`` in eval mode."""
    if model.training:
        raise ValueError("compile a model in eval mode: call model.eval() first")
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    with inductor_config.patch({"cpp.dynamic_threads": True}):  # threads: at run time
        out = torch._inductor.aoti_compile_and_package(program, package_path=str(path))
    return Path(out)


def run_package(package: str, inputs: str, outputs: str, device: str = "cpu") -> dict[str, Any]:
    """Run the ``.pt2`` file ``package`` on the batch saved in ``inputs`` (``.npy``) and
    save its output to ``outputs``: a fresh process's target, with torch and NumPy only.
    Returns the names of the modules this process imported, and its times."""
    import torch._inductor.codecache  # noqa: F401 - torch 2.10's loader needs it loaded
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    torch.backends.cudnn.allow_tf32 = False  # IEEE float32 on a GPU, as checked
    torch.backends.cuda.matmul.allow_tf32 = False
    start = time.perf_counter()
    if device == "cpu":  # Inductor's check of the CPU, once per process (chapter 6)
        valid_vec_isa_list()
    probed = time.perf_counter()
    runner = torch._inductor.aoti_load_package(package)
    loaded = time.perf_counter()
    x = torch.from_numpy(np.load(inputs)).to(device)
    with torch.inference_mode():
        np.save(outputs, runner(x).float().cpu().numpy())
    times = dict(isa_check_s=probed - start, load_s=loaded - probed)
    return dict(times, run_s=time.perf_counter() - loaded, modules=sorted(sys.modules))


# ---- end of cells saved from notebooks/07_onnx_runtimes.ipynb ----
