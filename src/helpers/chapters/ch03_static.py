"""Chapter 3's companion: eager vs static results as a table and a figure, and timings as deployed.

:func:`deployed_timings` times eager vs static in the frameworks' *default* math mode (TF32 on
an Ampere-or-newer GPU) in a fresh process: the chapter's own process keeps strict float32 for
its checks, and OneFlow cannot switch TF32 back on once it started. The page builds and checks
every graph itself.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from helpers.core import environment, precision
from helpers.core.threads import same_threads
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.measure.timer import benchmark_interleaved
from helpers.porting import migration
from helpers.workload import data, models, team_model

if TYPE_CHECKING:  # importing helpers.compiling.graphs starts OneFlow: not before its threads
    from helpers.compiling.graphs import StaticMeasurement

__all__ = [
    "ratios",
    "speedup_rows",
    "best_torch_routes",
    "plot_speedups",
    "deployed_timings",
    "deployed_rows",
    "quiet_capture",
    "STATIC_ROUTES",
    "torch_static",
]

# torch's loggers that warn while a graph is captured ("Unable to find user code ...").
_CAPTURE_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch._dynamo", "torch.export")


@contextlib.contextmanager
def quiet_capture() -> Iterator[io.StringIO]:
    """Inside the block, collect what torch prints to ``sys.stderr`` and hide its capture warnings.

    A failed ``torch.export.export`` prints the graph it had captured so far (twice, from two
    nested wrappers) to ``sys.stderr``: the block yields that text, so a page can show the line
    where capture stopped. Loggers and warning filters are restored on exit; errors still raise.
    """
    loggers = [logging.getLogger(name) for name in _CAPTURE_LOGGERS]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    text = io.StringIO()
    try:
        with contextlib.redirect_stderr(text), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.compile inside torch.export")
            yield text
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)


def torch_static(model: Any, example: Any, route: str) -> Any:
    """PyTorch's static version of ``model`` by ``STATIC_ROUTES[route]``, built without gradients.

    ``example`` is the input ``trace`` records (the other routes ignore it); ``compile``
    compiles lazily, at the first call. Each TracerWarning is printed once, on stdout.
    """
    if route not in STATIC_ROUTES:
        raise ValueError(f"unknown route {route!r}; use one of {', '.join(STATIC_ROUTES)}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"expected a torch.nn.Module, got {type(model).__module__}.{type(model).__name__}"
        )
    if route == "freeze" and model.training:
        raise ValueError("torch.jit.freeze needs a model in eval mode: call model.eval() first")
    if route == "compile" and not torch.cuda.is_available():
        # Inductor's C++ path logs "No CUDA runtime is found" once on CPU-only machines: harmless.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        static = STATIC_ROUTES[route](model, example)
    seen = set()
    for w in caught:
        if not issubclass(w.category, torch.jit.TracerWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif (w.filename, w.lineno) not in seen:
            seen.add((w.filename, w.lineno))
            code = linecache.getline(w.filename, w.lineno).strip()
            # two lines, each narrow enough for the book's 88-column output
            print(f"trace warned at {Path(w.filename).name}:{w.lineno} `{code}`:")
            print(f"  {str(w.message).split('. ')[0]}.")
    return static


def _steady(m: Measurement | StaticMeasurement) -> Measurement:
    """A static variant's steady state (a StaticMeasurement's ``steady``), or the measurement."""
    return m if isinstance(m, Measurement) else m.steady


def ratios(
    results: Mapping[tuple[str, str, int], Measurement | StaticMeasurement],
) -> dict[tuple[str, str, int], RatioSummary]:
    """``{(framework, variant, batch): eager time / variant time per round}`` for every non-eager
    entry of ``results``, paired with its framework's ``"eager"`` entry at that batch (both from
    one interleaved run)."""
    out = {}
    for (fw, variant, batch), m in results.items():
        if variant == "eager":
            continue
        eager = results.get((fw, "eager", batch))
        if eager is None:
            raise KeyError(f"no eager measurement for {fw} at batch {batch}")
        out[fw, variant, batch] = paired_ratio(_steady(eager), _steady(m))
    return out


def speedup_rows(
    results: Mapping[tuple[str, str, int], Measurement | StaticMeasurement],
) -> list[dict[str, Any]]:
    """One row per entry of ``results``, eager rows included: p50_ms, speedup and per-round IQR
    (the paired ratio over its framework's eager at that batch, from the same interleaved run),
    its verdict, compile_s (paid once) and break_even (calls to earn it back, '-' where the
    variant is not conclusively faster)."""
    paired = ratios(results)  # raises for a variant without its eager entry
    rows = []
    for (fw, variant, batch), m in results.items():
        steady, ratio = _steady(m), paired.get((fw, variant, batch))
        compile_s = None if isinstance(m, Measurement) else m.compile_s
        gain_s = _steady(results[fw, "eager", batch]).median - steady.median  # per call
        earns = compile_s is not None and ratio is not None and ratio.p25 > 1 and gain_s > 0
        row = dict(framework=fw, variant=variant, batch=batch, p50_ms=steady.median * 1e3)
        if ratio is None:
            row |= {"speedup": None, RatioSummary.SPREAD: "-", "verdict": "baseline"}
        else:
            row |= {"speedup": ratio.median, ratio.SPREAD: ratio.interval}
            row["verdict"] = ratio.reading
        row |= dict(compile_s=compile_s, break_even=f"{compile_s / gain_s:.0f}" if earns else "-")
        rows.append(row)
    return rows


def best_torch_routes(
    results: Mapping[tuple[str, str, int], Measurement | StaticMeasurement],
) -> dict[int, dict[str, Any]]:
    """``{batch: the speedup_rows row of PyTorch's fastest static route at that batch}``."""
    rows = [r for r in speedup_rows(results) if r["framework"] == "PyTorch" and r["speedup"]]
    return {
        b: max((r for r in rows if r["batch"] == b), key=lambda r: r["speedup"])
        for b in dict.fromkeys(r["batch"] for r in rows)
    }


def plot_speedups(
    labels: Sequence[str],
    ratios: Sequence[RatioSummary],
    reported: Sequence[float | None],
    *,
    title: str = "",
) -> Any:
    """Bars of speedups (per-round medians) with their p25-p75 spread as whiskers, and the case
    study's factor beside each where it reported one (:func:`helpers.show.plots.plot_speedups`)."""
    from helpers.show.plots import plot_speedups as bars

    medians = [r.median for r in ratios]
    ax = bars(labels, medians, reported, title=title)  # it checks the lengths
    spread = [[r.median - r.p25 for r in ratios], [r.p75 - r.median for r in ratios]]
    x = [i - 0.2 for i in range(len(labels))]  # the measured bars, left of the reported ones
    ax.errorbar(x, medians, yerr=spread, fmt="none", color="k", lw=1)
    ax.figure.set_size_inches(10, 4)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.title.set_fontsize(9)
    return ax


def deployed_timings(
    *,
    arch: str,
    image_size: int,
    num_classes: int,
    batches: Sequence[int],
    torch_routes: Mapping[str, str],
    warmup: int,
    repeats: int,
    threads: int,
    oneflow: bool | None = None,
) -> dict[str, Any]:
    """Eager vs static in this process's default math mode; meant for a fresh process.

    PyTorch: eager vs the route ``torch_routes[str(batch)]`` (:func:`torch_static`) at each batch.
    OneFlow (by default only on a GPU, the only place its default math differs from float32):
    eager vs ``nn.Graph`` at each batch, and the case study's task (chapter 4's ``original``) at
    batch 1. Each pair in interleaved rounds, ``threads`` CPU threads for both frameworks.
    Returns JSON values: ``{"math": {framework: mode}, "device": {framework: device}, "rows":
    [{"framework", "variant", "work", "batch", "ratio"}]}`` (``ratio``: eager time / static time,
    :meth:`RatioSummary.as_record`; ``variant`` as the keys of :func:`ratios`).
    """
    same_threads(threads)  # PyTorch's now, OneFlow's before it starts (these imports start it)
    from helpers.compiling import graphs
    from helpers.workload import saliency as st

    flow = environment.import_oneflow()
    environment.seed_everything(0)
    device, fdevice = environment.torch_device(), environment.flow_device()
    if oneflow is None:
        oneflow = fdevice.type == "cuda"
    images = data.normalize(data.make_images(max(batches), image_size, seed=5)[0])
    model = team_model.BusinessModel(arch, num_classes=num_classes).eval()
    out: dict[str, Any] = {
        "math": {"PyTorch": precision.torch_math_mode(device)},
        "device": {"PyTorch": str(device)},
        "rows": [],
    }

    def pair(name: str, variant: str, work: str, batch: int, eager: Any, static: Any) -> None:
        fw, dev = {"PyTorch": "torch", "OneFlow": "oneflow"}[name], out["device"][name]
        kw = dict(framework=fw, warmup=warmup, repeats=repeats, items=batch, device=dev)
        timed = benchmark_interleaved({"eager": eager, "static": static}, **kw)
        ratio = paired_ratio(timed["eager"], timed["static"]).as_record()
        out["rows"].append(
            dict(framework=name, variant=variant, work=work, batch=batch, ratio=ratio)
        )

    if oneflow:
        flow_business = migration.import_with_mock_torch(team_model)
        flow_model = flow_business.BusinessModel(arch, num_classes=num_classes)
        models.transfer_weights(model, flow_model)
        flow_model.eval().to(fdevice)
        out["math"]["OneFlow"] = precision.oneflow_math_mode(fdevice)
        out["device"]["OneFlow"] = str(fdevice)
        x1 = flow.tensor(images[:1]).to(fdevice)
        task_eager = st.make_task(flow_model, "original")
        task_graph = st.make_graph_task(flow_model, "original", tuple(x1.shape))
        task_graph(x1)  # compiles
        task = "the case study's task"
        pair("OneFlow", "task graph", task, 1, lambda: task_eager(x1), lambda: task_graph(x1))
        for b in batches:
            xf = flow.tensor(images[:b]).to(fdevice)
            graph = graphs.make_inference_graph(flow_model)
            graph(xf)  # compiles
            eager_call = flow.no_grad()(partial(flow_model, xf))
            pair("OneFlow", "nn.Graph", "inference", b, eager_call, partial(graph, xf))
    model = model.to(device)
    with torch.no_grad():
        for b in batches:
            route = torch_routes[str(b)]
            xt = torch.from_numpy(np.ascontiguousarray(images[:b])).to(device)
            static = torch_static(model, xt, route)
            for _ in range(2):  # TorchScript optimises during its first two calls
                static(xt)
            pair(
                "PyTorch", route, f"inference ({route})", b, partial(model, xt), partial(static, xt)
            )
    return out


def deployed_rows(
    deployed: Mapping[str, Any],
    strict: Mapping[tuple[str, str, int], RatioSummary],
    strict_mode: str = "fp32",
) -> list[dict[str, Any]]:
    """:func:`deployed_timings`'s pairs beside the same pairs timed in strict float32 (``strict``,
    keyed like :func:`ratios`): one row each, both speedups labelled with their math mode."""
    rows = []
    for r in deployed["rows"]:
        here = RatioSummary.from_record(r["ratio"])
        before = strict.get((r["framework"], r["variant"], r["batch"]))
        rows.append(
            {
                "framework": r["framework"],
                "work": r["work"],
                "batch": r["batch"],
                f"{strict_mode} (above)": "-" if before is None else before.verdict(),
                "default math": f"{deployed['math'][r['framework']]}: {here.verdict()}",
            }
        )
    return rows


# ---- saved from notebooks/03_dynamic_to_static.ipynb by tools/save_cells.py: edit it there ----
STATIC_ROUTES = {  # route -> (model, example input) -> PyTorch's static model
    "trace": lambda model, x: torch.jit.trace(model, x),  # the ops x ran, recorded
    "script": lambda model, x: torch.jit.script(model),  # forward's source, compiled
    "freeze": lambda model, x: torch.jit.freeze(torch.jit.script(model)),  # + folded
    "compile": lambda model, x: torch.compile(model),  # Inductor, at the first call
}
# ---- end of cells saved from notebooks/03_dynamic_to_static.ipynb ----
