#!/usr/bin/env bash
# The GPU check: tests/gpu (every GPU branch that does not need OneFlow) and the precision policy's
# tests, run with the machine's own python3 (torch, numpy and pytest are enough; torchvision and
# onnxruntime are used when present), then a summary: machine, versions, pass/skip/fail counts,
# each skip's reason, each failure's first line, and the numbers the tests measured.
#
#   bash tools/gpu_check.sh [SUMMARY]   # default results/reference/gpu_check/summary.txt
#
# It stays within 8 minutes on a lent GPU: pytest gets GPU_CHECK_TIMEOUT seconds (default 420),
# then an interrupt (pytest still writes what it ran; the summary says the check was cut short).
#
# PYTHON overrides the interpreter. Without it: python3 if it can import torch, else the course's
# .venv/bin/python. Exits with pytest's exit code. On a machine without a CUDA GPU every GPU test
# skips with one line saying why.
set -u
cd "$(dirname "$0")/.."
summary=${1:-results/reference/gpu_check/summary.txt}
mkdir -p "$(dirname "$summary")"

py=${PYTHON:-}
if [ -z "$py" ]; then
  py=python3
  if ! python3 -c "import torch" >/dev/null 2>&1 && [ -x .venv/bin/python ]; then
    py=.venv/bin/python
  fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
# --confcutdir: only tests/gpu's conftest, not the course's (nbval, matplotlib), which a bare
# python3 may not have. The JSON collects what each test measured (tests/gpu/conftest.py).
cmd=("$py" -m pytest -q -rs -p no:cacheprovider --confcutdir=tests/gpu
  --junitxml="$work/junit.xml" tests/gpu tests/core/test_precision.py)
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export GPU_CHECK_RECORD="$work/measured.json"
limit=${GPU_CHECK_TIMEOUT:-420}
start=$(date +%s)
if command -v timeout >/dev/null 2>&1; then
  timeout --signal=INT --kill-after=30 "$limit" "${cmd[@]}"
else
  "${cmd[@]}"
fi
code=$?
seconds=$(( $(date +%s) - start ))
cut=""
if [ "$code" = 124 ] || [ "$code" = 137 ] || [ "$code" = 2 -a "$seconds" -ge "$limit" ]; then
  cut="cut short after ${limit} s (GPU_CHECK_TIMEOUT): the tests after the last one listed did not run"
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
  | paste -sd ';' -)
"$py" - "$work/junit.xml" "$GPU_CHECK_RECORD" "$summary" "$code" "$seconds" "${gpu:-none (no nvidia-smi)}" \
  "${cmd[*]}" "$cut" <<'EOF'
import datetime
import json
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

junit, measured, summary, code, seconds, gpu, command, cut = sys.argv[1:9]


def version(name):
    try:
        module = __import__(name)
    except Exception as err:  # absent or broken: say so
        return f"not importable ({type(err).__name__})"
    return getattr(module, "__version__", "?")


lines = [
    f"GPU check, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {seconds} s",
    f"GPU: {gpu}",
    f"python {platform.python_version()} on {platform.platform()}",
]
try:
    import torch

    cuda = torch.cuda.is_available()
    lines.append(
        f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
        f"{torch.backends.cudnn.version() if cuda else 'n/a'}), "
        f"torch.cuda.is_available() = {cuda}"
        + (f", capability {torch.cuda.get_device_capability()}" if cuda else "")
    )
except Exception as err:
    lines.append(f"torch: not importable ({type(err).__name__}: {err})")
ort = version("onnxruntime")
if not ort.startswith("not"):
    import onnxruntime

    ort += f" (providers: {', '.join(onnxruntime.get_available_providers())})"
lines += [
    f"numpy {version('numpy')}, torchvision {version('torchvision')}, onnxruntime {ort}",
    f"command: PYTHONPATH=src {command}",
]

passed, skipped, failed = [], [], []
if Path(junit).exists():
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        skip = case.find("skipped")
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if skip is not None:
            skipped.append((name, skip.get("message", "").strip()))
        elif problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append((name, message[0][:300] if message else ""))
        else:
            passed.append(name)
lines.append(
    f"result: {len(passed)} passed, {len(skipped)} skipped, {len(failed)} failed "
    f"(pytest exit code {code})"
)
if cut:
    lines.append(f"WARNING: {cut}")
if skipped:
    lines.append("skipped:")
    lines += [f"  {name}: {reason}" for name, reason in skipped]
if failed:
    lines.append("failed:")
    lines += [f"  {name}: {message}" for name, message in failed]
if Path(measured).exists():
    lines.append("measured:")
    for test, values in sorted(json.loads(Path(measured).read_text()).items()):
        lines.append(f"  {test}:")
        lines += [f"    {key}: {value}" for key, value in sorted(values.items())]
Path(summary).write_text("\n".join(lines) + "\n")
print(f"gpu_check: summary written to {summary}")
EOF
exit "$code"
