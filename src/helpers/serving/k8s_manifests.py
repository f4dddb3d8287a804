"""The Kubernetes manifests that run the production chapter's front + replicas on a cluster.

A Triton **Deployment** whose readiness probe asks for the *model* it serves (with
``--strict-readiness=true`` one other model that failed to load makes ``/v2/health/ready`` answer
400 for good and drains a pod that still serves), its administrative APIs keyed by a Secret; a
**Service** (gRPC port ``appProtocol: kubernetes.io/h2c``) and a **HorizontalPodAutoscaler**. The
front is the **Gateway API** (ingress-nginx was retired in 2026): a **Gateway** terminating TLS, an
**HTTPRoute** and a **GRPCRoute** as the allow-list (anything else: 404 from the Gateway); body
size and rate limit are **NGINX Gateway Fabric** 2.6 policies, not Gateway API standard.

:func:`validate_manifests` checks every object offline and strictly (unknown fields fail):
built-in kinds with ``kubernetes-validate``, the others against ``k8s_schemas/gateway_api.json``
(Gateway API v1.5.1, NGINX Gateway Fabric v2.6.7; ``tools/vendor_gateway_schemas.py``). Schemas
check structure, not intent: :func:`audit_manifests` checks the protections the chapter teaches.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from helpers.serving.nginx_config import ALLOWED_GRPC, GRPC_SERVICE
from helpers.serving.triton_server import restricted_api_args

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
MODEL_REPOSITORY = "s3://my-bucket/model_repository"
HOST = "embedder.example.com"
GATEWAY_SCHEMAS = Path(__file__).with_name("k8s_schemas") / "gateway_api.json"
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


PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
GATEWAY_API, NGF = (
    "gateway.networking.k8s.io/v1",
    "gateway.nginx.org/v1alpha1",
)  # NGINX Gateway Fabric


def _container(name: str) -> dict[str, Any]:
    """The Triton container: restricted administrative APIs, readiness on the served model."""
    model_ready = f"/v2/models/{name}/ready"
    secret = {"secretKeyRef": {"name": f"{name}-triton-admin", "key": "key"}}
    return {
        "name": "triton",
        "image": TRITON_IMAGE,
        "args": [
            "tritonserver",
            f"--model-repository={MODEL_REPOSITORY}",
            "--model-control-mode=explicit",
            f"--load-model={name}",
            # /v2/health/ready then means "the server answers"; routing waits on the model
            "--strict-readiness=false",
            *restricted_api_args("$(TRITON_ADMIN_KEY)"),
            "--allow-metrics=true",
            "--exit-timeout-secs=20",
        ],
        "env": [{"name": "TRITON_ADMIN_KEY", "valueFrom": secret}],
        # the object store's credentials (AWS_ACCESS_KEY_ID, ...), from a Secret
        "envFrom": [{"secretRef": {"name": f"{name}-model-repository"}}],
        "ports": [{"name": port, "containerPort": number} for port, number in PORTS.items()],
        # ready: the model this pod serves is loaded; live: the process answers
        "readinessProbe": _probe(model_ready, 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "startupProbe": _probe(model_ready, 5, 60),  # up to 5 minutes to load
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": 1}},
    }


def manifests(
    *,
    name: str = "embedder",
    replicas: int = 2,
    max_body_bytes: int,
    rate_per_s: int,
    burst: int,
) -> dict[str, dict[str, Any]]:
    """``{file name: object}``: Deployment, Service, HPA, Gateway, the two routes, two policies.

    One GPU per pod; the HPA adds pods from ``replicas`` to 8 above 70% CPU.
    """
    if not 1 <= replicas <= 8:
        raise ValueError(f"need 1 <= replicas <= 8 (the autoscaler's maximum), got {replicas}")
    svc, labels, model = f"{name}-triton", {"app": name}, f"/v2/models/{name}"
    scraped = {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORTS["metrics"])}
    pod = {
        "metadata": {"labels": labels, "annotations": scraped},
        "spec": {"containers": [_container(name)], "terminationGracePeriodSeconds": 30},
    }
    deployment_spec = {"replicas": replicas, "selector": {"matchLabels": labels}, "template": pod}
    service_ports = [
        {"name": port, "port": number, "targetPort": port}
        # the Gateway speaks HTTP/2 without TLS (h2c) to Triton's gRPC port
        | ({"appProtocol": "kubernetes.io/h2c"} if port == "grpc" else {})
        for port, number in PORTS.items()
    ]
    cpu = {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    hpa_spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": svc},
        "minReplicas": replicas,
        "maxReplicas": 8,
        "metrics": [{"type": "Resource", "resource": cpu}],
    }
    tls = {"mode": "Terminate", "certificateRefs": [{"name": f"{name}-tls"}]}
    hosts = {"https": HOST, "grpc": f"grpc.{HOST}"}
    listeners = [
        {"name": section, "protocol": "HTTPS", "port": 443, "hostname": host, "tls": tls}
        | {"allowedRoutes": {"namespaces": {"from": "Same"}}}
        for section, host in hosts.items()
    ]
    gateway_spec = {"gatewayClassName": "nginx", "listeners": listeners}

    def route(section: str, matches: list[dict[str, Any]], port: int) -> dict[str, Any]:
        # the allow-list: no rule, no route (the Gateway answers 404 itself)
        rule = {"matches": matches, "backendRefs": [{"name": svc, "port": port}]}
        parent = {"name": name, "sectionName": section}
        return {"parentRefs": [parent], "hostnames": [hosts[section]], "rules": [rule]}

    http_paths = [("GET", "/v2/health/live"), ("GET", "/v2/health/ready"), ("GET", model)]
    http_paths += [("GET", f"{model}/ready"), ("POST", f"{model}/infer")]
    http = [{"path": {"type": "Exact", "value": p}, "method": m} for m, p in http_paths]
    grpc = [
        {"method": {"type": "Exact", "service": GRPC_SERVICE, "method": m}} for m in ALLOWED_GRPC
    ]
    target = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    # client_max_body_size and client_body_timeout, for both listeners
    body = {"maxSize": nginx_size(max_body_bytes), "timeout": "10s"}
    limit = {"key": "$binary_remote_addr", "rate": f"{rate_per_s}r/s", "burst": burst}
    limit |= {"noDelay": True, "zoneSize": "10m"}
    rates = {"local": {"rules": [limit]}, "rejectCode": 429}
    service = {"selector": labels, "ports": service_ports}
    table = [  # (file, apiVersion, kind, name suffix, spec)
        ("triton-deployment.yaml", "apps/v1", "Deployment", "-triton", deployment_spec),
        ("triton-service.yaml", "v1", "Service", "-triton", service),
        ("triton-hpa.yaml", "autoscaling/v2", "HorizontalPodAutoscaler", "-triton", hpa_spec),
        ("gateway.yaml", GATEWAY_API, "Gateway", "", gateway_spec),
        ("route-http.yaml", GATEWAY_API, "HTTPRoute", "-http", route("https", http, 8000)),
        ("route-grpc.yaml", GATEWAY_API, "GRPCRoute", "-grpc", route("grpc", grpc, 8001)),
        ("policy-client-settings.yaml", NGF, "ClientSettingsPolicy", "-client-settings",
         {"targetRef": target, "body": body}),
        ("policy-rate-limit.yaml", NGF, "RateLimitPolicy", "-rate-limit",
         {"targetRefs": [target], "rateLimit": rates}),
    ]  # fmt: skip
    labelled = ("Deployment", "Service")
    return {
        file: {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": name + suffix} | ({"labels": labels} if kind in labelled else {}),
            "spec": spec,
        }
        for file, api, kind, suffix, spec in table
    }


def write_manifests(objects: dict[str, dict[str, Any]], folder: str | Path) -> None:
    """One YAML file per object in ``folder``."""
    import yaml

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for file_name, obj in objects.items():
        (out / file_name).write_text(yaml.safe_dump(obj, sort_keys=False))


def _strict(schema: Any) -> Any:
    """A CRD schema where objects with listed properties admit no other field (kubectl --strict)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
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
    """``[(file, kind/name)]`` of every YAML document in ``folder``, each checked strictly against
    its schema (Kubernetes ``version``'s, or the vendored CRD's: their CEL rules not evaluated);
    :class:`ManifestError` names the file and the field."""
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


