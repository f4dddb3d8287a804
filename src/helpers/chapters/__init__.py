"""Chapter companions: code that exactly one chapter owns, one module per chapter that needs one.

- :mod:`~helpers.chapters.ch00_measuring` -- chapter 0's appendix: OneFlow's bundled OpenBLAS, per-thread CPU time
- :mod:`~helpers.chapters.ch02_alignment` -- aligned training in two frameworks (the report: ``helpers.porting.alignment``)
- :mod:`~helpers.chapters.ch03_static` -- eager vs static tables and figure, timings in the default math mode
- :mod:`~helpers.chapters.ch05_pipeline` -- two-stage load/infer pipelines (saved from chapter 5's page)
- :mod:`~helpers.chapters.ch05_report` -- chapter 5's tables, plots and generated sentences, from its timings
- :mod:`~helpers.chapters.ch06_switches` -- OneFlow graph switches (saved from chapter 6's page), MLIR ablation
- :mod:`~helpers.chapters.ch06_report` -- chapter 6's tables, ablation chart and generated sentences
- :mod:`~helpers.chapters.ch07_runtimes` -- chapter 7's embedder builder (saved from its page), wait-policy control, 224 px comparison
- :mod:`~helpers.chapters.ch07_report` -- chapter 7's tables and generated sentences, from its runs
- :mod:`~helpers.chapters.ch08_cpu_target` -- every CPU route to ResNet-101 side by side (also ``tools/bench_cpu_deploy.py``)
- :mod:`~helpers.chapters.ch08_report` -- chapter 8's tables and generated sentences, from its timings
- :mod:`~helpers.chapters.ch09_report` -- chapter 9's load-sweep figure, its sentences and summary table
- :mod:`~helpers.chapters.ch10_ladder` -- the capstone's speed-up ladder: test images, ladder table, step factors
- :mod:`~helpers.chapters.ch10_report` -- chapter 10's waterfall, checks table and generated sentences

Nothing else in the package imports these modules (a test checks it); notebooks and ``tools/`` may.
"""
