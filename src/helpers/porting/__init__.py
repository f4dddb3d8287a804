"""Moving a model from PyTorch to OneFlow (case study 1, chapters 1-2).

- :mod:`~helpers.porting.migration` -- import rewriting, mock_torch imports, missing-API scan
- :mod:`~helpers.porting.alignment` -- precision alignment reports and aligned training in two frameworks
"""
