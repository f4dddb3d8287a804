"""A real Triton Inference Server, its model repositories, clients and load runs; the front before it.

- :mod:`~helpers.serving.triton_server` -- start, query and always stop a ``tritonserver`` process
- :mod:`~helpers.serving.triton_client` -- raw HTTP (like curl), KServe v2 bodies, HTTP/gRPC clients
- :mod:`~helpers.serving.triton_repo` -- model repositories and ``config.pbtxt`` checked with Triton's schema
- :mod:`~helpers.serving.triton_load` -- perf_analyzer and counted request runs on loopback
- :mod:`~helpers.serving.nginx_config` -- the front's nginx.conf: allow-list, body and rate limits, failover
- :mod:`~helpers.serving.nginx_front` -- nginx in front of several servers, run and probed
- :mod:`~helpers.serving.k8s_manifests` -- the same deployment as Kubernetes manifests, validated offline
- ``triton_models/`` -- the Python-backend ``model.py`` files Triton runs
"""
