"""helpers.core.environment: modes, sizes, devices, seeding, the environment report."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.core import environment as env
from helpers.core import hardware


def test_mode_from_env_quick_and_full(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "quick")
    assert env.get_mode() == "quick"
    monkeypatch.setenv("COURSE_MODE", " FULL ")
    assert env.get_mode() == "full"


def test_mode_default_follows_what_the_machine_holds(monkeypatch):
    monkeypatch.delenv("COURSE_MODE", raising=False)
    assert env.get_mode() == env.mode_choice()[0]
    if not env.has_cuda():
        assert env.get_mode() == "quick"


def test_unknown_mode_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "turbo")
    with pytest.raises(ValueError, match="turbo") as info:
        env.get_mode()
    assert "quick" in str(info.value) and "full" in str(info.value)


def test_sizes_per_mode():
    quick, full = env.sizes("quick"), env.sizes("full")
    assert quick.mode == "quick" and full.mode == "full"
    assert quick.image_size < full.image_size
    assert full.arch == "resnet101"
    assert full.batch_size == 16  # the case study's batch
    with pytest.raises(ValueError, match="unknown mode"):
        env.sizes("medium")


def test_unknown_device_name():
    with pytest.raises(ValueError, match="gpu0"):
        env.torch_device("gpu0")
    with pytest.raises(ValueError, match="unknown device"):
        env.flow_device("tpu")


def test_cpu_and_auto_devices(torch_mod):
    assert env.torch_device("cpu").type == "cpu"
    assert env.torch_device("auto").type == ("cuda" if env.has_cuda() else "cpu")


@pytest.mark.skipif(env.has_cuda(), reason="checks the no-GPU error path")
def test_explicit_cuda_without_gpu_raises():
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        env.torch_device("cuda")
    with pytest.raises(RuntimeError, match="cuda:0"):
        env.torch_device("cuda:0")


@pytest.mark.skipif(env.has_cuda(), reason="checks the no-GPU error path")
def test_oneflow_devices_without_gpu(flow):
    assert env.flow_device("auto").type == "cpu"
    with pytest.raises(RuntimeError, match="OneFlow sees no CUDA GPU"):
        env.flow_device("cuda")


def test_seed_everything_is_reproducible(torch_mod):
    env.seed_everything(123)
    a = (random.random(), np.random.rand(), torch_mod.rand(3))
    env.seed_everything(123)
    b = (random.random(), np.random.rand(), torch_mod.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch_mod.equal(a[2], b[2])
    with pytest.raises(ValueError, match="seed"):
        env.seed_everything(-1)


@pytest.mark.skipif(env.has_cuda(), reason="checks the no-GPU path")
def test_skip_without_gpu_prints_a_line(capsys):
    assert env.skip_without_gpu("TensorRT INT8") is True
    assert "SKIPPED" in capsys.readouterr().out
    # a long reason wraps to the book's column instead of scrolling sideways
    assert env.skip_without_gpu("the CUDA lie: a call returns before its kernels ran") is True
    out = capsys.readouterr().out
    assert len(out.splitlines()) > 1 and all(len(ln) <= env.PAGE_COLUMNS for ln in out.splitlines())


def test_environment_report_and_label(capsys):
    rep = env.environment_report()
    for key in ("mode", "python", "cpu", "cores", "gpu", "libraries"):
        assert key in rep
    assert rep["libraries"]["torch"]
    assert " cores" in env.machine_label() and env.get_mode() in env.machine_label()
    env.print_environment_report()
    out = capsys.readouterr().out
    assert "libraries" in out and "sizes" in out and "COURSE_MODE" in out
    assert max(len(line) for line in out.splitlines()) <= 88  # nothing scrolls in the book


def test_quiet_native_stderr_hides_only_the_harmless_lines(capfd):
    import os

    from helpers.core.environment import quiet_native_stderr

    with quiet_native_stderr():
        os.write(
            2,
            b"E1129 factory.cpp:65] CUDA driver version is insufficient for CUDA runtime version\n",
        )
        os.write(
            2,
            b"[W1201 CPUAllocator.cpp:245] Memory block of unknown size was allocated before "
            b"the profiling started, profiler results will not include the deallocation event\n",
        )
        os.write(2, b"a real problem\n")
    err = capfd.readouterr().err
    assert "a real problem" in err and "insufficient" not in err and "CPUAllocator" not in err
    with pytest.raises(RuntimeError, match="inside"):  # an exception still restores descriptor 2
        with quiet_native_stderr():
            raise RuntimeError("inside")
    os.write(2, b"after\n")
    assert "after" in capfd.readouterr().err


def test_native_output_captures_what_c_stdio_buffered(capfd):
    import ctypes

    with env.native_output(1) as lines:
        ctypes.CDLL(None).printf(b"from C\n")  # native code, not Python
    assert lines == ["from C"] and "from C" not in capfd.readouterr().out


@pytest.mark.parametrize("mode", env.MODES)
def test_sizes_fit_what_the_chapters_assume(mode):
    """Full mode has never run in CI: check its sizes satisfy what the chapters index and build."""
    s = env.sizes(mode)
    assert (
        1 in s.batch_sweep and s.batch_size in s.batch_sweep
    )  # chapters 0 and 5 look these up in sweeps
    assert list(s.batch_sweep) == sorted(set(s.batch_sweep))
    assert max(s.batch_sweep) <= 64  # the TensorRT profiles of chapters 7-8 stop at batch 64
    assert s.image_size % 32 == 0  # ResNet and MobileNetV2 downsample by 32
    assert (
        s.train_images // 4 >= s.batch_size and s.val_images // 4 >= s.batch_size
    )  # chapter 1's splits
    assert 0 < s.warmup < s.repeats
    assert s.arch in ("resnet18", "resnet34", "resnet50", "resnet101")


def test_cpu_work_uses_quick_sizes_in_full_mode(capsys):
    assert env.sizes_on("cpu", "full") == env.SIZES["quick"]
    assert "quick sizes" in capsys.readouterr().out
    assert env.sizes_on("cuda", "full") == env.SIZES["full"]
    assert env.sizes_on("cpu", "quick") == env.SIZES["quick"]


def test_fewest_keeps_the_sizes_and_cuts_only_the_repeats(monkeypatch):
    """COURSE_FEWEST=1 (make fullcpu): the same models, images and batches, fewer calls."""
    monkeypatch.delenv(env.FEWEST_ENV, raising=False)
    assert not env.fewest() and env.sizes("full") == env.SIZES["full"]
    monkeypatch.setenv(env.FEWEST_ENV, "1")
    assert env.fewest()
    for mode in env.MODES:
        base, cut = env.SIZES[mode], env.sizes(mode)
        assert cut.fewest and not base.fewest
        same = ("arch", "image_size", "batch_size", "num_classes", "train_images")
        assert all(getattr(cut, k) == getattr(base, k) for k in same)
        assert 1 <= cut.warmup < base.warmup and 3 <= cut.repeats < base.repeats
        # the sweep keeps its ends and the batch size, in order
        ends = (min(base.batch_sweep), base.batch_size, max(base.batch_sweep))
        assert cut.batch_sweep == tuple(sorted(set(ends)))
    full = env.sizes("full")
    assert full.batch_sweep == (1, 16, 64)
    assert (full.warmup, full.repeats, full.train_steps) == (1, 3, 30)  # steps: a tenth of 300
    assert env.sizes("quick").train_steps == env.SIZES["quick"].train_steps  # must still learn
    # a page's own repeat counts: a tenth, at least `least`; unchanged without COURSE_FEWEST
    assert (full.few(1000), full.few(15, least=5), full.few(2)) == (100, 5, 2)
    assert env.SIZES["full"].few(1000) == 1000
    # OneFlow's CPU work in full mode: quick sizes, cut the same way
    assert env.sizes_on("cpu", "full") == env.sizes("quick")
    monkeypatch.setenv(env.FEWEST_ENV, "0")
    assert not env.fewest() and env.sizes("quick") == env.SIZES["quick"]
    monkeypatch.setenv(env.FEWEST_ENV, "yes")
    with pytest.raises(ValueError, match="COURSE_FEWEST"):
        env.sizes("full")


def test_environment_report_says_when_repeats_are_cut(monkeypatch, capsys):
    monkeypatch.setenv(env.FEWEST_ENV, "1")
    env.print_environment_report()
    out = capsys.readouterr().out
    assert "fewest=True" in out and "not reference figures" in out
    monkeypatch.delenv(env.FEWEST_ENV)
    env.print_environment_report()
    assert "fewest" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "machine, flags, saturates",
    [
        ("x86_64", {"avx2"}, True),  # an AVX2-only EPYC (Zen 3): vpmaddubsw, 16-bit pairs
        ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, False),
        ("x86_64", {"avx2", "avx_vnni"}, False),
        ("x86_64", {"avx2", "amx_int8"}, False),
        ("aarch64", {"asimd"}, False),  # not x86: another kernel family
    ],
)
def test_int8_saturates_on_x86_without_dot_products(monkeypatch, machine, flags, saturates):
    monkeypatch.setattr(hardware, "_cpu_flags", lambda: set(flags))
    monkeypatch.setattr(hardware.platform, "machine", lambda: machine)
    assert hardware.has_int8_dot_product() is bool(flags & hardware.INT8_DOT_FLAGS)
    assert hardware.int8_saturates() is saturates


def test_cpu_family_names_the_generation():
    family = hardware.machine_facts()["cpu_family"]
    assert family is None or family.startswith("family ")
    assert env.environment_report()["cpu_family"] == family


def test_course_model_is_every_chapters_arch_at_the_modes_sizes(monkeypatch, capsys):
    """Your own model: COURSE_MODEL replaces the course's ResNet in S and in OneFlow's S_flow."""
    monkeypatch.delenv(env.MODEL_ENV, raising=False)
    assert env.sizes("quick").arch == "resnet18"
    monkeypatch.setenv(env.MODEL_ENV, " mobilenet_v3_small ")
    quick, full = env.sizes("quick"), env.sizes("full")
    assert quick.arch == full.arch == "mobilenet_v3_small"
    assert quick.image_size == 64 and full.image_size == 224  # the mode's sizes stay
    monkeypatch.setenv(env.MODE_ENV, "full")
    assert env.sizes_on("cpu").arch == "mobilenet_v3_small"  # OneFlow's follow


def _fake_machine(monkeypatch, gpu_gib, host_gib):
    """A machine with a GPU of ``gpu_gib`` (None: no card) and ``host_gib`` of RAM."""
    monkeypatch.delenv("COURSE_MODE", raising=False)
    gpu = (
        None if gpu_gib is None else SimpleNamespace(name="Fake GPU", total_memory=gpu_gib * 2**30)
    )
    monkeypatch.setattr(hardware, "gpu_properties", lambda: gpu)
    monkeypatch.setattr(hardware, "host_memory", lambda: (host_gib * 2**30, "MemTotal"))
    env._auto_mode.cache_clear()
    env._say_once.cache_clear()


@pytest.fixture
def fresh_mode_choice():
    yield
    env._auto_mode.cache_clear()
    env._say_once.cache_clear()


def test_mode_full_only_where_the_machine_holds_it(monkeypatch, capsys, fresh_mode_choice):
    _fake_machine(monkeypatch, gpu_gib=80, host_gib=128)
    assert env.get_mode() == "full"
    assert capsys.readouterr().out == ""  # nothing to explain
    _fake_machine(monkeypatch, gpu_gib=8, host_gib=32)  # a laptop's 8 GB card
    assert env.get_mode() == "quick"
    out = capsys.readouterr().out
    assert out.startswith("NOTE: quick mode: the GPU has 8.0 GiB") and "COURSE_MODE=full" in out
    assert env.get_mode() == "quick" and capsys.readouterr().out == ""  # one line per process
    _fake_machine(monkeypatch, gpu_gib=24, host_gib=16)  # a 16 GB rental with an RTX 4090
    assert env.get_mode() == "quick" and "16.0 GiB of RAM" in capsys.readouterr().out


def test_the_mode_and_the_report_read_one_gpu(monkeypatch, fresh_mode_choice):
    """The GPU the mode is chosen for is the one the environment report names."""
    _fake_machine(monkeypatch, gpu_gib=141, host_gib=256)
    assert env.get_mode() == "full"
    assert hardware.gpu_info()["gpu"] == "Fake GPU (141 GiB)"
    _fake_machine(monkeypatch, gpu_gib=None, host_gib=256)
    assert env.get_mode() == "quick" and hardware.gpu_info()["gpu"] is None


def test_mode_without_a_card_and_when_pinned(monkeypatch, capsys, fresh_mode_choice):
    _fake_machine(monkeypatch, gpu_gib=None, host_gib=64)  # AutoDL's 无卡模式
    assert env.get_mode() == "quick"
    assert capsys.readouterr().out.strip() == (
        "NOTE: quick mode: no CUDA GPU. COURSE_MODE=full runs full mode anyway"
    )
    _fake_machine(monkeypatch, gpu_gib=8, host_gib=16)
    monkeypatch.setenv("COURSE_MODE", "full")  # asked for: the machine is not second-guessed
    assert env.get_mode() == "full" and env.mode_choice() == ("full", "COURSE_MODE=full")
    assert capsys.readouterr().out == ""
