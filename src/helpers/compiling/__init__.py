"""Static graphs and what compilers do to them (chapters 3-6).

- :mod:`~helpers.compiling.graphs` -- the one OneFlow ``nn.Graph`` inference wrapper, TorchScript/torch.compile routes
- :mod:`~helpers.compiling.graph_ops` -- op counts of compiled OneFlow graphs and torch.fx graphs
- :mod:`~helpers.compiling.inductor` -- TorchInductor's caches: compile from an empty one, time a fresh start
"""
