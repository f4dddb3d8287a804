"""The one table of record names: a course chapter (``NN_slug``) writes only names listed under
it, and the capstone reads only them (:func:`missing_records`: each required name no record
matches). A ``{hole}`` stands for one name segment (``fps_{runtime}_batch{b}`` matches
``fps_ort_int8_batch8``); ``{b}`` and ``{n}`` for a whole number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = [
    "NAMES",
    "JOURNEY",
    "is_course_chapter",
    "find",
    "check",
    "missing_records",
]


@dataclass(frozen=True)
class Name:
    """One record name (or pattern) a chapter writes; an optional one's comment says when."""

    pattern: str
    required: bool = True

    @cached_property
    def regex(self) -> re.Pattern[str]:
        parts = re.split(r"\{([^{}]+)\}", self.pattern)  # literal, hole, literal, ...
        holes = [r"\d+" if h in NUMBERS else r"[^/\\\s]+?" for h in parts[1::2]]
        literals = map(re.escape, parts[::2])
        return re.compile("".join(a + b for a, b in zip(literals, [*holes, r"\Z"])))


def _names(*items: str | Name) -> tuple[Name, ...]:
    return tuple(i if isinstance(i, Name) else Name(i) for i in items)


def _optional(*patterns: str) -> tuple[Name, ...]:
    return tuple(Name(p, required=False) for p in patterns)


NUMBERS = {"b", "n"}  # placeholders that stand for a whole number (batch size, count)

# Each chapter's block is edited with the chapter: add a name here when the page records it.
NAMES: dict[str, tuple[Name, ...]] = {
    "00_measuring": _names(
        "resnet_batch1_ms",
        "resnet_best_batch_throughput",
        "batch_gain",
        "percent_of_peak",
        "oneflow_vs_torch_{device}_ratio",
        "embedder_fps_batch1",
        "pipeline_preprocess_share",
    ),
    "01_migration": _names(
        "lines_changed",
        "migrated_output_max_abs_err",
        "missing_apis",
        "oneflow_vs_torch_time_ratio_batch{b}",
    ),
    "02_precision_alignment": _names(
        "inference_max_abs_eager",
        "inference_max_abs_graph",
        "inference_cosine",
        "fp32_error_ratio_oneflow_vs_torch",
        "one_step_bound_used",
        "training_first_step_loss_diff",
        "training_max_smoothed_gap",
        "training_val_accuracy_gap",
        "training_step_time_ratio",
        "planted_bugs_caught",
    ),
    "03_dynamic_to_static": _names(
        "oneflow_graph_speedup_batch{b}",
        "best_torch_static_speedup_batch{b}",
        "oneflow_graph_compile_s_batch1",
        "oneflow_train_graph_speedup",
        # the case study's 1.25x step, its task in nn.Graph; read by the capstone
        "oneflow_task_graph_speedup_batch1",
        "torch_compile_first_call_s_batch1",
        "torch_export_aten_calls",  # the ExportedProgram's operator calls (batch left free)
    ),
    "04_pruning": _names(
        "{route}_original_ms",
        "{route}_no_param_grad_speedup",
        "{route}_no_second_forward_speedup",
        "{route}_pruning_speedup",
        "oneflow_nngraph_pruning_speedup",  # read by the capstone
        "torch_peak_memory_{variant}",
        "torch_threads",
        "graph_ops_{variant}",
    ),
    "05_parallelism": _names(
        *_optional("gpu_util_batch{b}"),  # on a GPU only
        "batch_gain_torch",  # the pruned task, as the case study's 2.55x
        "batch_gain_torch_forward_only",  # forward-only inference: the contrast
        "batch_gain_oneflow_graph",
        "torch_threads",  # at batch S.batch_size: the serial pipelines' thread count
        "torch_threads_batch{b}",  # the faster of 1 thread and all cores, per batch size
        "torch_throughput_batch{b}",
        "eval_bn_max_batch_dependence",
        "train_bn_max_batch_dependence",
        "eval_saliency_min_batch_cosine",  # input gradients, batched vs alone
        "pipeline_{run}_throughput",
        "pipeline_{run}_startup_s",  # process / worker start-up, kept out of the timed window
        "pipeline_2proc_gain",  # 2 processes + lock vs serial (the case study's 1.8x)
        "pipeline_replicas_gain",  # the control: 2 processes, no lock, vs serial
        "pipeline_gain_over_control",  # 2 processes + lock vs the better of those two
        "pipeline_best_gain",  # the best DataLoader vs serial
        "pipeline_ceiling_from_stages",
        # read by the capstone: the batch gain x the pipeline's gain over the better of serial
        # and replicas; on a CPU loading_overlaps_gpu_work=False and the page prints "n/a"
        "parallel_total",
    ),
    "06_compile_optimisations": _names(
        "oneflow_{variant}_speedup",
        "oneflow_graph_ms",
        "torch_threads",
        "oneflow_amp_speedup_vs_reported",
        "oneflow_compile_chain_total",
        "torch_{variant}_speedup",  # paired ratios over eager fp32 (the A/A twin's too)
        "{route}_compile_s",  # each torch.compile mode from an empty Inductor cache
        "torch_compile_second_start_first_call_s",  # a fresh process on a filled cache
        "model_val_accuracy",  # the checked model learned its task
        *_optional("tensorrt_fp16_vs_amp_nhwc_speedup"),  # on a GPU only
    ),
    "07_onnx_runtimes": _names(
        "eager_fps_batch1",
        "fps_{runtime}_batch{b}",
        "best_runtime_speedup_batch1",  # the fastest fp32 runtime, paired ratio
        "nodes_as_traced",
        "nodes_simplified",
        "aoti_compile_s",  # AOTInductor's .pt2, built from an empty Inductor cache
        "aoti_package_mb",
        "aoti_fresh_process_bound_used",  # run in a process without the model's code
        "spinning_speedup_{call}",  # the wait-policy control: spinning over PASSIVE
        "ort_lead224_vs_{path}_batch{b}",  # ONNX Runtime against each PyTorch path at 224 px
        "fps224_{runtime}_batch{b}",
    ),
    "07a_oneflow_to_onnx": _names(
        "oneflow_graph_ort_speedup",  # ORT on OneFlow's converted graph over OneFlow's CPU build
    ),
    "08_int8_quantization": _names(
        "accuracy_fp32",
        "accuracy_{runtime}",
        "ort_int8_vs_eager_speedup",
        "resnet101_b16_ort_int8_vs_eager_speedup",
        "resnet101_b16_seconds_{runtime}",
        "resnet101_b16_pct_ceiling_{runtime}",
        "resnet101_b16_best_vs_eager_speedup",
        "cpu_ceiling_{mode}",
        "fps_{runtime}_batch{b}",
        "training_seconds",
        # when the CPU has 8-bit dot products (VNNI, AMX):
        *_optional("resnet101_b16_int8_ceiling_bound"),
        "embedder_fps_{runtime}_batch{b}",
        "embedder_ablation_calib{n}_{weights}",
    ),
    "09_triton_serving": _names(
        "server_startup_s",
        "in_process_batch1_p50_ms",
        "throughput_1_instance_dynamic_batching",  # read by the capstone
        *_optional(  # when perf_analyzer can run
            *("served_batch1_p50_ms", "throughput_{setup}", "p50_ms_{setup}", "p99_ms_{setup}"),
            *("queue_ms_{setup}", "compute_ms_per_image_{setup}", "compute_ms_{setup}"),
            "dynamic_batching_avg_batch",
        ),
    ),
    "09b_production_front": _optional(  # when nginx is installed
        *("front_overhead_ratio", "failover_{count}", "front_oversized_status"),
        *("front_rate_limited_{count}", "admin_requests_{outcome}"),
    ),
    "10_capstone": _names(
        "end_to_end_speedup",
        "naive_ms_per_image",
        "optimised_ms_per_image",
        *_optional("cumulative_measured"),  # when chapters 3-6 ran in the same results folder
        "ladder_{rung}_factor",
        "served_requests_per_s",
        "served_p99_ms",
    ),
}

