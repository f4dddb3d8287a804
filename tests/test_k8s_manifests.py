"""helpers.serving.k8s_manifests: the cluster manifests validate offline, and broken ones do not."""

from __future__ import annotations

import pytest
import yaml

from helpers.serving import k8s_manifests as k8s

SETTINGS = dict(max_body_bytes=2_000_000, rate_per_s=200, burst=400)


def test_manifests_validate_against_the_kubernetes_schemas(tmp_path):
    paths = k8s.write_manifests(k8s.manifests(**SETTINGS), tmp_path)
    checked = k8s.validate_manifests(tmp_path)
    kinds = sorted(kind.split("/")[0] for _, kind in checked)
    assert kinds == ["Deployment", "HorizontalPodAutoscaler", "Ingress", "Ingress", "Service"]
    assert len(paths) == 5
    dep = yaml.safe_load((tmp_path / "triton-deployment.yaml").read_text())
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert "--allow-metrics=true" in container["args"]
    ing = yaml.safe_load((tmp_path / "ingress-http.yaml").read_text())
    notes = ing["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-body-size"] == "2000000"
    assert "non_idempotent" in notes["nginx.ingress.kubernetes.io/proxy-next-upstream"]


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
        ("triton-service.yaml", lambda d: d["spec"]["ports"][0].update(port="8000x"), "8000x"),
        ("triton-hpa.yaml", lambda d: d["spec"].pop("maxReplicas"), "maxReplicas"),
        ("ingress-http.yaml", lambda d: d["spec"]["rules"][0].update(hots="x"), "hots"),
    ],
)
def test_an_invalid_manifest_fails_validation(tmp_path, file, edit, message):
    k8s.write_manifests(k8s.manifests(**SETTINGS), tmp_path)
    doc = yaml.safe_load((tmp_path / file).read_text())
    edit(doc)
    (tmp_path / file).write_text(yaml.safe_dump(doc))
    with pytest.raises(k8s.ManifestError, match=message):
        k8s.validate_manifests(tmp_path)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="replicas"):
        k8s.manifests(replicas=3, max_replicas=2, **SETTINGS)
    with pytest.raises(k8s.ManifestError, match="no"):
        k8s.validate_manifests(tmp_path)
