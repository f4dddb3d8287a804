"""Chapter 9's report: the load sweep's figure, its sentences and the chapter's summary table.

A sweep row holds ``model``, ``clients``, ``req/s``, ``p99 ms``, ``queue ms/request``,
``compute ms/execution``, ``compute ms/image`` and ``requests/exec``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helpers.show.table import Table

__all__ = ["at_clients", "plot_sweep", "sweep_sentences", "summary_table"]


def at_clients(sweep: Sequence[Mapping[str, Any]], clients: int) -> dict[str, Mapping[str, Any]]:
    """The sweep's rows at ``clients`` concurrent clients, by model."""
    return {r["model"]: r for r in sweep if r["clients"] == clients}


def plot_sweep(
    sweep: Sequence[Mapping[str, Any]], models: Sequence[str], levels: Sequence[int], title: str
) -> Any:
    """Requests/s, p99, and queue per request beside compute per image, against clients."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for i, m in enumerate(models):
        rows = [r for r in sweep if r["model"] == m]
        c = [r["clients"] for r in rows]
        axes[0].plot(c, [r["req/s"] for r in rows], "o-", color=f"C{i}", label=m)
        axes[1].plot(c, [r["p99 ms"] for r in rows], "o-", color=f"C{i}")
        axes[2].plot(c, [r["queue ms/request"] for r in rows], "o-", color=f"C{i}")
        axes[2].plot(c, [r["compute ms/image"] for r in rows], "^:", color=f"C{i}")
    titles = ("requests/s", "p99 (ms)", "ms: queue/request (-), compute/image (:)")
    for ax, name in zip(axes, titles):
        ax.set(xscale="log", xlabel="concurrent clients", title=name)
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def sweep_sentences(sweep: Sequence[Mapping[str, Any]], levels: Sequence[int]) -> list[str]:
    """What the counters say at the most clients (model time per image, batched or not), and
    whether the unbatched model's queue grew while its compute did not: the scaler's signal."""
    top = at_clients(sweep, levels[-1])
    d, u = top["embedder_dynamic"], top["embedder"]
    img = d["compute ms/image"] / u["compute ms/image"]
    word = "less" if img < 0.95 else "more" if img > 1.05 else "about the same"
    one = at_clients(sweep, levels[0])["embedder"]
    q0, q1 = one["queue ms/request"], u["queue ms/request"]
    c0, c1 = one["compute ms/image"], u["compute ms/image"]
    signal = q1 > 2 * q0 and c1 < 1.2 * c0  # the queue grew, the model's time did not
    return [
        f"At {levels[-1]} clients, `embedder_dynamic`'s executions carried "
        f"{d['requests/exec']:.2f} requests (one image each): {d['compute ms/execution']:.2f} ms "
        "of compute per execution, which Triton's counter adds to each of those requests, so "
        f"{d['compute ms/image']:.2f} ms per image, against {u['compute ms/image']:.2f} ms per "
        f"image (and per execution) unbatched: {word} model time per image ({img:.2f}x). Queue "
        f"per request: {d['queue ms/request']:.2f} ms batched, {u['queue ms/request']:.2f} ms "
        "unbatched.",
        f"Unbatched, from {levels[0]} to {levels[-1]} clients: queue per request "
        f"{q0:.2f} -> {q1:.2f} ms, compute per image {c0:.2f} -> {c1:.2f} ms: "
        + (
            "requests waited for a busy model, the scaler's signal."
            if signal
            else "not the scaler's signal on this run (see the table)."
        ),
    ]


def summary_table(
    first: Sequence[tuple[str, str, str]],
    sweep: Sequence[Mapping[str, Any]] | None,
    levels: Sequence[int],
    overhead_ms: float | None,
) -> Table:
    """The chapter's results: the ``first`` rows (step, here, case study) as given, then what
    the sweep measured (serving overhead, dynamic over no batching, compute per image)."""
    rows = list(first)
    if sweep:
        top = at_clients(sweep, levels[-1])
        d, u = top["embedder_dynamic"], top["embedder"]
        rows += [
            ("serving overhead, batch 1 (p50)", f"{overhead_ms:.2f} ms", "-"),
            (
                f"dynamic / no batching, {levels[-1]} clients",
                f"{d['req/s'] / u['req/s']:.2f}x requests/s (one run, noisy)",
                "-",
            ),
            (
                f"compute per image, {levels[-1]} clients: dynamic / none",
                f"{d['compute ms/image']:.2f} / {u['compute ms/image']:.2f} ms",
                "-",
            ),
        ]
    return Table([dict(zip(("step", "here", "case study"), row)) for row in rows])
