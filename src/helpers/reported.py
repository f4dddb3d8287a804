"""The case studies' published figures, shown beside the reader's own measurements.

These are *reported* numbers from the two source articles (GPU results on the
authors' hardware), never facts about the reader's machine: every chapter
re-measures the step and prints both.
"""

from __future__ import annotations

# Case study 1: ResNet-101 service migrated to OneFlow (speedup factors, x).
RESNET101_ONEFLOW: dict[str, float] = {
    "static_graph": 1.25,  # nn.Graph vs eager
    "no_param_grad": 1.75,  # pruning: skip parameter gradients
    "no_second_forward": 1.33,  # pruning: drop the redundant second forward
    "pruning_total": 2.33,
    "batch_1_to_16": 2.55,  # GPU utilisation 30% -> 90%
    "pipeline_2proc": 1.8,  # two processes, lock around data loading
    "parallel_total": 4.6,
    "amp": 1.36,
    "conv_algo_search": 1.07,
    "pad_conv_fusion": 1.19,
    "add_fusion": 1.02,
    "compile_total": 1.64,
    # the article's running totals for the compile chain at batch 16: AMP, + conv search, + pad/conv, + add
    "compile_cumulative_amp_search": 1.43,
    "compile_cumulative_amp_search_pad": 1.62,
    "tensorrt_amp_nhwc": 1.48,
    "cumulative": 21.0,
    "end_to_end": 25.0,  # "more than 25x"
}

# Case study 2: MobileNetV2 face embedder on a GTX 1080 Ti.
MOBILENETV2_EMBEDDER: dict[str, float] = {
    "pytorch_fps_batch1": 400.0,  # (1, 3, 224, 224)
    "warmup_runs_min": 10,
    "warmup_runs_max": 20,
}

# Not a case-study figure: a rough earlier check on this course's CPU build machines (2-core AMD EPYC with
# AVX-512 VNNI and BF16, 2 threads; ResNet-101, batch 16, 224x224; one run each, seconds per batch),
# recorded in the course's environment notes. Chapter 8 measures it properly and shows both.
INT8_CPU_ROUGH_CHECK: dict[str, float] = {
    "torch_eager_fp32_s": 0.94,
    "torch_autocast_bf16_s": 0.48,
    "openvino_bf16_s": 0.48,
    "ort_fp32_s": 0.50,
    "ort_int8_s": 0.14,  # static QDQ, per-channel, quant_pre_process first
}