# The record each step of the capstone's journey reads: exact entries of NAMES (a test checks).
JOURNEY: dict[str, tuple[str, str]] = {
    "static": ("03_dynamic_to_static", "oneflow_task_graph_speedup_batch1"),
    "pruning": ("04_pruning", "oneflow_nngraph_pruning_speedup"),
    "parallel": ("05_parallelism", "parallel_total"),
    "compile": ("06_compile_optimisations", "oneflow_compile_chain_total"),
}

_COURSE_CHAPTER = re.compile(r"\d{2}[a-z]?_[a-z0-9_]+\Z")


def is_course_chapter(chapter: str) -> bool:
    """True for a course chapter's ledger name (``NN_slug``); only those are checked against the table."""
    return bool(_COURSE_CHAPTER.match(chapter))


def find(chapter: str, name: str) -> Name | None:
    """The table entry of ``chapter`` that ``name`` matches (an exact name before a pattern), or None."""
    entries = NAMES.get(chapter, ())
    exact = next((e for e in entries if e.pattern == name), None)
    return exact or next((e for e in entries if e.regex.match(name)), None)


def check(chapter: str, name: str) -> None:
    """Raise ``ValueError`` when a course chapter records a name the table does not list."""
    if not is_course_chapter(chapter):
        return
    if chapter not in NAMES:
        raise ValueError(
            f"{chapter!r} looks like a course chapter but has no entry in helpers.record.ledger_names.NAMES"
        )
    if find(chapter, name) is None:
        known = ", ".join(e.pattern for e in NAMES[chapter])
        raise ValueError(
            f"record {name!r} of {chapter!r} is not in helpers.record.ledger_names.NAMES; "
            f"the capstone reads the same table: rename it there too (known: {known})"
        )


def missing_records(
    records: Iterable[Mapping[str, Any]],
    chapters: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """``{chapter: [required patterns no record matches]}`` over ``chapters`` (default: all),
    leaving out a chapter that wrote no record: it never ran."""
    by_chapter: dict[str, list[str]] = {}
    for rec in records:
        by_chapter.setdefault(rec["chapter"], []).append(rec["name"])
    wanted = list(chapters) if chapters is not None else [c for c in NAMES if c in by_chapter]
    out: dict[str, list[str]] = {}
    for chapter in wanted:
        if chapter not in NAMES:
            raise ValueError(
                f"unknown chapter {chapter!r}: not in helpers.record.ledger_names.NAMES"
            )
        written = by_chapter.get(chapter, [])
        needed = [p for p in NAMES[chapter] if p.required]
        gaps = [p.pattern for p in needed if not any(map(p.regex.match, written))]
        if written and gaps:
            out[chapter] = gaps
    return out
