"""tools/doctor.py (`make doctor`): every check over faked machines, including the ones that fail.

The doctor runs before the course's environment exists, so it is a standard-library script, loaded
here by path. Its constants are checked against what they describe (the OneFlow architectures are
helpers.core.cuda_compat's): the glibc floor against nvidia-pytriton's wheel tag and binaries.
"""

# course-test-group: no-oneflow
# (OneFlow appears only as a package name of faked machines)

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("course_doctor", ROOT / "tools" / "doctor.py")
doctor = importlib.util.module_from_spec(_spec)
sys.modules["course_doctor"] = doctor  # dataclasses look their module up by name
_spec.loader.exec_module(doctor)

# A machine on which everything is right: each test changes one fact.
GOOD = doctor.Facts(
    system="Linux",
    machine="x86_64",
    venv_exists=True,
    python="/x/.venv/bin/python",
    python_version=(3, 10),
    python_shared=True,
    libpython="/usr/lib/libpython3.10.so",
    python_has_venv=True,
    glibc=(2, 35),
    glibcxx=30,
    disk_rc=0,
    disk_free_gb=100.0,
    shm_bytes=8 << 30,
    nvidia_smi=True,
    gpus=(("NVIDIA A10G", (8, 6)),),
    driver=(535, 104, 5),
    cxx="/usr/bin/c++",
    chromium="/usr/bin/chromium",
    chromedriver="/usr/bin/chromedriver",
    nginx="/usr/sbin/nginx",
    libb64="/usr/lib/x86_64-linux-gnu/libb64.so.0d",
    distro="debian",
    kernel_spec="/root/.local/share/jupyter/kernels/course",
    kernel_spec_exists=True,
    kernel_python="/data/envs/fast-inference/bin/python",
    kernel_python_exists=True,
    packages={"torch": "2.10.0", "oneflow": "0.9.0"},
    pins={"torch": "2.10.0", "oneflow": "0.9.0"},
    host_memory=64 << 30,
    gpu_memory_mib=23028,  # an A10G's 24 GB as nvidia-smi reports it
    cpus=8,
    cgroup_version=2,
)


def status(check, **changes) -> str:
    return check(dataclasses.replace(GOOD, **changes)).status


def test_a_good_machine_is_all_ok() -> None:
    rows = doctor.run_checks(GOOD)
    assert [r.status for r in rows] == ["ok"] * len(rows), rows
    assert len(rows) == len(doctor.CHECKS) >= 12


def test_platform_macos_and_windows_block_the_install() -> None:
    assert status(doctor.check_platform, system="Darwin", machine="arm64") == "FAIL"
    row = doctor.check_platform(dataclasses.replace(GOOD, system="Windows", machine="AMD64"))
    assert row.status == "FAIL" and "WSL2" in row.fix


def test_python_missing_wrong_or_without_venv() -> None:
    row = doctor.check_python(dataclasses.replace(GOOD, python=None, python_version=None))
    assert row.status == "FAIL" and "--enable-shared" in row.fix and "conda" in row.fix
    assert status(doctor.check_python, python_version=(3, 12)) == "FAIL"
    no_venv = dict(venv_exists=False, python_has_venv=False)
    assert "python3.10-venv" in doctor.check_python(dataclasses.replace(GOOD, **no_venv)).fix
    assert status(doctor.check_python, venv_exists=True, python_has_venv=False) == "ok"


def test_static_pyenv_build_warns_for_triton() -> None:
    row = doctor.check_libpython(dataclasses.replace(GOOD, python_shared=False, libpython=None))
    assert row.status == "WARN" and "PYTHON_CONFIGURE_OPTS=--enable-shared" in row.fix


def test_glibc_of_ubuntu_20_04_skips_chapter_9_but_installs() -> None:
    old = dataclasses.replace(GOOD, glibc=(2, 31), glibcxx=28)
    row = doctor.check_glibc(old)
    assert row.status == "WARN" and "chapter 9" in row.fix and not doctor.serving_ok(old)
    assert doctor.serving_ok(GOOD)  # Ubuntu 22.04: glibc 2.35, libstdc++ 12
    # glibc new enough but an old libstdc++ (GLIBCXX_3.4.29): the server would not load either
    assert status(doctor.check_glibc, glibcxx=29) == "WARN"
    # Rocky / RHEL 9 (glibc 2.34) installs, without chapter 9; the fix never recommends it
    rocky = doctor.check_glibc(dataclasses.replace(GOOD, glibc=(2, 34), glibcxx=29))
    assert rocky.status == "WARN" and "Rocky / RHEL 9's glibc 2.34 is too old" in rocky.fix
    # below PyTorch's manylinux_2_28 nothing installs (Ubuntu 18.04)
    assert status(doctor.check_glibc, glibc=(2, 27)) == "FAIL"
    fail = doctor.check_glibc(dataclasses.replace(GOOD, glibc=(2, 27)))
    assert "Rocky / RHEL 9 install everything but chapter 9" in fail.fix
    assert status(doctor.check_glibc, glibc=None) == "WARN"


