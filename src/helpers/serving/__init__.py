"""A real Triton Inference Server, its model repositories, clients and load runs (chapter 9).

- :mod:`~helpers.serving.triton_server` -- start, query and always stop a ``tritonserver`` process
- :mod:`~helpers.serving.triton_client` -- raw HTTP (like curl), KServe v2 bodies, HTTP/gRPC clients
- :mod:`~helpers.serving.triton_repo` -- model repositories and ``config.pbtxt`` checked with Triton's schema
- :mod:`~helpers.serving.triton_load` -- bounded loopback load sweeps and their plot
- ``triton_models/`` -- the Python-backend ``model.py`` files Triton runs
"""
