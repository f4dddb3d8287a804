"""Write the book's build configuration: ``_config.yml`` plus repository links and launch buttons.

The course does not hard-code where it is published. ``make book`` (and the book test) run this
script, which reads ``_config.yml`` and adds, when known:

- the repository (``COURSE_REPO_URL``, else the ``origin`` remote when it is an http(s) or
  ``git@host:`` URL): repository, issues and edit buttons on every page;
- the branch links point at (``COURSE_REPO_BRANCH``, else the checked-out branch, else ``main``);
- a JupyterHub launch button (``COURSE_JUPYTERHUB_URL``) for workshops that run the course on a
  shared GPU hub: the button clones the repository into the participant's server with nbgitpuller
  and opens the chapter in JupyterLab;
- a BinderHub launch button (``COURSE_BINDERHUB_URL``), for a BinderHub with enough memory for
  the environment (public mybinder.org has too little; see book/how_to_use.md);
- the execution cache of the current mode (``_build/.jupyter_cache/<mode>``), the folder the test
  run (conftest.py) stores its executed notebooks in.

Without a repository URL the book has no repository buttons and no launch buttons (a launch
button needs a repository to pull from); every page keeps its download-as-.ipynb button.

Usage: ``python tools/book_config.py OUT`` (OUT is usually ``_build/_config.yml``); then
``jupyter-book build . --config OUT``.  Bad values stop the build with a message naming them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parents[1]


class BookConfigError(ValueError):
    """A setting given for the book build is unusable."""


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _mode(env: dict[str, str]) -> str:
    """The course mode for this build: COURSE_MODE if set, else what helpers.core.environment decides."""
    sys.path.insert(0, str(ROOT / "src"))
    from helpers.core.environment import MODE_ENV, MODES, get_mode

    given = env.get(MODE_ENV, "").strip().lower()
    if not given:
        return get_mode()
    if given not in MODES:
        raise BookConfigError(f"{MODE_ENV}={given!r} is not a mode; use {' or '.join(MODES)}")
    return given


def normalise_repo_url(url: str) -> str | None:
    """Browser URL of a git remote (``git@host:org/repo.git`` -> ``https://host/org/repo``).

    Returns None for remotes a browser cannot open (local paths, ``file://``)."""
    url = url.strip()
    m = re.fullmatch(r"(?:ssh://)?git@([^:/]+)[:/](.+?)(?:\.git)?/?", url)
    if m:
        return f"https://{m.group(1)}/{m.group(2)}"
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https") and parsed.netloc:
        netloc = parsed.netloc.rsplit("@", 1)[-1]  # drop any credentials
        path = re.sub(r"(\.git)?/?$", "", parsed.path)
        return f"{parsed.scheme}://{netloc}{path}"
    return None


def _http_url(name: str, value: str) -> str:
    parsed = urlparse(value.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise BookConfigError(
            f"{name}={value!r} is not an http(s) URL (expected e.g. https://hub.example.org)"
        )
    return value.strip().rstrip("/")


def book_config(env: dict[str, str] | None = None, base: Path = ROOT / "_config.yml") -> dict:
    """The configuration dict for this build: ``base`` plus repository and launch settings from ``env``."""
    env = dict(os.environ if env is None else env)
    config = yaml.safe_load(base.read_text())
    # One execution cache per mode: Jupyter Book keys cached outputs on the code alone, so a quick-mode
    # cache must never be rendered in a full-mode build (conftest.py writes nbval's runs to the same folder).
    config.setdefault("execute", {})["cache"] = f"_build/.jupyter_cache/{_mode(env)}"
    # Sphinx reads html_static_path relative to the configuration's folder, and this configuration
    # is written to _build/: point it at the repository's _static/ (course.css), or the book builds
    # without the course's styles (and its 88-column code blocks scroll sideways).
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["html_static_path"] = [
        str(ROOT / p) for p in sphinx.get("html_static_path", ["_static"])
    ]
    html = config.setdefault("html", {})

    given = env.get("COURSE_REPO_URL", "").strip()
    if given:
        repo = normalise_repo_url(given)
        if repo is None:
            raise BookConfigError(
                f"COURSE_REPO_URL={given!r} is not a repository URL a browser can open "
                "(expected https://host/org/repo or git@host:org/repo.git)"
            )
    else:
        repo = normalise_repo_url(_git("remote", "get-url", "origin"))
    branch = env.get("COURSE_REPO_BRANCH", "").strip() or _git("rev-parse", "--abbrev-ref", "HEAD")
    if not branch or branch == "HEAD":
        branch = "main"
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch):
        raise BookConfigError(f"COURSE_REPO_BRANCH={branch!r} is not a branch name")

    hubs = {
        key: _http_url(var, env[var])
        for key, var in (
            ("jupyterhub_url", "COURSE_JUPYTERHUB_URL"),
            ("binderhub_url", "COURSE_BINDERHUB_URL"),
        )
        if env.get(var, "").strip()
    }

    if repo is None and hubs:
        raise BookConfigError(
            "a launch button needs the repository it pulls the notebooks from: "
            "set COURSE_REPO_URL as well (or build from a clone whose origin is that repository)"
        )
    # No repository: no buttons that would point somewhere (JB's default URL is its own repo).
    config["repository"] = {"url": repo or "", "path_to_book": "", "branch": branch}
    html.update(
        use_repository_button=repo is not None,
        use_edit_page_button=repo is not None,
        use_issues_button=repo is not None
        and urlparse(repo).netloc in ("github.com", "gitlab.com"),
    )
    config["launch_buttons"] = {
        "notebook_interface": "jupyterlab",
        "binderhub_url": hubs.get("binderhub_url", ""),
        "jupyterhub_url": hubs.get("jupyterhub_url", ""),
        "colab_url": "",
        "thebe": False,
    }
    return config


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/book_config.py OUT_CONFIG_YML", file=sys.stderr)
        return 2
    try:
        config = book_config()
    except BookConfigError as err:
        print(f"book configuration: {err}", file=sys.stderr)
        return 1
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    repo = config["repository"]["url"]
    hubs = [k for k in ("jupyterhub_url", "binderhub_url") if config["launch_buttons"][k]]
    print(
        f"book configuration -> {out}: repository {repo or 'not set (no repository buttons)'}"
        + (f", branch {config['repository']['branch']}" if repo else "")
        + (
            f", launch buttons: {', '.join(h.split('_')[0] for h in hubs)}"
            if hubs
            else ", no launch buttons"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
