"""Where Triton cannot run (glibc older than 2.35, not Linux): one clear reason, and chapter 9 skipped.

``triton_server.unavailable_reason`` names a platform that can never run nvidia-pytriton's binaries;
``find_triton`` raises with that reason instead of "not installed", and the root conftest skips
chapter 9's cells there with the same reason. A machine with a new enough glibc gets no reason, so
a broken installation still fails loudly. No server is started here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from helpers.serving import triton_server

ROOT = Path(__file__).resolve().parents[2]


def _fake_glibc(monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    def confstr(name: str) -> str | None:
        if name == "CS_GNU_LIBC_VERSION":
            if text is None:
                raise ValueError("unrecognized configuration name")
            return text
        return None

    monkeypatch.setattr(triton_server.os, "confstr", confstr)
    monkeypatch.setattr(triton_server.sys, "platform", "linux")


@pytest.mark.parametrize("text", ["musl", None])  # None: confstr does not know the name
def test_a_c_library_other_than_glibc_gives_a_reason(monkeypatch, text):
    _fake_glibc(monkeypatch, text)
    assert "not glibc" in triton_server.unavailable_reason()


def test_old_glibc_gives_a_reason_and_find_triton_says_it(monkeypatch):
    _fake_glibc(monkeypatch, "glibc 2.31")
    reason = triton_server.unavailable_reason()
    assert reason and "2.35" in reason and "2.31" in reason and "Ubuntu 22.04" in reason
    with pytest.raises(triton_server.TritonNotFoundError, match="glibc >= 2.35"):
        triton_server.find_triton()


@pytest.mark.parametrize("text", ["glibc 2.35", "glibc 2.40.1"])
def test_new_enough_glibc_gives_no_reason(monkeypatch, text):
    _fake_glibc(monkeypatch, text)
    assert triton_server.unavailable_reason() is None


def test_not_linux_gives_a_reason(monkeypatch):
    monkeypatch.setattr(triton_server.sys, "platform", "darwin")
    assert "Linux only" in triton_server.unavailable_reason()


def test_doctor_uses_the_same_glibc_floor():
    spec = importlib.util.spec_from_file_location("doctor_floor", ROOT / "tools" / "doctor.py")
    doctor = importlib.util.module_from_spec(spec)
    sys.modules["doctor_floor"] = doctor
    try:
        spec.loader.exec_module(doctor)
    finally:
        del sys.modules["doctor_floor"]
    assert doctor.GLIBC_SERVING == triton_server.GLIBC_SERVING


def _collect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, glibc: str) -> list:
    """Run the root conftest's collection hook over fake notebook cells of chapters 8 and 9."""
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    _fake_glibc(monkeypatch, glibc)

    class IPyNbCell:  # the name nbval's cell items have
        def __init__(self, fspath: Path) -> None:
            self.fspath, self.own_markers = fspath, []

        def add_marker(self, mark) -> None:
            self.own_markers.append(mark.mark)

    items = [
        IPyNbCell(tmp_path / f"{n}.ipynb")
        for n in ("08_int8_quantization", "09_triton_serving", "09b_production_front")
    ]
    conftest.pytest_collection_modifyitems(None, items)
    return items, conftest.pytest_report_header(None)


def test_conftest_skips_chapter_9_where_triton_cannot_run(tmp_path, monkeypatch):
    (ch8, ch9, ch9b), header = _collect(tmp_path, monkeypatch, "glibc 2.31")
    assert not ch8.own_markers
    assert [m.name for m in ch9.own_markers] == [m.name for m in ch9b.own_markers] == ["skip"]
    assert "glibc >= 2.35" in ch9.own_markers[0].kwargs["reason"]
    assert header.startswith("skipping 09_triton_serving.ipynb, 09b_production_front.ipynb: ")


def test_conftest_runs_chapter_9_where_triton_can(tmp_path, monkeypatch):
    (ch8, ch9, ch9b), header = _collect(tmp_path, monkeypatch, "glibc 2.36")
    assert not ch8.own_markers and not ch9.own_markers and not ch9b.own_markers
    assert header is None
