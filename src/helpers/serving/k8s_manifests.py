"""The Kubernetes manifests that run chapter 9's front + replicas split on a cluster, validated offline.

On one machine the chapter runs two Triton servers behind nginx. On a cluster the same split is a
Triton **Deployment** (N identical pods, each probed on ``/v2/health/ready`` and
``/v2/health/live``), a **Service** in front of the pods, a **HorizontalPodAutoscaler** that adds
pods under load, and an **Ingress** (ingress-nginx: the same nginx, configured by annotations)
that limits request size and rate and retries a failed request on another pod.

:func:`manifests` builds them as plain dictionaries; :func:`write_manifests` writes one YAML file
per object; :func:`validate_manifests` checks every object against the Kubernetes OpenAPI schemas
bundled in ``kubernetes-validate`` (offline, strict: unknown fields are errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.serving.triton_repo import NGC_IMAGE

__all__ = [
    "K8S_VERSION",
    "ManifestError",
    "manifests",
    "validate_manifests",
    "write_manifests",
]

K8S_VERSION = "1.33.0"  # a Kubernetes release whose schemas kubernetes-validate bundles


class ManifestError(ValueError):
    """A manifest does not match the Kubernetes schema (the message names the file and field)."""


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period_s,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def manifests(
    *,
    name: str = "embedder",
    image: str = NGC_IMAGE,
    model_repository: str = "s3://my-bucket/model_repository",
    replicas: int = 2,
    max_replicas: int = 8,
    gpus_per_pod: int = 1,
    cpu_target_percent: int = 70,
    max_body_bytes: int,
    rate_per_s: int,
    burst: int,
    host: str = "embedder.example.com",
) -> dict[str, dict[str, Any]]:
    """``{file name: object}`` for the Triton Deployment, Service, HPA and the two Ingresses."""
    if replicas < 1 or max_replicas < replicas:
        raise ValueError(f"need 1 <= replicas <= max_replicas, got {replicas}, {max_replicas}")
    labels = {"app": name}
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {}}
    if gpus_per_pod:
        resources["limits"]["nvidia.com/gpu"] = gpus_per_pod
    container = {
        "name": "triton",
        "image": image,
        "args": [
            "tritonserver",
            f"--model-repository={model_repository}",
            "--allow-metrics=true",
            "--strict-readiness=true",
            "--exit-timeout-secs=20",
        ],
        "ports": [
            {"name": "http", "containerPort": 8000},
            {"name": "grpc", "containerPort": 8001},
            {"name": "metrics", "containerPort": 8002},
        ],
        # ready: every model loaded (a pod gets no traffic before); live: the process answers
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "startupProbe": _probe("/v2/health/ready", 5, 60),  # up to 5 minutes to load models
        "resources": resources,
    }
    deployment = {
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
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-triton", "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]}
                for p in container["ports"]
            ],
        },
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{name}-triton"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": f"{name}-triton",
            },
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

    def ingress(kind: str, port: str, extra: dict[str, str]) -> dict[str, Any]:
        annotations = {
            "nginx.ingress.kubernetes.io/proxy-body-size": str(max_body_bytes),
            "nginx.ingress.kubernetes.io/limit-rps": str(rate_per_s),
            "nginx.ingress.kubernetes.io/limit-burst-multiplier": str(max(1, burst // rate_per_s)),
            "nginx.ingress.kubernetes.io/proxy-next-upstream": (
                "error timeout http_502 http_503 non_idempotent"
            ),
            "nginx.ingress.kubernetes.io/proxy-next-upstream-tries": "2",
            **extra,
        }
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": f"{name}-{kind}", "annotations": annotations},
            "spec": {
                "ingressClassName": "nginx",
                "rules": [
                    {
                        "host": f"{kind}.{host}" if kind == "grpc" else host,
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {
                                        "service": {
                                            "name": f"{name}-triton",
                                            "port": {"name": port},
                                        }
                                    },
                                }
                            ]
                        },
                    }
                ],
            },
        }

    # model control (load/unload) stays inside the cluster, like the local front's 403
    deny = {"nginx.ingress.kubernetes.io/server-snippet": "location /v2/repository { return 403; }"}
    grpc = {"nginx.ingress.kubernetes.io/backend-protocol": "GRPC"}
    return {
        "triton-deployment.yaml": deployment,
        "triton-service.yaml": service,
        "triton-hpa.yaml": hpa,
        "ingress-http.yaml": ingress("http", "http", deny),
        "ingress-grpc.yaml": ingress("grpc", "grpc", grpc),
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


def validate_manifests(folder: str | Path, version: str = K8S_VERSION) -> list[tuple[str, str]]:
    """Check every YAML document in ``folder`` against the Kubernetes ``version`` schemas (strict).

    Offline: the schemas ship inside ``kubernetes-validate``. Returns ``[(file, kind/name)]``;
    raises :class:`ManifestError` naming the file and the field for the first invalid object.
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
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise ManifestError(f"{path.name}: {str(exc).splitlines()[0]}") from exc
            checked.append((path.name, f"{doc['kind']}/{doc['metadata']['name']}"))
    return checked
