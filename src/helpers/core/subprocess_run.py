"""Run a benchmark function in a fresh Python process with its own environment variables.

Some switches are read once, when a library is imported: OneFlow's MLIR passes are enabled by
``ONEFLOW_MLIR_ENABLE_ROUND_TRIP=1`` plus ``ONEFLOW_MLIR_FUSE_FORWARD_OPS=1`` (pad+conv fusion)
or ``ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION=1`` (BatchNorm folding), set *before*
``import oneflow``. A notebook that already imported OneFlow cannot flip them, so each such
variant runs in a new process::

    res = run_in_subprocess("helpers.compiling.graph_switches:oneflow_graph_ablation", {...}, env=PAD_CONV_FUSION_ENV)

The target is ``"package.module:function"``; it is called with ``kwargs`` (JSON values) and must
return something JSON can encode (measurements, op counts, paths of saved outputs). Failures in
the child (an exception, a crash, a timeout) come back as clear errors with the child's output.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MLIR_ROUND_TRIP = {"ONEFLOW_MLIR_ENABLE_ROUND_TRIP": "1"}
PAD_CONV_FUSION_ENV: dict[str, str] = {**MLIR_ROUND_TRIP, "ONEFLOW_MLIR_FUSE_FORWARD_OPS": "1"}
BN_FOLDING_ENV: dict[str, str] = {
    **MLIR_ROUND_TRIP,
    "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION": "1",
}
# Variables a parent notebook may have set that would silently change the child's MLIR passes.
ONEFLOW_MLIR_VARS = (
    "ONEFLOW_MLIR_ENABLE_ROUND_TRIP",
    "ONEFLOW_MLIR_FUSE_FORWARD_OPS",
    "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION",
)


def _resolve(target: str) -> Any:
    if not isinstance(target, str) or target.count(":") != 1 or not all(target.split(":")):
        raise ValueError(f"target must look like 'package.module:function', got {target!r}")
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"cannot import module {module_name!r} of target {target!r}: {exc}"
        ) from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"{module_name} has no function {func_name!r} (target {target!r})")
    return func


def _tail(text: str, n: int = 3000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def run_in_subprocess(
    target: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    clear_mlir_vars: bool = True,
) -> dict[str, Any]:
    """Call ``target(**kwargs)`` in a fresh Python process with ``env`` added to this environment.

    Returns ``{"result": <the function's return value>, "env": env, "wall_s": seconds including
    the child's imports}``. ``clear_mlir_vars`` removes OneFlow MLIR variables inherited from
    this process first, so only ``env`` decides which passes run.
    Raises ``ValueError``/``TypeError`` for a bad target, arguments or environment,
    ``TimeoutError`` when the child runs past ``timeout_s`` (it is killed), and ``RuntimeError``
    with the child's traceback and output tail when it fails or crashes.
    """
    kwargs = dict(kwargs or {})
    env = dict(env or {})
    if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise TypeError(
                f"environment variables must be non-empty str -> str, got {key!r}={value!r}"
            )
    try:
        spec_text = json.dumps({"target": target, "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"kwargs must be JSON-serialisable (numbers, strings, lists, dicts): {exc}"
        ) from exc
    _resolve(target)  # fail here, with a clear message, rather than in the child

    child_env = dict(os.environ)
    if clear_mlir_vars:
        for key in ONEFLOW_MLIR_VARS:
            child_env.pop(key, None)
    child_env.update(env)
    src = str(
        Path(__file__).resolve().parents[1]
    )  # make `helpers` importable even if not installed
    child_env["PYTHONPATH"] = src + (
        os.pathsep + child_env["PYTHONPATH"] if child_env.get("PYTHONPATH") else ""
    )
    with tempfile.TemporaryDirectory(prefix="subbench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec_text)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "helpers.core.subprocess_run",
                    str(spec_path),
                    str(out_path),
                ],
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            err = (
                exc.stderr.decode(errors="replace")
                if isinstance(exc.stderr, bytes)
                else (exc.stderr or "")
            )
            raise TimeoutError(
                f"{target} did not finish within {timeout_s:.0f} s in the subprocess (killed); "
                f"stderr tail:\n{_tail(err)}"
            ) from None
        wall = time.perf_counter() - start
        payload = json.loads(out_path.read_text()) if out_path.exists() else None
    if payload is not None and "error" in payload:
        raise RuntimeError(f"{target} raised in the subprocess (env {env}):\n{payload['error']}")
    if proc.returncode != 0 or payload is None:
        raise RuntimeError(
            f"the subprocess running {target} exited with code {proc.returncode} "
            f"(env {env}) without a result; stderr tail:\n{_tail(proc.stderr)}"
        )
    return {"result": payload["result"], "env": env, "wall_s": wall}


def echo_environment(names: list[str], delay_s: float = 0.0) -> dict[str, Any]:
    """A tiny target: the values of ``names`` in the child's environment (after ``delay_s`` seconds).

    Shows that a fresh process really sees the variables, e.g. before timing an MLIR variant.
    """
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be a list of variable names, got {names!r}")
    time.sleep(delay_s)
    return {
        "pid": os.getpid(),
        "python": sys.executable,
        "env": {n: os.environ.get(n) for n in names},
        "oneflow_imported": "oneflow" in sys.modules,
    }


def _main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    try:
        spec = json.loads(spec_path.read_text())
        result = _resolve(spec["target"])(**spec["kwargs"])
        text = json.dumps({"result": result})
    except BaseException:  # noqa: BLE001 - report every failure to the parent
        out_path.write_text(json.dumps({"error": traceback.format_exc()}))
        return 1
    out_path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