def _allowed(kind: str, match: dict[str, Any]) -> bool:
    """An HTTPRoute match of an exact path and method, a GRPCRoute match of an allowed method."""
    if kind == "HTTPRoute":
        return match.get("path", {}).get("type") == "Exact" and "method" in match
    method = match.get("method", {})
    return method.get("type") == "Exact" and method.get("method") in ALLOWED_GRPC


def audit_manifests(objects: dict[str, dict[str, Any]], *, max_body_bytes: int) -> list[str]:
    """What the manifests lack of the chapter's protections (empty when all are there): exact
    routes only, 429, the body limit, TLS, the served model's readiness, restricted admin APIs."""

    def of(*kinds: str) -> list[dict[str, Any]]:
        return [obj for obj in objects.values() if obj["kind"] in kinds]

    routes = [
        (route["kind"], route["metadata"]["name"], m)
        for route in of("HTTPRoute", "GRPCRoute")
        for rule in route["spec"]["rules"]
        for m in rule.get("matches") or [{}]
    ]
    listeners = [lst for gw in of("Gateway") for lst in gw["spec"]["listeners"]]
    pods = [d["spec"]["template"]["spec"]["containers"][0] for d in of("Deployment")]
    codes = {p["spec"]["rateLimit"].get("rejectCode") for p in of("RateLimitPolicy")}
    sizes = {p["spec"].get("body", {}).get("maxSize") for p in of("ClientSettingsPolicy")}
    size = nginx_size(max_body_bytes)
    problems = [
        f"{name}: a match that is not exact path + method"
        if kind == "HTTPRoute"
        else f"{name}: a gRPC match off the allow-list"
        for kind, name, m in routes
        if not _allowed(kind, m)
    ]
    problems += [
        f"listener {lst['name']} has no TLS"
        for lst in listeners
        if lst.get("protocol") != "HTTPS" or not lst.get("tls", {}).get("certificateRefs")
    ]
    checks = {
        "the rate limit does not answer 429": codes != {429},
        f"no body limit of {size}": sizes != {size},
        "readiness is not the served model's": any(
            not c["readinessProbe"]["httpGet"]["path"].startswith("/v2/models/") for c in pods
        ),
        "Triton's administrative APIs are not restricted": any(
            not any(a.startswith("--http-restricted-api=") for a in c["args"]) for c in pods
        ),
    }
    problems += [why for why, missing in checks.items() if missing]
    needed = {"Gateway", "HTTPRoute", "GRPCRoute", "Deployment"}
    present = {obj["kind"] for obj in objects.values()}
    return problems + [f"no {kind}" for kind in sorted(needed - present)]
