"""Moving a model from PyTorch to OneFlow (case study 1, chapters 1-3).

- :mod:`~helpers.porting.migration` -- import rewriting, mock_torch imports, missing-API scan
- :mod:`~helpers.porting.alignment` -- a port's outputs against the original's: errors, cosine, top-k
"""
