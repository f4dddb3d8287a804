"""helpers.core.cuda_compat: which GPUs a wheel's CUDA code runs on; OneFlow kept off GPUs it cannot use."""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import mmap
import struct
from pathlib import Path

import pytest

from helpers.core import cuda_compat as cc
from helpers.core import environment as env


@pytest.mark.parametrize(
    "capability, expected",
    [
        ((6, 0), True),
        ((7, 0), True),
        ((7, 5), True),
        ((8, 0), True),
        ((8, 6), True),
        ((8, 9), True),  # Ada (L4, RTX 40xx) runs 8.6 SASS
        ((7, 2), True),  # Xavier runs 7.0 SASS
        ((9, 0), False),  # Hopper: H100 / H200
        ((10, 0), False),
        ((12, 0), False),
        ((5, 2), False),
    ],
)
def test_oneflow_sass_compatibility(capability, expected):
    assert cc.runs_on(capability, cc.ONEFLOW_CUDA_ARCHS) is expected


def test_not_a_capability_is_refused():
    with pytest.raises(ValueError, match="compute capability"):
        cc.runs_on((0, 0), (80,))


_FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_KIND = {1: "ptx", 2: "sass"}


def fatbin_archs(path: str | Path) -> dict[str, set[int]]:
    """The CUDA architectures embedded in a shared library: ``{'sass': {70, 80, ...}, 'ptx': {...}}``.

    Reads every fat binary in the file (magic 0xBA55ED50) and the architecture of each entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such library: {path}")
    found: dict[str, set[int]] = {"sass": set(), "ptx": set()}
    with open(path, "rb") as fh:
        if path.stat().st_size == 0:
            return found
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = mm.find(_FATBIN_MAGIC)
            while pos >= 0:
                header_size = struct.unpack_from("<H", mm, pos + 6)[0]
                body_size = struct.unpack_from("<Q", mm, pos + 8)[0]
                entry, end = pos + header_size, min(pos + header_size + body_size, len(mm))
                while entry + 32 <= end:
                    kind, _, entry_header, payload = struct.unpack_from("<HHIQ", mm, entry)
                    arch = struct.unpack_from("<I", mm, entry + 28)[0]
                    if kind in _KIND:
                        found[_KIND[kind]].add(arch)
                    if entry_header == 0:
                        break
                    entry += entry_header + payload
                pos = mm.find(_FATBIN_MAGIC, pos + 4)
    return found


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    """A minimal CUDA fat binary: header + one 64-byte entry header (kind, arch) + 16 bytes payload each."""
    body = b""
    for kind, arch in entries:
        head = struct.pack("<HHIQ", kind, 0x101, 64, 16) + b"\0" * 12 + struct.pack("<I", arch)
        body += head.ljust(64, b"\0") + b"\xab" * 16
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_archs_reads_sass_and_ptx(tmp_path):
    lib = tmp_path / "libfake.so"
    lib.write_bytes(
        b"\x7fELF" + b"\0" * 100 + _fatbin([(2, 80), (2, 86)]) + b"\0" * 50 + _fatbin([(1, 90)])
    )
    assert fatbin_archs(lib) == {"sass": {80, 86}, "ptx": {90}}
    plain = tmp_path / "libplain.so"
    plain.write_bytes(b"\x7fELF no cuda here")
    assert fatbin_archs(plain) == {"sass": set(), "ptx": set()}
    with pytest.raises(FileNotFoundError, match="no such library"):
        fatbin_archs(tmp_path / "missing.so")


def test_constants_match_the_installed_oneflow_wheel():
    """ONEFLOW_CUDA_ARCHS is what the pinned wheel really contains (re-read from its library)."""
    # from the installed distribution, not the import spec: oneflow.mock_torch rewrites
    # oneflow.__spec__ (as "torch", without a file) in this process once a test uses it
    root = Path(importlib.metadata.distribution("oneflow").locate_file(""))
    libs = glob.glob(str(root / "oneflow.libs" / "liboneflow-*.so*"))
    assert libs, f"liboneflow not found under {root / 'oneflow.libs'}"
    found = fatbin_archs(libs[0])
    assert tuple(sorted(found["sass"])) == cc.ONEFLOW_CUDA_ARCHS
    assert not found["ptx"], "PTX would let newer GPUs run it: runs_on reads SASS only"


@pytest.fixture(autouse=True)
def _uncached():
    problem = cc.oneflow_gpu_problem  # the cached function, before a test replaces it
    problem.cache_clear()
    yield
    problem.cache_clear()


def _fake_gpu(monkeypatch, capability, name="NVIDIA H200"):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: name)


def test_problem_named_for_hopper_and_none_for_ampere(monkeypatch):
    _fake_gpu(monkeypatch, (9, 0))
    problem = cc.oneflow_gpu_problem()
    cc.oneflow_gpu_problem.cache_clear()
    assert "NVIDIA H200" in problem and "9.0" in problem and "CPU" in problem and "A100" in problem
    _fake_gpu(monkeypatch, (8, 0), "NVIDIA A100")
    assert cc.oneflow_gpu_problem() is None


def test_no_gpu_means_no_problem():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cc.oneflow_gpu_problem() is None


def test_flow_device_keeps_oneflow_off_an_unsupported_gpu(monkeypatch, capsys):
    flow = env.import_oneflow()
    problem = "OneFlow 0.9.0 has no GPU code for the NVIDIA H200 (compute capability 9.0)"
    monkeypatch.setattr(flow.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cc, "oneflow_gpu_problem", lambda: problem)
    env._say_once.cache_clear()
    assert env.flow_device().type == "cpu"
    assert env.flow_device().type == "cpu"
    assert capsys.readouterr().out.count("NOTE: OneFlow 0.9.0 has no GPU code") == 1  # said once
    with pytest.raises(RuntimeError, match="compute capability 9.0"):
        env.flow_device("cuda")
    monkeypatch.setattr(cc, "oneflow_gpu_problem", lambda: None)
    assert env.flow_device().type == "cuda"  # a supported GPU: OneFlow uses it (device object only)


def test_paired_devices_are_the_same_kind():
    tdev, fdev = env.paired_devices()
    assert tdev.type == fdev.type
    if not env.has_cuda():
        assert tdev.type == "cpu"
