"""Write the Gateway API schemas that helpers.serving.k8s_manifests validates against, offline.

kubernetes-validate bundles the schemas of Kubernetes' built-in kinds only. The Gateway API kinds
(Gateway, HTTPRoute, GRPCRoute) and the two NGINX Gateway Fabric policies the production chapter
uses (ClientSettingsPolicy: body size and slow-client timeout; RateLimitPolicy: 429) are custom
resources: their schemas are the ``openAPIV3Schema`` of each CustomResourceDefinition. This script
takes those from the CRD files of two released tags and writes them, descriptions dropped, to
``src/helpers/serving/k8s_schemas/gateway_api.json``:

- kubernetes-sigs/gateway-api ``v1.5.1``, ``config/crd/standard/``: Gateway, HTTPRoute, GRPCRoute
  (``gateway.networking.k8s.io/v1``);
- nginx/nginx-gateway-fabric ``v2.6.7`` (built against Gateway API v1.5.1),
  ``config/crd/bases/``: ClientSettingsPolicy, RateLimitPolicy (``gateway.nginx.org/v1alpha1``).

Usage (with local clones of both repositories at those tags)::

    python tools/vendor_gateway_schemas.py GATEWAY_API_CLONE NGF_CLONE

Run once; the JSON is committed. The network here reaches package registries only, which carry no
copy of these CRDs as schemas, so the CRD files were read from clones of the two repositories.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

GATEWAY_API = ("v1.5.1", "config/crd/standard/gateway.networking.k8s.io_{}.yaml")
NGF = ("v2.6.7", "config/crd/bases/gateway.nginx.org_{}.yaml")
KINDS = [
    (GATEWAY_API, "gateways", "v1"),
    (GATEWAY_API, "httproutes", "v1"),
    (GATEWAY_API, "grpcroutes", "v1"),
    (NGF, "clientsettingspolicies", "v1alpha1"),
    (NGF, "ratelimitpolicies", "v1alpha1"),
]
OUT = Path(__file__).resolve().parents[1] / "src/helpers/serving/k8s_schemas/gateway_api.json"


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main(gateway_api_clone: str, ngf_clone: str) -> None:
    clones = {GATEWAY_API: gateway_api_clone, NGF: ngf_clone}
    schemas = {}
    for source, plural, version in KINDS:
        tag, pattern = source
        path = pattern.format(plural)
        text = subprocess.run(
            ["git", "-C", clones[source], "show", f"{tag}:{path}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        crd = yaml.safe_load(text)
        spec = crd["spec"]
        (entry,) = [v for v in spec["versions"] if v["name"] == version]
        key = f"{spec['group']}/{version}/{spec['names']['kind']}"
        schemas[key] = {
            "source": f"{'kubernetes-sigs/gateway-api' if source is GATEWAY_API else 'nginx/nginx-gateway-fabric'} "
            f"{tag} {path}",
            "schema": _strip(entry["schema"]["openAPIV3Schema"]),
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(schemas, indent=None, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB): {', '.join(schemas)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
