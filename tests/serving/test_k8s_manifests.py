"""helpers.serving.k8s_manifests: the cluster manifests validate offline, and broken ones do not.

Built-in kinds are checked against kubernetes-validate's schemas, the Gateway API and NGINX Gateway
Fabric kinds against their vendored CRD schemas; the audit checks what the schemas cannot (the
allow-list, 429, the body limit, TLS, per-model readiness).
"""

from __future__ import annotations

import json

import pytest
import yaml

from helpers.serving import k8s_manifests as k8s

SETTINGS = dict(max_body_bytes=2_000_000, rate_per_s=200, burst=400)
KINDS = [
    "ClientSettingsPolicy",
    "Deployment",
    "GRPCRoute",
    "Gateway",
    "HTTPRoute",
    "HorizontalPodAutoscaler",
    "RateLimitPolicy",
    "Service",
]


def test_manifests_validate_and_pass_the_audit(tmp_path):
    objects = k8s.manifests(**SETTINGS)
    k8s.write_manifests(objects, tmp_path)
    checked = k8s.validate_manifests(tmp_path)
    assert sorted(kind.split("/")[0] for _, kind in checked) == KINDS
    assert k8s.audit_manifests(objects, max_body_bytes=SETTINGS["max_body_bytes"]) == []
    dep = yaml.safe_load((tmp_path / "triton-deployment.yaml").read_text())
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/models/embedder/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert "--strict-readiness=false" in container["args"]
    policy = yaml.safe_load((tmp_path / "policy-client-settings.yaml").read_text())
    assert policy["spec"]["body"]["maxSize"] == "1954k"


def test_the_vendored_schemas_name_their_source():
    vendored = json.loads(k8s.GATEWAY_SCHEMAS.read_text())
    assert set(vendored) == {
        "gateway.networking.k8s.io/v1/Gateway",
        "gateway.networking.k8s.io/v1/HTTPRoute",
        "gateway.networking.k8s.io/v1/GRPCRoute",
        "gateway.nginx.org/v1alpha1/ClientSettingsPolicy",
        "gateway.nginx.org/v1alpha1/RateLimitPolicy",
    }
    assert all(" v1.5.1 " in e["source"] or " v2.6.7 " in e["source"] for e in vendored.values())


def _set(path: list, value) -> callable:
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("file", "edit", "message"),
    [
        ("triton-deployment.yaml", lambda d: d["spec"].pop("selector"), "selector"),
        (
            "triton-deployment.yaml",
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].update(
                httpGet={"path": "/v2/health/ready", "prot": 8000}
            ),
            "port. is a required property",
        ),
        ("triton-service.yaml", _set(["spec", "ports", 0, "port"], "8000x"), "8000x"),
        ("triton-hpa.yaml", lambda d: d["spec"].pop("maxReplicas"), "maxReplicas"),
        ("gateway.yaml", _set(["spec", "listeners", 0, "protocol"], 443), "443"),
        ("gateway.yaml", _set(["spec", "listners"], []), "listners"),
        (
            "route-http.yaml",
            _set(["spec", "rules", 0, "matches", 0, "path", "type"], "Glob"),
            "Glob",
        ),
        ("route-grpc.yaml", _set(["spec", "rules", 0, "matches", 0, "method", "type"], "X"), "X"),
        ("policy-rate-limit.yaml", _set(["spec", "rateLimit", "rejectCode"], "429"), "integer"),
        ("policy-rate-limit.yaml", _set(["spec", "rateLimit", "rejectCode"], 200), "200"),
        ("policy-client-settings.yaml", _set(["spec", "body", "maxSize"], "2000000"), "2000000"),
    ],
)
def test_an_invalid_manifest_fails_validation(tmp_path, file, edit, message):
    k8s.write_manifests(k8s.manifests(**SETTINGS), tmp_path)
    doc = yaml.safe_load((tmp_path / file).read_text())
    edit(doc)
    (tmp_path / file).write_text(yaml.safe_dump(doc))
    with pytest.raises(k8s.ManifestError, match=message):
        k8s.validate_manifests(tmp_path)


@pytest.mark.parametrize(
    ("file", "edit", "problem"),
    [
        (
            "route-http.yaml",
            _set(["spec", "rules", 0, "matches", 0, "path"], {"type": "PathPrefix", "value": "/"}),
            "not exact path",
        ),
        (
            "route-grpc.yaml",
            _set(["spec", "rules", 0, "matches", 0, "method", "method"], "RepositoryModelLoad"),
            "off the allow-list",
        ),
        ("policy-rate-limit.yaml", _set(["spec", "rateLimit", "rejectCode"], 503), "429"),
        ("policy-client-settings.yaml", _set(["spec", "body", "maxSize"], "9999m"), "body limit"),
        ("gateway.yaml", _set(["spec", "listeners", 1, "protocol"], "HTTP"), "no TLS"),
    ],
)
def test_a_valid_but_unprotected_manifest_fails_the_audit(file, edit, problem):
    objects = k8s.manifests(**SETTINGS)
    edit(objects[file])
    problems = k8s.audit_manifests(objects, max_body_bytes=SETTINGS["max_body_bytes"])
    assert any(problem in p for p in problems), problems


def test_readiness_on_the_whole_server_fails_the_audit():
    objects = k8s.manifests(**SETTINGS)
    c = objects["triton-deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]
    c["readinessProbe"]["httpGet"]["path"] = "/v2/health/ready"
    assert "readiness is not the served model's" in k8s.audit_manifests(objects, max_body_bytes=2e6)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="replicas"):
        k8s.manifests(replicas=9, **SETTINGS)
    with pytest.raises(k8s.ManifestError, match="no"):
        k8s.validate_manifests(tmp_path)
    assert k8s.nginx_size(1000) == "1000" and k8s.nginx_size(125_000_000) == "120m"
