"""Count the operations in a compiled graph, so that fusion and pruning are *visible* (chapters 4
and 6): a OneFlow ``nn.Graph`` after its optimisation passes (AMP casts, add-to-output fusion, MLIR
pad+conv fusion and BN folding all show up), a ``torch.fx`` graph, and what changed between two.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = ["oneflow_op_counts", "fx_op_counts", "op_diff", "total"]


def _sorted(counts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def oneflow_op_counts(graph: Any, *, stage: str = "compiled") -> dict[str, int]:
    """Ops per type (weights left out, most frequent first) of a OneFlow ``nn.Graph`` called once.

    ``stage="compiled"``: after OneFlow's optimisation passes (what runs); ``"traced"``: as
    ``build`` wrote it.
    """
    if stage not in ("compiled", "traced"):
        raise ValueError(f"stage must be 'compiled' or 'traced', got {stage!r}")
    if not hasattr(graph, "_compiled_graph_proto") or not hasattr(graph, "build"):
        raise TypeError(f"expected a OneFlow nn.Graph, got {type(graph).__name__}")
    proto = graph._compiled_graph_proto if stage == "compiled" else graph._graph_proto
    if proto is None or not getattr(graph, "_is_compiled", True):
        raise RuntimeError("the graph has not been compiled yet: call it once with an input first")
    counts: Counter[str] = Counter()
    for op in proto.net.op:
        kind = op.user_conf.op_type_name if op.HasField("user_conf") else op.WhichOneof("op_type")
        kind = kind and kind.removesuffix("_conf")
        if kind not in (None, "variable"):
            counts[kind] += 1
    return _sorted(counts)


def fx_op_counts(module_or_graph: Any) -> dict[str, int]:
    """Nodes per operation in a ``torch.fx`` graph (a ``GraphModule`` or a traceable module):
    submodule calls by class (``Conv2d``), functions and methods by name (``add``, ``flatten``)."""
    import torch
    import torch.fx

    if isinstance(module_or_graph, torch.fx.GraphModule):
        gm = module_or_graph
    elif isinstance(module_or_graph, torch.nn.Module):
        gm = torch.fx.symbolic_trace(module_or_graph)
    else:
        raise TypeError(
            f"expected a torch.nn.Module or torch.fx.GraphModule, got {type(module_or_graph).__name__}"
        )
    modules = dict(gm.named_modules())
    counts: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if node.op == "call_module":
            counts[type(modules[node.target]).__name__] += 1
        elif node.op == "call_function":
            counts[getattr(node.target, "__name__", str(node.target))] += 1
        elif node.op == "call_method":
            counts[str(node.target)] += 1
    return _sorted(counts)


def op_diff(before: Mapping[str, int], after: Mapping[str, int]) -> list[dict[str, Any]]:
    """Rows ``{op, before, after, change}`` for every op type whose count changed (largest change first)."""
    for name, counts in (("before", before), ("after", after)):
        if not isinstance(counts, Mapping):
            raise TypeError(
                f"{name} must be a mapping of op name -> count, got {type(counts).__name__}"
            )
        bad = [k for k, v in counts.items() if not isinstance(v, int) or v < 0]
        if bad:
            raise ValueError(f"{name} has counts that are not non-negative ints: {bad[:3]}")
    rows = [
        {"op": op, "before": b, "after": a, "change": a - b}
        for op in set(before) | set(after)
        for b, a in [(before.get(op, 0), after.get(op, 0))]
        if a != b
    ]
    return sorted(rows, key=lambda r: (-abs(r["change"]), r["op"]))


def total(counts: Mapping[str, int]) -> int:
    """Total number of ops in a count."""
    return int(sum(counts.values()))
