"""Shared helpers for the course "From PyTorch to production, fast".

Every chapter imports what it needs from the small modules below:

- :mod:`helpers.environment` -- quick/full mode, devices, seeding, environment report
- :mod:`helpers.benchmarking` -- honest timing (warm-up, synchronisation, percentiles)
- :mod:`helpers.comparison` -- numerical comparison of outputs across frameworks
- :mod:`helpers.models` -- ResNet and MobileNetV2 models in torchvision and flowvision, weight transfer
- :mod:`helpers.data` -- a deterministic generated image dataset (no downloads)
- :mod:`helpers.business` -- the team's original PyTorch business model (ResNet backbone + task head), plain PyTorch code
- :mod:`helpers.migration` -- PyTorch -> OneFlow migration: import rewriting, mock_torch imports, missing-API scan
- :mod:`helpers.alignment` -- precision alignment: one-call inference report (table + plot), aligned training in two frameworks
- :mod:`helpers.graphs` -- OneFlow nn.Graph inference/training wrappers, TorchScript/torch.compile routes, compile vs steady-state timing
- :mod:`helpers.saliency_task` -- the forward->backward->forward task (input gradients) and its pruned variants, eager and nn.Graph
- :mod:`helpers.graph_ops` -- op counts of compiled OneFlow graphs and torch.fx graphs, and their differences
- :mod:`helpers.batching` -- batch sweeps, BatchNorm batch (in)dependence, GPU utilisation sampling
- :mod:`helpers.pipeline` -- two-stage load/infer pipelines (serial, two processes + lock, DataLoader) with timelines
- :mod:`helpers.compile_opts` -- OneFlow nn.Graph switches (AMP, conv search, fusions) and PyTorch equivalents, per-precision tolerances
- :mod:`helpers.subprocess_bench` -- run a benchmark in a fresh Python process with its own environment (OneFlow MLIR passes)
- :mod:`helpers.ceiling` -- this machine's matmul peak and a model's FLOPs
- :mod:`helpers.profiling` -- per-stage pipeline timing, PyTorch profiler tables and peak tensor memory
- :mod:`helpers.export` -- ONNX export and verification in one call, graph simplification and op counts, OneFlow to ONNX
- :mod:`helpers.journey` -- the capstone: step factors from the ledger, waterfall, decision guide
- :mod:`helpers.runtimes` -- ONNX Runtime sessions on the best usable provider (TensorRT > CUDA > CPU) and OpenVINO, one Runner API
- :mod:`helpers.quantization` -- INT8 post-training static quantization (ONNX Runtime QDQ, OpenVINO NNCF) and accuracy
- :mod:`helpers.training` -- a quick classifier-training recipe so accuracy means something (chapter 8)
- :mod:`helpers.plots` -- the course's matplotlib figures
- :mod:`helpers.ledger` -- the results ledger (JSON records of measurements)
- :mod:`helpers.reported` -- the case studies' published figures
- :mod:`helpers.serving` -- a real Triton server (bundled with nvidia-pytriton) started, queried and always stopped
- :mod:`helpers.serving_client` -- raw HTTP (like curl), KServe v2 bodies and HTTP/gRPC clients for that server
- :mod:`helpers.serving_repo` -- Triton model repositories and ``config.pbtxt`` checked with Triton's own schema
- :mod:`helpers.serving_load` -- bounded loopback load sweeps (closed-loop clients, perf_analyzer) and their plot

Modules import heavy frameworks lazily, so ``import helpers`` is cheap.
"""

__version__ = "0.1.0"
