"""Where the time goes and how to get it back: profiling, roofline, batching, pipelining, the capstone ladder.

- :mod:`~helpers.perf.profiling` -- per-stage timing, PyTorch profiler tables, peak tensor memory
- :mod:`~helpers.perf.roofline` -- this machine's matmul peak and a model's FLOPs
- :mod:`~helpers.perf.batch_sweep` -- batch-size sweeps, thread counts, GPU utilisation
- :mod:`~helpers.perf.pipeline` -- two-stage load/infer pipelines (saved from chapter 5's page) with timelines
- :mod:`~helpers.perf.ladder` -- the capstone's speed-up ladder: step factors, waterfall, decision guide
"""
