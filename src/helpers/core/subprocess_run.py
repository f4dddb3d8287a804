"""Run a function in a fresh Python process with its own environment variables.

Some switches are read once, when a library is imported (OneFlow's MLIR passes, chosen by
``ONEFLOW_MLIR_*`` before ``import oneflow``): a process that imported it cannot flip them, so
each setting runs in a new process. The target, ``"package.module:function"``, gets JSON
``kwargs`` and returns what JSON encodes.
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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["run_in_subprocess"]


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
    unset: Iterable[str] = (),
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Call ``target(**kwargs)`` in a fresh Python process: this environment less ``unset``, plus
    ``env`` (a variable this process happens to have cannot change the child silently).

    Returns ``{"result": ..., "env": env, "wall_s": seconds with the child's imports}``. Raises
    ``ValueError``/``TypeError`` for bad arguments, ``TimeoutError`` past ``timeout_s`` (the child
    is killed), ``RuntimeError`` with the child's traceback and output tail when it fails.
    """
    kwargs = dict(kwargs or {})
    env = dict(env or {})
    removed = list(unset)
    if isinstance(unset, str) or not all(isinstance(name, str) and name for name in removed):
        raise TypeError(f"unset must be a list of non-empty variable names, got {unset!r}")
    if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in env.items()):
        raise TypeError(f"environment variables must be non-empty str -> str, got {env!r}")
    try:
        spec_text = json.dumps({"target": target, "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"kwargs must be JSON-serialisable (numbers, strings, lists, dicts): {exc}"
        ) from exc
    _resolve(target)  # fail here, with a clear message, rather than in the child

    child_env = {k: v for k, v in os.environ.items() if k not in removed} | env
    # make `helpers` importable in the child even if it is not installed
    src = str(Path(__file__).resolve().parents[1])
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, child_env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="subrun-") as tmp:
        out_path = Path(tmp) / "result.json"
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", __name__, str(out_path)],
                input=spec_text,  # the spec on its stdin, the result in a file
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:  # its output so far: bytes, whatever text= says
            raise TimeoutError(
                f"{target} did not finish within {timeout_s:.0f} s in the subprocess (killed); "
                f"stderr tail:\n{_tail((exc.stderr or b'').decode(errors='replace'))}"
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


def _main(argv: list[str]) -> int:
    out_path = Path(argv[0])
    try:
        spec = json.loads(sys.stdin.read())
        result = _resolve(spec["target"])(**spec["kwargs"])
        text = json.dumps({"result": result})
    except BaseException:  # report every failure to the parent
        out_path.write_text(json.dumps({"error": traceback.format_exc()}))
        return 1
    out_path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
