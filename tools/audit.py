"""`make audit`: known vulnerabilities of the course's environment, and what could not be checked.

Runs pip-audit (installed by the Makefile in a small venv of its own) over the installed environment
(``--python``: every distribution in that Python's site-packages) or over requirements.txt's pins
(``--requirements``: the pins only, not their dependencies), reads its JSON report and prints:

- each vulnerability found, with its aliases and the release that fixes it, marked *accepted* when the
  course's pins cannot avoid it (``ACCEPTED``, with the reason requirements.txt also gives);
- every package pip-audit could not check. pip-audit itself prints "No known vulnerabilities found"
  and exits 0 when the service answered "not found" for every package, which is what a machine that
  reaches a package index but not pypi.org's per-release JSON API (a mirror, a registry proxy) gets.
  Here that is a failure with its reason, never a clean bill;
- what no pip-audit run covers: Python itself, the Triton server binary inside nvidia-pytriton, the
  system packages.

Exit status: 0 nothing found beyond the accepted; 1 a vulnerability that is not accepted; 2 the audit
is incomplete (a service that cannot be reached, packages not checked). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ACCEPTED", "NOT_COVERED", "OWN_PACKAGE", "verdict", "main"]

# The course's own package (pyproject.toml's name): installed editable, never on PyPI.
OWN_PACKAGE = "fast-inference-course-helpers"

# Vulnerabilities the pins cannot avoid, by package and pinned version: why, and what the course exposes.
# requirements.txt says the same beside the pin (tests/tools/test_setup_scripts.py keeps the two together).
ACCEPTED: dict[str, tuple[str, str]] = {
    "onnx": (
        "1.17.0",
        "the fixes (onnx 1.21) need protobuf >= 4.25.1 and OneFlow 0.9.0 needs protobuf 3.20; the course "
        "loads only ONNX files it wrote itself (no external data): load no one else's ONNX file here",
    ),
    "protobuf": (
        "3.20.3",
        "OneFlow 0.9.0 fails to import with protobuf 4 or newer; the wheel runs the C++ implementation, "
        "and the course parses only messages it wrote itself",
    ),
}

NOT_COVERED = (
    "Python itself: 3.10 reached its end of life in October 2026 and gets no security fixes "
    "(OneFlow 0.9.0, the last OneFlow on PyPI, has wheels for 3.7-3.10 only)",
    "the Triton server inside nvidia-pytriton 0.7.0 (Triton 2.51, 2024): its HTTP fixes came in "
    "2.59-2.74; chapter 9 keeps it on loopback, behind nginx's body limit",
    "system packages (nginx, libb64, Chromium): your distribution's security updates (apt-get upgrade)",
)

UNREACHABLE = (
    "ConnectionError",
    "NameResolutionError",
    "Max retries exceeded",
    "Failed to resolve",
    "Temporary failure in name resolution",
    "timed out",
    "ConnectTimeout",
    "ProxyError",
    "SSLError",
)
SERVICE_NEEDS = {
    "pypi": "pypi.org's per-release JSON API (https://pypi.org/pypi/<name>/<version>/json)",
    "osv": "api.osv.dev (https://api.osv.dev/v1/query)",
}


def site_dirs(python: str) -> list[str]:
    """The site-packages folders of another Python (the course's environment)."""
    code = (
        "import json, sysconfig; p = sysconfig.get_paths(); "
        "print(json.dumps(sorted({p['purelib'], p['platlib']})))"
    )
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


def verdict(report: dict, service: str = "pypi") -> tuple[int, list[str]]:
    """Exit status and the lines to print for one pip-audit JSON report."""
    deps = [d for d in report.get("dependencies", []) if d.get("name") != OWN_PACKAGE]
    skipped = [d for d in deps if "skip_reason" in d]
    audited = [d for d in deps if "skip_reason" not in d]
    found, accepted, accepted_names = [], [], set()
    for dep in audited:
        for vuln in dep.get("vulns") or []:
            ids = ", ".join([vuln.get("id", "?"), *vuln.get("aliases", [])])
            fixed = ", ".join(vuln.get("fix_versions") or []) or "no fix released"
            line = f"{dep['name']} {dep.get('version', '?')}: {ids} (fixed in {fixed})"
            pin = ACCEPTED.get(dep["name"].lower())
            if pin and pin[0] == dep.get("version"):
                accepted.append(f"  accepted  {line}")
                accepted_names.add(dep["name"].lower())
            else:
                found.append(f"  FOUND     {line}")
    lines = [f"audit: {len(audited)} of {len(deps)} packages checked against the {service} service"]
    lines += found + accepted
    lines += [f"  why {n} is accepted: {ACCEPTED[n][1]}" for n in sorted(accepted_names)]
    if skipped:
        lines.append(
            f"  NOT CHECKED ({len(skipped)}): " + ", ".join(d["name"] for d in skipped[:12])
        )
        lines.append(f"    e.g. {skipped[0]['skip_reason']}")
    lines.append("not covered by any pip-audit run:")
    lines += [f"  - {item}" for item in NOT_COVERED]
    if deps and len(skipped) == len(deps):
        lines.append(
            f"audit: NOTHING WAS CHECKED: every package came back 'not found' from {service}, which is "
            f"what a machine that reaches a package index but not {SERVICE_NEEDS.get(service, service)} "
            "gets. pip-audit itself reports 'No known vulnerabilities found' here: that is not a "
            "result. Run make audit where that service is reachable."
        )
        return 2, lines
    if skipped:
        lines.append(f"audit: INCOMPLETE: {len(skipped)} package(s) could not be checked (above).")
        return 2, lines
    if found:
        lines.append(f"audit: {len(found)} known vulnerabilit(ies) not accepted (FOUND above).")
        return 1, lines
    lines.append(
        "audit: no known vulnerabilities beyond the accepted ones"
        if accepted
        else "audit: no known vulnerabilities"
    )
    return 0, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pip-audit", required=True, help="the pip-audit executable")
    ap.add_argument("--service", default="pypi", choices=sorted(SERVICE_NEEDS))
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--python", help="audit everything installed for this Python")
    what.add_argument("--requirements", help="audit the pins of this requirements file")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [args.pip_audit, "-s", args.service, "-f", "json", "-o", str(out)]
        cmd += ["--progress-spinner", "off", "--desc", "off", "--aliases", "on", "--timeout", "30"]
        if args.python:
            for d in site_dirs(args.python):
                cmd += ["--path", d]
            print(f"audit: the packages installed for {args.python}")
        else:
            cmd += ["--disable-pip", "--no-deps", "-r", args.requirements]
            print(
                f"audit: the pins of {args.requirements} (not installed yet: not their dependencies)"
            )
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"audit: pip-audit did not finish in {args.timeout} s: nothing was checked")
            return 2
        report = json.loads(out.read_text()) if out.exists() and out.stat().st_size else None
    if report is None:
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        if any(word in (run.stderr + run.stdout) for word in UNREACHABLE):
            print(
                f"audit: NOTHING WAS CHECKED: pip-audit could not reach "
                f"{SERVICE_NEEDS.get(args.service, args.service)} from this machine."
            )
        else:
            print(f"audit: pip-audit failed (exit {run.returncode}): nothing was checked.")
        print("  " + "\n  ".join(tail))
        return 2
    status, lines = verdict(report, args.service)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