def test_disk_uses_check_disk_verdict() -> None:
    row = doctor.check_disk(dataclasses.replace(GOOD, disk_rc=1, disk_message="ERROR: no room"))
    assert row.status == "FAIL" and row.fix == "ERROR: no room"


def test_shm_of_a_docker_default_warns() -> None:
    row = doctor.check_shm(dataclasses.replace(GOOD, shm_bytes=64 << 20))
    assert row.status == "WARN" and "--shm-size" in row.fix and "Bus error" in row.fix
    assert status(doctor.check_shm, shm_bytes=512 << 20) == "WARN"
    assert status(doctor.check_shm, shm_bytes=1 << 30) == "ok"
    assert status(doctor.check_shm, shm_bytes=None) == "WARN"


@pytest.mark.parametrize(
    "cc, expected",
    [((7, 0), "ok"), ((8, 9), "ok"), ((9, 0), "WARN"), ((10, 0), "WARN"), ((6, 1), "WARN")],
)
def test_gpu_generations(cc, expected) -> None:
    row = doctor.check_gpu(dataclasses.replace(GOOD, gpus=(("GPU", cc),)))
    assert row.status == expected
    if cc >= (9, 0):
        assert "OneFlow 0.9.0 has no code" in row.fix and "H800, H20" in row.fix
    if cc < (7, 0):
        assert "PyTorch 2.10 has no code" in row.fix


def test_china_market_gpus() -> None:
    """H800 and H20 (Hopper) run PyTorch on the GPU and OneFlow on the CPU; A800, L20, 4090 run both."""
    for name, cc in (("NVIDIA H800", (9, 0)), ("NVIDIA H20", (9, 0))):
        row = doctor.check_gpu(dataclasses.replace(GOOD, gpus=((name, cc),)))
        assert row.status == "WARN" and "its cells run on the CPU" in row.fix
    for name, cc in (("NVIDIA A800", (8, 0)), ("NVIDIA L20", (8, 9)), ("RTX 4090D", (8, 9))):
        assert status(doctor.check_gpu, gpus=((name, cc),)) == "ok"


def test_no_gpu_is_quick_mode_not_a_failure() -> None:
    assert status(doctor.check_gpu, gpus=(), nvidia_smi=False) == "info"
    assert status(doctor.check_driver, gpus=()) == "info"


def test_old_driver_warns() -> None:
    assert status(doctor.check_driver, driver=(470, 82, 1)) == "WARN"
    assert status(doctor.check_driver, driver=(525, 60, 13)) == "ok"


def test_missing_tools_warn() -> None:
    assert status(doctor.check_cxx, cxx=None) == "WARN"
    assert status(doctor.check_nginx, nginx=None) == "WARN"
    row = doctor.check_libb64(dataclasses.replace(GOOD, libb64=None))
    assert row.status == "WARN" and "libb64-0d" in row.fix and "make restore" in row.fix


def test_chromium_is_optional_off_ci_and_required_in_ci() -> None:
    reader = doctor.check_chromium(dataclasses.replace(GOOD, chromium=None, chromedriver=None))
    assert reader.status == "info" and reader.fix.startswith("optional")
    assert status(doctor.check_chromium, chromedriver=None, ci=True) == "WARN"
    # on Ubuntu the fix says why not to install it (a snap), instead of an apt-get line
    ubuntu = doctor.check_chromium(dataclasses.replace(GOOD, chromium=None, distro="ubuntu debian"))
    assert "snap" in ubuntu.fix and "apt-get" not in ubuntu.fix


