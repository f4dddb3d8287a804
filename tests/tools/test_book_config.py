"""tools/book_config.py: repository links and launch buttons from the environment, clear errors otherwise."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("book_config", ROOT / "tools" / "book_config.py")
book_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(book_config)


@pytest.mark.parametrize(
    "remote, url",
    [
        ("git@github.com:org/course.git", "https://github.com/org/course"),
        ("ssh://git@gitlab.com/org/course.git", "https://gitlab.com/org/course"),
        ("https://github.com/org/course.git", "https://github.com/org/course"),
        ("https://user:token@github.com/org/course/", "https://github.com/org/course"),
        ("/work/main", None),
        ("file:///work/main", None),
        ("", None),
    ],
)
def test_normalise_repo_url(remote: str, url: str | None) -> None:
    assert book_config.normalise_repo_url(remote) == url


def test_repository_and_hub(monkeypatch) -> None:
    cfg = book_config.book_config(
        {
            "COURSE_REPO_URL": "git@github.com:org/course.git",
            "COURSE_REPO_BRANCH": "dev",
            "COURSE_JUPYTERHUB_URL": "https://hub.example.org/",
        }
    )
    assert cfg["repository"] == {
        "url": "https://github.com/org/course",
        "path_to_book": "",
        "branch": "dev",
    }
    assert cfg["html"]["use_repository_button"] and cfg["html"]["use_issues_button"]
    assert cfg["launch_buttons"]["jupyterhub_url"] == "https://hub.example.org"
    assert cfg["launch_buttons"]["notebook_interface"] == "jupyterlab"
    assert not cfg["launch_buttons"]["binderhub_url"] and not cfg["launch_buttons"]["colab_url"]
    # Everything else comes from _config.yml unchanged.
    assert cfg["execute"]["execute_notebooks"] == "cache" and cfg["title"]


def test_no_repository_means_no_buttons(monkeypatch) -> None:
    monkeypatch.setattr(
        book_config, "_git", lambda *a: "/some/local/path" if a[0] == "remote" else "main"
    )
    cfg = book_config.book_config({})
    assert cfg["repository"]["url"] == ""
    assert not any(
        cfg["html"][b]
        for b in ("use_repository_button", "use_issues_button", "use_edit_page_button")
    )
    assert (
        not cfg["launch_buttons"]["jupyterhub_url"] and not cfg["launch_buttons"]["binderhub_url"]
    )


def test_origin_remote_is_used(monkeypatch) -> None:
    monkeypatch.setattr(
        book_config,
        "_git",
        lambda *a: "git@github.com:org/course.git" if a[0] == "remote" else "HEAD",
    )
    cfg = book_config.book_config({})
    assert cfg["repository"]["url"] == "https://github.com/org/course"
    assert cfg["repository"]["branch"] == "main"  # detached HEAD -> main


@pytest.mark.parametrize(
    "env, message",
    [
        ({"COURSE_REPO_URL": "/tmp/course"}, "COURSE_REPO_URL"),
        (
            {
                "COURSE_REPO_URL": "https://github.com/o/c",
                "COURSE_JUPYTERHUB_URL": "hub.example.org",
            },
            "COURSE_JUPYTERHUB_URL",
        ),
        (
            {"COURSE_REPO_URL": "https://github.com/o/c", "COURSE_REPO_BRANCH": "a b"},
            "COURSE_REPO_BRANCH",
        ),
        ({"COURSE_BINDERHUB_URL": "https://binder.example.org"}, "COURSE_REPO_URL as well"),
    ],
)
def test_bad_settings_are_named(monkeypatch, env: dict, message: str) -> None:
    monkeypatch.setattr(book_config, "_git", lambda *a: "")
    with pytest.raises(book_config.BookConfigError, match=message):
        book_config.book_config(env)


def test_cli_reports_errors(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COURSE_REPO_URL", "not a url")
    assert book_config.main([str(tmp_path / "c.yml")]) == 1
    assert "COURSE_REPO_URL" in capsys.readouterr().err
    assert not (tmp_path / "c.yml").exists()


def test_one_execution_cache_per_mode(monkeypatch) -> None:
    monkeypatch.setattr(book_config, "_git", lambda *a: "")
    assert (
        book_config.book_config({"COURSE_MODE": "quick"})["execute"]["cache"]
        == "_build/.jupyter_cache/quick"
    )
    assert (
        book_config.book_config({"COURSE_MODE": " FULL"})["execute"]["cache"]
        == "_build/.jupyter_cache/full"
    )
    with pytest.raises(book_config.BookConfigError, match="COURSE_MODE='turbo'"):
        book_config.book_config({"COURSE_MODE": "turbo"})


def test_conftest_caches_where_the_book_reads(monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    for mode in ("quick", "full"):
        monkeypatch.setenv("COURSE_MODE", mode)
        monkeypatch.setattr(book_config, "_git", lambda *a: "")
        assert (
            conftest._cache_dir()
            == ROOT / book_config.book_config({"COURSE_MODE": mode})["execute"]["cache"]
        )
