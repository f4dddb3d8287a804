"""Running PyTorch code on OneFlow without editing it, and finding what will not carry over.

:func:`import_with_mock_torch` imports an *unchanged* file whose ``torch`` is OneFlow (and
``torchvision`` flowvision, which ``oneflow.mock_torch`` does not do); :func:`api_usage` says which
``torch.*`` / ``torchvision.*`` names a file uses and whether OneFlow has each (module-level names
only: tensor methods and names built at run time need the migrated code to run).
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from helpers.core.environment import import_oneflow

__all__ = [
    "mock_torch",
    "import_with_mock_torch",
    "resolve",
    "api_usage",
    "missing_apis",
]

# PyTorch package -> the OneFlow package that replaces it.
REPLACEMENTS = {"torch": "oneflow", "torchvision": "flowvision"}


def _target(name: str) -> str | None:
    """``'torch.nn'`` -> ``'oneflow.nn'``, ``'torchvision'`` -> ``'flowvision'``, others -> None."""
    root, _, rest = name.partition(".")
    if root not in REPLACEMENTS:
        return None
    return REPLACEMENTS[root] + ("." + rest if rest else "")


def _source_file(module_or_path: ModuleType | str | Path) -> Path:
    if isinstance(module_or_path, ModuleType):
        file = getattr(module_or_path, "__file__", None)
        if not file or not Path(file).is_file():
            raise ValueError(f"module {module_or_path.__name__!r} has no source file to re-import")
        return Path(file)
    path = Path(str(module_or_path).strip())
    if path.suffix != ".py" or not path.is_file():
        raise FileNotFoundError(f"no Python source file at {path}")
    return path


@contextmanager
def mock_torch(alias_torchvision: bool = True) -> Iterator[Any]:
    """Inside this context ``import torch`` gives OneFlow (``oneflow.mock_torch``), and with
    ``alias_torchvision`` ``import torchvision`` gives ``flowvision``; yields ``oneflow``. Restored
    on exit: modules imported inside keep OneFlow, the rest of the program the real PyTorch.
    """
    flow = import_oneflow()
    import flowvision  # imported for real before the swap (it imports oneflow, never torch)

    # enable() edits its caller's globals: run it from a private namespace, not from this module.
    namespace: dict[str, Any] = {}
    exec("from oneflow.mock_torch import enable\nctx = enable()", namespace)  # noqa: S102 - fixed code
    ctx = namespace["ctx"]
    saved = {k: v for k, v in sys.modules.items() if k.partition(".")[0] == "torchvision"}
    try:
        if alias_torchvision:
            for key in saved:
                del sys.modules[key]
            sys.modules.update({"torchvision": flowvision, "torchvision.models": flowvision.models})
        yield flow
    finally:
        for key in [k for k in sys.modules if k.partition(".")[0] == "torchvision"]:
            del sys.modules[key]
        sys.modules.update(saved)
        ctx.__exit__(None, None, None)


def import_with_mock_torch(
    module_or_path: ModuleType | str | Path, name: str | None = None, alias_torchvision: bool = True
) -> ModuleType:
    """Import an unchanged PyTorch source file as a new module whose ``torch`` is OneFlow.

    ``module_or_path`` is an imported module (its file is re-imported) or a ``.py`` path;
    ``name`` defaults to ``<stem>_mock_oneflow``.
    """
    path = _source_file(module_or_path)
    name = name or f"{path.stem}_mock_oneflow"
    if not name.isidentifier():
        raise ValueError(f"module name must be a Python identifier, got {name!r}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with mock_torch(alias_torchvision=alias_torchvision):
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return module


def _aliases(tree: ast.Module) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """Local names bound to torch/torchvision modules, and names imported by ``from torch... import``."""
    aliases: dict[str, str] = {}
    imported: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _target(a.name):  # `import torch.nn` binds `torch`; `as nn` binds torch.nn
                    root = a.name.partition(".")[0]
                    aliases[a.asname or root] = a.name if a.asname else root
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _target(node.module or ""):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = full
                imported.append((full, node.lineno))
    return aliases, imported


def resolve(name: str) -> tuple[bool, str]:
    """Whether the OneFlow counterpart of ``name`` (``'torch.nn.Linear'``) exists; returns ``(found, oneflow_name)``."""
    target = _target(name)
    if target is None:
        raise ValueError(f"{name!r} is not a torch or torchvision name")
    import_oneflow()
    try:
        pkgutil.resolve_name(target)  # imports submodules, then follows attributes
    except (ImportError, AttributeError):
        return False, target
    return True, target


def _is_path(source_or_path: Any) -> bool:
    """A ``Path``, or text of one line that ends in ``.py``: a file to read, not source to scan."""
    text = source_or_path.strip() if isinstance(source_or_path, str) else ""
    return isinstance(source_or_path, Path) or ("\n" not in text and text.endswith(".py"))


def api_usage(source_or_module: str | Path | ModuleType) -> list[dict[str, Any]]:
    """One row per ``torch.*`` / ``torchvision.*`` name the code uses (``api``, ``oneflow``,
    ``available``, ``uses``, ``first_line``), the missing ones first. ``source_or_module``: source
    text, an imported module, or a ``.py`` file's path (a ``Path`` or one line ending in ``.py``).
    """
    if isinstance(source_or_module, ModuleType) or _is_path(source_or_module):
        source = _source_file(source_or_module).read_text(encoding="utf-8")
    else:
        source = source_or_module
    if not isinstance(source, str):
        raise TypeError(f"source must be Python source text (str), got {type(source).__name__}")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"source is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    aliases, imported = _aliases(tree)
    found: dict[str, list[int]] = {}
    for full, line in imported:
        found.setdefault(full, []).append(line)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = ast.unparse(node).split(".")  # a dotted name, or an expression's attribute
            if all(p.isidentifier() for p in chain) and chain[0] in aliases:
                full = ".".join([aliases[chain[0]]] + chain[1:])
                found.setdefault(full, []).append(node.lineno)
    # keep only the longest chains: 'torch.optim.SGD' covers 'torch.optim'
    names = sorted(found)
    longest = [n for n in names if not any(o != n and o.startswith(n + ".") for o in names)]
    rows = [
        dict(api=n, oneflow=target, available=ok, uses=len(found[n]), first_line=min(found[n]))
        for n in longest
        for ok, target in [resolve(n)]
    ]
    return sorted(rows, key=lambda r: (r["available"], r["first_line"]))


def missing_apis(source_or_module: str | Path | ModuleType) -> list[str]:
    """The torch/torchvision names of the code that OneFlow lacks (source, module or ``.py`` path: :func:`api_usage`)."""
    return [r["api"] for r in api_usage(source_or_module) if not r["available"]]