def test_kernel_lost_with_the_system_disk_points_to_make_restore(tmp_path: Path) -> None:
    assert status(doctor.check_kernel, kernel_spec="") == "info"  # never registered: not needed
    gone = doctor.check_kernel(dataclasses.replace(GOOD, kernel_spec_exists=False))
    assert gone.status == "WARN" and "make restore" in gone.fix
    stale = dataclasses.replace(GOOD, kernel_python_exists=False)
    assert doctor.check_kernel(stale).status == "WARN"
    # the facts come from the kernel.json make kernel wrote
    spec = tmp_path / "kernels" / "course"
    assert doctor._kernel(str(spec)) == (False, None, False, None)
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(f'{{"argv": ["{sys.executable}", "-m", "ipykernel"]}}')
    assert doctor._kernel(str(spec)) == (True, sys.executable, True, None)
    (spec / "kernel.json").write_text(
        '{"argv": ["/gone/bin/python"], "env": {"COURSE_MODE": "full"}}'
    )
    assert doctor._kernel(str(spec)) == (True, "/gone/bin/python", False, "full")


def test_a_kernel_pinned_to_full_on_an_instance_without_its_card() -> None:
    """AutoDL's 无卡模式: the kernel registered with MODE=full would run full sizes on the CPU."""
    pinned = dataclasses.replace(GOOD, kernel_mode="full", gpus=(), nvidia_smi=False)
    row = doctor.check_kernel(pinned)
    assert (
        row.status == "WARN" and "pins COURSE_MODE=full" in row.found and "make kernel" in row.fix
    )
    assert status(doctor.check_kernel, kernel_mode="full") == "ok"  # with its GPU: as asked
    assert status(doctor.check_kernel, gpus=(), nvidia_smi=False) == "ok"  # not pinned: it chooses


def test_memory_against_the_measured_peaks() -> None:
    n = doctor.machine_needs.NEEDS
    row = doctor.check_memory(dataclasses.replace(GOOD, host_memory=16 << 30))  # a 16 GB rental
    assert row.status == "WARN" and n["full_host_chapter"] in row.fix and "quick mode" in row.fix
    assert f"{n['full_host_gib']:.1f} GiB" in row.needed
    tiny = doctor.check_memory(dataclasses.replace(GOOD, host_memory=4 << 30))
    assert tiny.status == "WARN" and n["quick_host_chapter"] in tiny.fix
    assert status(doctor.check_memory, host_memory=None) == "info"
    assert status(doctor.check_memory, host_memory=16 << 30, gpus=()) == "info"  # quick anyway


def test_gpu_memory_and_the_mode_the_course_will_choose() -> None:
    laptop = dataclasses.replace(GOOD, gpus=(("RTX 4060 Laptop GPU", (8, 9)),), gpu_memory_mib=8188)
    row = doctor.check_gpu_memory(laptop)
    assert row.status == "WARN" and "quick mode" in row.fix
    mode = doctor.check_mode(laptop)
    assert mode.found == "quick" and "the GPU has 8.0 GiB" in mode.fix
    assert doctor.check_mode(GOOD).found == "full"
    small_ram = doctor.check_mode(dataclasses.replace(GOOD, host_memory=16 << 30))
    assert small_ram.found == "quick" and "16.0 GiB of RAM" in small_ram.fix
    no_card = doctor.check_mode(dataclasses.replace(GOOD, gpus=(), nvidia_smi=False))
    assert no_card.found == "quick" and no_card.fix == "no CUDA GPU"
    assert doctor.check_gpu_memory(dataclasses.replace(GOOD, gpus=())).status == "info"


def test_cpu_row_reads_the_container_quota() -> None:
    shared = doctor.check_cpu(dataclasses.replace(GOOD, cpus=64, cpu_quota=4.0))
    assert "quota 4" in shared.found and "4 thread(s)" in shared.fix and "cgroup" in shared.fix
    assert status(doctor.check_cpu, cpus=1) == "WARN"
    assert status(doctor.check_cpu, cpus=64, cpu_quota=1.5) == "WARN"  # 1.5 CPUs: one thread


def test_a_preinstalled_image_with_other_versions_is_told_to_install_beside_it() -> None:
    image = dataclasses.replace(GOOD, packages={"torch": "1.13.1", "oneflow": "0.8.0"})
    row = doctor.check_frameworks(image)
    assert row.status == "info" and "beside" in row.fix and "oneflow 0.8.0" in row.found
    # a fresh environment (pip and setuptools only) is not "another version": nothing installed yet
    fresh = doctor.check_frameworks(dataclasses.replace(GOOD, packages={"pip": "24.3.1"}))
    assert fresh.found == "none installed yet" and "beside" not in fresh.fix


