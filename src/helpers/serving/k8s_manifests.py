"""The Kubernetes manifests that run the production chapter's front + replicas on a cluster.

On one machine the chapter runs two Triton servers behind nginx. On a cluster the same split is:

- a Triton **Deployment** (N identical pods) whose readiness probe asks for the *model* it serves
  (``/v2/models/<name>/ready``), not the whole server: with ``--strict-readiness=true`` one other
  model that failed to load would make ``/v2/health/ready`` answer 400 for good and drain a pod
  that still serves; liveness is ``/v2/health/live``. Triton's administrative APIs answer only a
  key held in a Secret (``--http-restricted-api``, ``--grpc-restricted-protocol``);
- a **Service** in front of the pods (its gRPC port marked ``appProtocol: kubernetes.io/h2c``);
- a **HorizontalPodAutoscaler**;
- the front: the **Gateway API** (ingress-nginx, the annotation-driven controller, was retired in
  2026). A **Gateway** terminates TLS for HTTP and gRPC; an **HTTPRoute** and a **GRPCRoute** are
  the allow-list (only health, the model's metadata and readiness, and inference are routed; the
  Gateway answers anything else itself, 404, with no pod involved). Body size and rate limit are
  not in the Gateway API standard: they are policies of the implementation these manifests were
  written for, **NGINX Gateway Fabric** 2.6 (``ClientSettingsPolicy``: body size and slow-client
  timeout; ``RateLimitPolicy``: ``limit_req`` answering 429).

:func:`manifests` builds them as plain dictionaries; :func:`write_manifests` writes one YAML file
per object; :func:`validate_manifests` checks every object offline and strictly (unknown fields are
errors): built-in kinds against the Kubernetes schemas bundled in ``kubernetes-validate``, the
Gateway API and NGINX Gateway Fabric kinds against their CRD schemas vendored in
``k8s_schemas/gateway_api.json`` (Gateway API v1.5.1, NGINX Gateway Fabric v2.6.7; written by
``tools/vendor_gateway_schemas.py``). Schemas check structure, not intent: :func:`audit_manifests`
checks the protections the chapter teaches (allow-list, 429, body limit, TLS, per-model readiness).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from helpers.serving.triton_server import ADMIN_HEADER, RESTRICTED_APIS

__all__ = [
    "TRITON_IMAGE",
    "ManifestError",
    "audit_manifests",
    "manifests",
    "validate_manifests",
    "write_manifests",
]

K8S_VERSION = "1.33.0"  # a Kubernetes release whose schemas kubernetes-validate bundles
# A Triton with the HTTP hardening 2.51 lacks (--http-max-input-size, the huge-JSON crash fix,
# the decompression limit): NGC 26.01 is Triton 2.65. The local chapters run 2.51 (PyTriton).
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:26.01-py3"
GATEWAY_SCHEMAS = Path(__file__).with_name("k8s_schemas") / "gateway_api.json"
ALLOWED_GRPC_METHODS = ("ModelInfer", "ModelMetadata", "ModelReady", "ServerLive", "ServerReady")
_GRPC_SERVICE = "inference.GRPCInferenceService"
_CRD_GROUPS = ("gateway.networking.k8s.io", "gateway.nginx.org")  # validated by vendored schemas


class ManifestError(ValueError):
    """A manifest does not match its schema (the message names the file and the field)."""


def nginx_size(n_bytes: int) -> str:
    """``n_bytes`` as NGINX Gateway Fabric's size field takes it (at most 4 digits + k/m/g), rounded up."""
    for unit, scale in (("", 1), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30)):
        value = math.ceil(n_bytes / scale)
        if value <= 9999:
            return f"{value}{unit}"
    raise ValueError(f"{n_bytes} bytes is too large for a body limit")


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period_s,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def _deployment(name: str, image: str, repository: str, replicas: int, gpus: int) -> dict:
    labels = {"app": name}
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = gpus
    restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}=$(TRITON_ADMIN_KEY)"
    model_ready = f"/v2/models/{name}/ready"
    container = {
        "name": "triton",
        "image": image,
        "args": [
            "tritonserver",
            f"--model-repository={repository}",
            "--model-control-mode=explicit",
            f"--load-model={name}",
            # /v2/health/ready then means "the server answers"; routing waits on the model
            "--strict-readiness=false",
            f"--http-restricted-api={restricted}",
            f"--grpc-restricted-protocol={restricted}",
            "--allow-metrics=true",
            "--exit-timeout-secs=20",
        ],
        "env": [
            {
                "name": "TRITON_ADMIN_KEY",
                "valueFrom": {"secretKeyRef": {"name": f"{name}-triton-admin", "key": "key"}},
            }
        ],
        # the object store's credentials (AWS_ACCESS_KEY_ID, ...), from a Secret
        "envFrom": [{"secretRef": {"name": f"{name}-model-repository"}}],
        "ports": [
            {"name": "http", "containerPort": 8000},
            {"name": "grpc", "containerPort": 8001},
            {"name": "metrics", "containerPort": 8002},
        ],
        # ready: the model this pod serves is loaded; live: the process answers
        "readinessProbe": _probe(model_ready, 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "startupProbe": _probe(model_ready, 5, 60),  # up to 5 minutes to load
        "resources": resources,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{name}-triton", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8002"},
                },
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 30},
            },
        },
    }


