"""Every name a module of the package exports is used by a page, a tool or another module.

A name in a module's ``__all__`` is its public face. It counts as used when a notebook's code, a
file in ``tools/``, the ``Makefile``, the root ``conftest.py`` (nbval's hooks) or another module of
the package names it; tests alone do not count. A name only its own module uses leaves ``__all__``
(it may stay as a module attribute); a name nothing uses is deleted. :data:`ALLOWED` keeps, with
its reason, the few names that are public on purpose although no page uses them yet.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "helpers"

# Public on purpose, though nothing in the course names them: "module:name" -> why.
ALLOWED = {
    "helpers.serving.triton_models.runtime_model:TritonPythonModel": (
        "Triton's Python backend looks the class up by this name in model.py"
    ),
}

# Modules another branch is rewriting (torch.export / AOTInductor): their faces are narrowed after
# that merge. Listed by name, so a new unused name there still fails.
PENDING_MERGE = {}


def words(source: str) -> set[str]:
    """The identifiers a piece of Python names: its name tokens, the names inside f-string
    fields, and ``module:function`` targets in strings (``subprocess_run`` imports those)."""
    found: set[str] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return set(re.findall(r"[A-Za-z_]\w*", source))
    for tok in tokens:
        if tok.type == tokenize.NAME:
            found.add(tok.string)
        elif tok.type == tokenize.STRING:
            found |= set(re.findall(r"[\w.]+:([A-Za-z_]\w*)", tok.string))
            if re.match(r"[rbuRBU]*[fF]", tok.string):
                for field in re.findall(r"\{([^{}]*)\}", tok.string):
                    found |= set(re.findall(r"[A-Za-z_]\w*", field))
    return found


def exported(source: str) -> list[str]:
    """The names of a module's ``__all__`` (a literal list or tuple)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def unused_public_names(modules: Mapping[str, str], users: Mapping[str, set[str]]) -> list[str]:
    """``module:name`` for each exported name that no other module and no user names.

    ``modules``: dotted module name -> source; ``users``: any label -> the words it names."""
    named = {mod: words(src) for mod, src in modules.items()}
    unused = []
    for mod, src in modules.items():
        for name in exported(src):
            if any(name in w for w in users.values()):
                continue
            if any(name in w for other, w in named.items() if other != mod):
                continue
            unused.append(f"{mod}:{name}")
    return unused


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            src = "".join(cell["source"]).splitlines()
            lines += [line for line in src if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def _package_modules() -> dict[str, str]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue  # an index re-exports names; that is not a use
        dotted = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[dotted] = path.read_text(encoding="utf-8")
    return out


def _users() -> dict[str, set[str]]:
    users = {p.name: words(_notebook_code(p)) for p in (ROOT / "notebooks").glob("*.ipynb")}
    for path in (ROOT / "tools").iterdir():
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            users[f"tools/{path.name}"] = (
                words(text) if path.suffix == ".py" else set(re.findall(r"\w+", text))
            )
    users["Makefile"] = set(re.findall(r"\w+", (ROOT / "Makefile").read_text()))
    users["conftest.py"] = words((ROOT / "conftest.py").read_text(encoding="utf-8"))
    return users


def test_every_public_name_is_used_outside_tests():
    pending = {f"{m}:{n}" for m, names in PENDING_MERGE.items() for n in names}
    unused = set(unused_public_names(_package_modules(), _users())) - set(ALLOWED) - pending
    assert not unused, (
        "exported but used by no page, tool or other module (tests do not count): "
        f"{sorted(unused)}; delete what nothing uses, drop from __all__ what only its module "
        "uses, or add it to ALLOWED with the reason it is public"
    )


def test_allowed_and_pending_names_still_exist():
    modules = _package_modules()
    for key in [*ALLOWED, *(f"{m}:{n}" for m, ns in PENDING_MERGE.items() for n in ns)]:
        mod, name = key.split(":")
        assert mod in modules and name in exported(modules[mod]), f"{key} is gone: unlist it"


def test_the_check_fails_on_a_planted_unused_name():
    """Planted: ``b.helper`` is used only by its own module, ``a.shown`` by a page."""
    modules = {
        "a": '__all__ = ["shown", "lent"]\ndef shown(): pass\ndef lent(): pass\n',
        "b": '__all__ = ["helper"]\nfrom a import lent\ndef helper(): return lent()\n',
    }
    page = {"00_page.ipynb": words("from a import shown\nprint(f'{shown()}')\n")}
    assert unused_public_names(modules, page) == ["b:helper"]
    assert unused_public_names(modules, {}) == ["a:shown", "b:helper"]
    # a name named only inside an f-string field or a "module:function" target counts as used
    assert words("f'{x.lent(1)}'") >= {"x", "lent"} and "run" in words('"pkg.mod:run"')