def test_only_fail_rows_stop_the_install(tmp_path: Path) -> None:
    rows = doctor.run_checks(dataclasses.replace(GOOD, shm_bytes=64 << 20, nginx=None))
    assert not [r for r in rows if r.status == "FAIL"]
    table = doctor.render(rows).splitlines()
    assert [c.strip() for c in table[0].split("|")] == ["check", "found", "needed", "how to fix"]
    assert any(line.startswith("/dev/shm [WARN]") for line in table)


def test_glibc_floor_is_what_nvidia_pytriton_needs() -> None:
    """The wheel's manylinux tag is the floor pip enforces; the binaries must not need more."""
    pytriton = pytest.importorskip("pytriton")
    site = Path(pytriton.__file__).parents[1]
    wheel = next(site.glob("nvidia_pytriton-*.dist-info")) / "WHEEL"
    tag = re.search(r"manylinux_(\d+)_(\d+)_x86_64", wheel.read_text())
    assert tag and (int(tag.group(1)), int(tag.group(2))) == doctor.GLIBC_SERVING
    if not shutil.which("objdump"):
        pytest.skip("objdump (binutils) not installed")
    server = Path(pytriton.__file__).parent / "tritonserver"
    binaries = [
        server / "bin" / "tritonserver",
        *site.glob("nvidia_pytriton.libs/libtritonserver*"),
    ]
    glibc, glibcxx = set(), set()
    for binary in binaries:
        dump = subprocess.run(["objdump", "-T", str(binary)], capture_output=True, text=True).stdout
        glibc |= {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+)\b", dump)}
        glibcxx |= {int(v) for v in re.findall(r"GLIBCXX_3\.4\.(\d+)", dump)}
    assert max(glibc) <= doctor.GLIBC_SERVING
    assert max(glibcxx) == doctor.GLIBCXX_SERVING


def test_make_doctor_runs_without_the_course_environment(tmp_path: Path) -> None:
    """Before setup there is no .venv: the system python3 runs it and the table is printed."""
    env = dict(os.environ, COURSE_MIN_FREE_GB="1")
    out = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "doctor", f"VENV={tmp_path / 'no-venv'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| found" in out.stdout and "nothing blocks the install" in out.stdout
    assert (
        "python3 tools/doctor.py"
        in subprocess.run(
            ["make", "-n", "-C", str(ROOT), "doctor", f"VENV={tmp_path / 'no-venv'}"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )


def test_a_full_disk_stops_make_doctor(tmp_path: Path) -> None:
    env = dict(os.environ, COURSE_MIN_FREE_GB="1000000")
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "doctor.py"),
            "--venv",
            str(tmp_path / "v" / "env"),
            "--python310",
            sys.executable,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert (
        out.returncode == 1 and "disk [FAIL]" in out.stdout and "blocks the install" in out.stdout
    )


def test_setup_runs_the_doctor_first_and_installs_without_triton_on_old_glibc() -> None:
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP): requirements.txt", 1)[1]
    recipe = recipe.split("\n\n", 1)[0]
    assert (
        recipe.index("$(DOCTOR)") < recipe.index("check_disk.sh") < recipe.index("$(IPIP) install")
    )
    assert "--serving-ok" in recipe and "grep -v '^nvidia-pytriton' requirements.txt" in recipe


def test_serving_ok_flag_answers_for_this_machine() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "doctor.py"), "--serving-ok"], timeout=60
    )
    libc = os.confstr("CS_GNU_LIBC_VERSION")
    major, minor = map(int, libc.split()[1].split(".")[:2])
    assert (out.returncode == 0) == ((major, minor) >= doctor.GLIBC_SERVING)


def test_libpython_probe_finds_what_the_triton_helper_loads() -> None:
    """The doctor's probe looks where helpers.serving.triton_server looks, with this Python."""
    import json

    from helpers.serving.triton_server import TritonNotFoundError, libpython_dir

    probe = json.loads(
        subprocess.run(
            [sys.executable, "-c", doctor._PROBE], capture_output=True, text=True, timeout=120
        ).stdout
    )
    try:
        expected = libpython_dir()
    except TritonNotFoundError:
        assert probe["libpython"] is None
    else:
        assert probe["libpython"] and Path(probe["libpython"]).parent == expected
    assert tuple(probe["version"]) == sys.version_info[:2]