def manifests(
    *,
    name: str = "embedder",
    image: str = TRITON_IMAGE,
    model_repository: str = "s3://my-bucket/model_repository",
    replicas: int = 2,
    max_replicas: int = 8,
    gpus_per_pod: int = 1,
    cpu_target_percent: int = 70,
    max_body_bytes: int,
    rate_per_s: int,
    burst: int,
    host: str = "embedder.example.com",
    gateway_class: str = "nginx",
) -> dict[str, dict[str, Any]]:
    """``{file name: object}``: Deployment, Service, HPA, Gateway, the two routes, two policies."""
    if replicas < 1 or max_replicas < replicas:
        raise ValueError(f"need 1 <= replicas <= max_replicas, got {replicas}, {max_replicas}")
    svc = f"{name}-triton"
    labels = {"app": name}
    deployment = _deployment(name, image, model_repository, replicas, gpus_per_pod)
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": svc, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [
                {
                    "name": p["name"],
                    "port": p["containerPort"],
                    "targetPort": p["name"],
                    # the Gateway speaks HTTP/2 without TLS (h2c) to Triton's gRPC port
                    **({"appProtocol": "kubernetes.io/h2c"} if p["name"] == "grpc" else {}),
                }
                for p in ports
            ],
        },
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": svc},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": svc},
            "minReplicas": replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": cpu_target_percent},
                    },
                }
            ],
        },
    }

    def listener(section: str, hostname: str) -> dict[str, Any]:
        return {
            "name": section,
            "protocol": "HTTPS",
            "port": 443,
            "hostname": hostname,
            "tls": {"mode": "Terminate", "certificateRefs": [{"name": f"{name}-tls"}]},
            "allowedRoutes": {"namespaces": {"from": "Same"}},
        }

    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name},
        "spec": {
            "gatewayClassName": gateway_class,
            "listeners": [listener("https", host), listener("grpc", f"grpc.{host}")],
        },
    }
    parent = lambda section: {"name": name, "sectionName": section}  # noqa: E731
    exact = lambda method, path: {"path": {"type": "Exact", "value": path}, "method": method}  # noqa: E731
    backend = lambda port: [{"name": svc, "port": port}]  # noqa: E731
    model = f"/v2/models/{name}"
    http_route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": f"{name}-http"},
        "spec": {
            "parentRefs": [parent("https")],
            "hostnames": [host],
            # the allow-list: no rule, no route (the Gateway answers 404 itself)
            "rules": [
                {
                    "matches": [
                        exact("GET", "/v2/health/live"),
                        exact("GET", "/v2/health/ready"),
                        exact("GET", model),
                        exact("GET", f"{model}/ready"),
                        exact("POST", f"{model}/infer"),
                    ],
                    "backendRefs": backend(8000),
                }
            ],
        },
    }
    grpc_route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GRPCRoute",
        "metadata": {"name": f"{name}-grpc"},
        "spec": {
            "parentRefs": [parent("grpc")],
            "hostnames": [f"grpc.{host}"],
            "rules": [
                {
                    "matches": [
                        {"method": {"type": "Exact", "service": _GRPC_SERVICE, "method": m}}
                        for m in ALLOWED_GRPC_METHODS
                    ],
                    "backendRefs": backend(8001),
                }
            ],
        },
    }
    target = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    client_settings = {
        "apiVersion": "gateway.nginx.org/v1alpha1",
        "kind": "ClientSettingsPolicy",
        "metadata": {"name": f"{name}-client-settings"},
        "spec": {
            "targetRef": target,
            # client_max_body_size and client_body_timeout, for both listeners
            "body": {"maxSize": nginx_size(max_body_bytes), "timeout": "10s"},
        },
    }
    rate_limit = {
        "apiVersion": "gateway.nginx.org/v1alpha1",
        "kind": "RateLimitPolicy",
        "metadata": {"name": f"{name}-rate-limit"},
        "spec": {
            "targetRefs": [target],
            "rateLimit": {
                "local": {
                    "rules": [
                        {
                            "key": "$binary_remote_addr",
                            "rate": f"{rate_per_s}r/s",
                            "burst": burst,
                            "noDelay": True,
                            "zoneSize": "10m",
                        }
                    ]
                },
                "rejectCode": 429,
            },
        },
    }
    return {
        "triton-deployment.yaml": deployment,
        "triton-service.yaml": service,
        "triton-hpa.yaml": hpa,
        "gateway.yaml": gateway,
        "route-http.yaml": http_route,
        "route-grpc.yaml": grpc_route,
        "policy-client-settings.yaml": client_settings,
        "policy-rate-limit.yaml": rate_limit,
    }


def write_manifests(objects: dict[str, dict[str, Any]], folder: str | Path) -> list[Path]:
    """One YAML file per object in ``folder``; returns the paths."""
    import yaml

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, obj in objects.items():
        path = out / file_name
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        paths.append(path)
    return paths


def _strict(schema: Any) -> Any:
    """A CRD schema where objects with listed properties admit no other field (kubectl --strict)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@lru_cache(maxsize=1)
def _crd_schemas() -> dict[str, dict[str, Any]]:
    vendored = json.loads(GATEWAY_SCHEMAS.read_text())
    return {kind: _strict(entry["schema"]) for kind, entry in vendored.items()}


def _validate_custom(doc: dict[str, Any]) -> None:
    import jsonschema

    key = f"{doc.get('apiVersion')}/{doc.get('kind')}"
    schema = _crd_schemas().get(key)
    if schema is None:
        raise ManifestError(f"no schema for {key} (vendored: {', '.join(_crd_schemas())})")
    if not isinstance(doc.get("metadata", {}).get("name"), str):
        raise ManifestError("metadata.name is required")
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path)
    )
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise ManifestError(f"{where}: {errors[0].message}")


def validate_manifests(folder: str | Path, version: str = K8S_VERSION) -> list[tuple[str, str]]:
    """Check every YAML document in ``folder`` against its schema (strict: unknown fields fail).

    Built-in kinds: the Kubernetes ``version`` schemas of ``kubernetes-validate``; Gateway API and
    NGINX Gateway Fabric kinds: the vendored CRD schemas (their CEL rules are not evaluated).
    Returns ``[(file, kind/name)]``; raises :class:`ManifestError` naming the file and the field.
    """
    import kubernetes_validate
    import yaml

    checked = []
    files = sorted(Path(folder).glob("*.yaml"))
    if not files:
        raise ManifestError(f"no *.yaml files in {folder}")
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            try:
                if str(doc.get("apiVersion", "")).split("/")[0].endswith(_CRD_GROUPS):
                    _validate_custom(doc)
                else:
                    kubernetes_validate.validate(doc, version, strict=True)
            except ManifestError as exc:
                raise ManifestError(f"{path.name}: {exc}") from exc
            except kubernetes_validate.ValidationError as exc:
                raise ManifestError(f"{path.name}: {str(exc).splitlines()[0]}") from exc
            checked.append((path.name, f"{doc['kind']}/{doc['metadata']['name']}"))
    return checked


def audit_manifests(objects: dict[str, dict[str, Any]], *, max_body_bytes: int) -> list[str]:
    """What the manifests lack of the chapter's protections (empty when all are there).

    The allow-list (routes match exact paths and methods only; no prefix), 429 from the rate
    limit, a body limit no larger than ``max_body_bytes`` rounded up, TLS on both listeners,
    readiness on the served model, Triton's administrative APIs restricted.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects.values():
        by_kind.setdefault(obj["kind"], []).append(obj)
    problems = []
    for route in by_kind.get("HTTPRoute", []):
        for rule in route["spec"]["rules"]:
            for m in rule.get("matches") or [{}]:
                if m.get("path", {}).get("type") != "Exact" or "method" not in m:
                    problems.append(
                        f"{route['metadata']['name']}: a match that is not exact path + method"
                    )
    for route in by_kind.get("GRPCRoute", []):
        for rule in route["spec"]["rules"]:
            for m in rule.get("matches") or [{}]:
                method = m.get("method", {})
                if (
                    method.get("type") != "Exact"
                    or method.get("method") not in ALLOWED_GRPC_METHODS
                ):
                    problems.append(f"{route['metadata']['name']}: a gRPC match off the allow-list")
    limits = [p["spec"]["rateLimit"] for p in by_kind.get("RateLimitPolicy", [])]
    if not limits or any(rl.get("rejectCode") != 429 for rl in limits):
        problems.append("the rate limit does not answer 429")
    sizes = [
        p["spec"].get("body", {}).get("maxSize") for p in by_kind.get("ClientSettingsPolicy", [])
    ]
    if not sizes or any(s != nginx_size(max_body_bytes) for s in sizes):
        problems.append(f"no body limit of {nginx_size(max_body_bytes)}")
    for gw in by_kind.get("Gateway", []):
        for lst in gw["spec"]["listeners"]:
            if lst.get("protocol") != "HTTPS" or not lst.get("tls", {}).get("certificateRefs"):
                problems.append(f"listener {lst['name']} has no TLS")
    for dep in by_kind.get("Deployment", []):
        c = dep["spec"]["template"]["spec"]["containers"][0]
        if not c["readinessProbe"]["httpGet"]["path"].startswith("/v2/models/"):
            problems.append("readiness is not the served model's")
        if not any(a.startswith("--http-restricted-api=") for a in c["args"]):
            problems.append("Triton's administrative APIs are not restricted")
    missing = {"Gateway", "HTTPRoute", "GRPCRoute", "Deployment"} - set(by_kind)
    problems += [f"no {kind}" for kind in sorted(missing)]
    return problems
