"""`make doctor`: is this machine ready for the course? A table of what is found, what is needed, how to fix.

Runs before anything is installed (``make setup`` calls it first), so with the standard library only
and any Python 3 (the course's ``.venv`` if it exists, else the system ``python3``). It checks
(:data:`CHECKS`) what otherwise fails half-way through an install or a chapter, down to the kernel
``make kernel`` registered (lost with the system disk when a rental instance is re-created: ``make
restore``). What full mode needs, the cgroup readers and OneFlow's GPU architectures come from
``helpers.core`` (``machine_needs``, ``hardware``, ``cgroup``, ``cuda_compat``: standard library only, loaded from
``src/``), so the doctor and the notebooks apply one rule. Each check is a pure function of a
:class:`Facts` record, so the tests fake machines (an old Ubuntu, a 64 MB container, an H100)
without owning one.

Exit status: 1 when something blocks the install itself (``FAIL``), else 0 (``WARN`` rows name the
chapters or tests that will print a skip line). ``--serving-ok`` only answers whether
nvidia-pytriton (chapter 9's Triton server) can be installed here: exit 0 yes, 1 no.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Facts",
    "Row",
    "CHECKS",
    "gather",
    "run_checks",
    "render",
    "serving_ok",
    "main",
]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from helpers.core import cgroup, cuda_compat, hardware, machine_needs  # noqa: E402 - standard library only

# glibc: torch 2.10.0 and onnxruntime-gpu 1.23.2 are manylinux_2_28 wheels (pip refuses them below).
# nvidia-pytriton 0.7.0 is tagged manylinux_2_35, so pip refuses it below 2.35; its tritonserver,
# libtritonserver and Python-backend stub were read with `objdump -T`: they need GLIBC_2.34 and, from
# the system's libstdc++ (not bundled), GLIBCXX_3.4.30 (GCC 12's runtime). Ubuntu 22.04 has both
# (glibc 2.35, libstdc++ 12), Debian 12 too (2.36); Ubuntu 20.04 and Debian 11 (2.31) and Rocky / RHEL /
# AlmaLinux 9 (2.34) do not: chapter 9 is skipped there. Ubuntu 18.04 (2.27) cannot install PyTorch.
GLIBC_INSTALL = (2, 28)
GLIBC_SERVING = (2, 35)
GLIBCXX_SERVING = 30  # GLIBCXX_3.4.30
# Disk: tools/check_disk.sh holds the threshold (COURSE_MIN_FREE_GB, default 20 GB); its verdict is used.
# /dev/shm: DataLoader workers (chapter 5) hand every batch to the main process through /dev/shm
# (full mode: 16 x 3 x 224 x 224 float32 = 9.6 MB a batch, several batches in flight per worker), and
# Triton's Python backend and PyTriton (chapter 9) pass every request's tensors through /dev/shm
# regions per model instance. Docker's default of 64 MB ends in "Bus error" or a dead worker; 1 GB
# is what the course's own Triton docker command asks for (--shm-size=1g).
SHM_NEEDED = 1 << 30
SHM_MINIMUM = 256 << 20
# GPUs: OneFlow's SASS architectures are helpers.core.cuda_compat's. PyTorch 2.10's cu128 wheel
# carries sm_70 to sm_120 (torch._C._cuda_getArchFlags()), so it starts at 7.0.
TORCH_MIN_CC = (7, 0)
# Driver: PyTorch 2.10.0 and onnxruntime-gpu 1.23.2 use CUDA 12, which runs on drivers from 525.60.13
# on (CUDA's minor-version compatibility); OneFlow's CUDA 11.7 needs less (450.80.02).
DRIVER_MIN = (525, 60, 13)
PINNED_FRAMEWORKS = ("torch", "oneflow", "numpy", "protobuf", "onnxruntime-gpu")

OK, WARN, FAIL, INFO = "ok", "WARN", "FAIL", "info"


@dataclass(frozen=True)
class Facts:
    """What the doctor knows about a machine (gathered by :func:`gather`, faked by the tests)."""

    system: str = "Linux"
    machine: str = "x86_64"
    venv: str = ".venv"
    venv_exists: bool = False
    python: str | None = None  # the Python 3.10 the install uses (the venv's, else PYTHON310)
    python_version: tuple[int, int] | None = None
    libpython: str | None = None  # its libpython3.10.so.1.0, where Triton's stub will look
    python_has_venv: bool | None = None  # `import venv, ensurepip` works (Debian: python3.10-venv)
    packages: dict[str, str] = field(default_factory=dict)  # installed in that Python
    pins: dict[str, str] = field(default_factory=dict)  # requirements.txt
    glibc: tuple[int, int] | None = None
    glibcxx: int | None = None  # highest GLIBCXX_3.4.N in the system's libstdc++
    disk_rc: int | None = None  # tools/check_disk.sh's exit status
    disk_message: str = ""
    disk_free_gb: float | None = None
    shm_bytes: int | None = None
    nvidia_smi: bool = False
    gpus: tuple[tuple[str, tuple[int, int] | None], ...] = ()  # (name, compute capability)
    driver: tuple[int, ...] | None = None
    cxx: str | None = None
    chromium: str | None = None
    chromedriver: str | None = None
    nginx: str | None = None
    libb64: str | None = None  # libb64.so.0d (Debian/Ubuntu libb64-0d): perf_analyzer loads it
    ci: bool = False  # CI=true: the book's browser checks are required there
    distro: str = ""  # os-release ID and ID_LIKE, e.g. "ubuntu debian"
    kernel_spec: str = ""  # where `make kernel` registered the kernel (remembered), or ""
    kernel_spec_exists: bool = False
    kernel_python: str | None = None  # the Python its kernel.json starts
    kernel_python_exists: bool = False
    kernel_mode: str | None = None  # COURSE_MODE pinned in that kernel's spec, if any
    host_memory: int | None = None  # bytes: MemTotal, or the container's lower memory limit
    host_memory_where: str = "MemTotal"
    gpu_memory_mib: int | None = None  # the first GPU's total memory (nvidia-smi)
    cpus: int | None = None  # CPUs in the affinity mask
    cpu_quota: float | None = None  # the cgroup's CPU quota in CPUs, None: none
    cgroup_version: int | None = None
    lxcfs: bool = False  # /proc/stat is the container's own (lxcfs), not the host's


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    check: str
    status: str
    found: str
    needed: str
    fix: str = ""


def _v(parts: tuple[int, ...] | None) -> str:
    return ".".join(str(p) for p in parts) if parts else "?"


def check_platform(f: Facts) -> Row:
    found, needed = f"{f.system} {f.machine}", "Linux x86-64"
    if f.system == "Linux" and f.machine in ("x86_64", "AMD64"):
        return Row("platform", OK, found, needed)
    fix = (
        "OneFlow 0.9.0, nvidia-pytriton and onnxruntime-gpu ship Linux x86-64 wheels only: nothing "
        "of OneFlow runs on macOS or native Windows. Use a Linux machine, a rented GPU, or WSL2."
    )
    return Row("platform", FAIL, found, needed, fix)


def check_python(f: Facts) -> Row:
    needed = "Python 3.10 (OneFlow 0.9.0: wheels for 3.7-3.10)"
    if f.python is None or f.python_version is None:
        fix = (
            "pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.10.13; Debian/Ubuntu: "
            "apt-get install python3.10 python3.10-venv; or conda: conda env create -f "
            "environment.yml, then make setup VENV=$CONDA_PREFIX"
        )
        return Row("python", FAIL, "no Python 3.10", needed, fix)
    found = f"{_v(f.python_version)} at {f.python}"
    if f.python_version != (3, 10):
        fix = (
            f"{f.venv} was made with another Python: make distclean, then make setup "
            "(or PYTHON310=/path/to/python3.10)"
        )
        return Row("python", FAIL, found, needed, fix)
    if not f.venv_exists and f.python_has_venv is False:
        fix = "apt-get install python3.10-venv (Debian/Ubuntu split venv and ensurepip out)"
        return Row("python", FAIL, found + ", no venv module", needed + " with venv", fix)
    return Row("python", OK, found, needed)


def check_libpython(f: Facts) -> Row:
    needed = "libpython3.10.so.1.0 (Triton's Python backend links it)"
    if f.python is None:
        return Row("libpython", INFO, "no Python 3.10", needed)
    if f.libpython:  # conda's python is static but ships the shared library too: that is enough
        return Row("libpython", OK, f.libpython, needed)
    fix = (
        "chapter 9's Triton server cannot start its Python models. pyenv: "
        "PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install --force 3.10.13, then make distclean "
        "setup; or use conda's or your distribution's python3.10 (both are shared)"
    )
    return Row("libpython", WARN, "static build (no libpython3.10.so.1.0)", needed, fix)


def check_glibc(f: Facts) -> Row:
    needed = f"glibc >= {_v(GLIBC_SERVING)}, libstdc++ GLIBCXX_3.4.{GLIBCXX_SERVING} (chapter 9)"
    found = f"glibc {_v(f.glibc)}, GLIBCXX_3.4.{f.glibcxx if f.glibcxx is not None else '?'}"
    if f.glibc is None:
        return Row("glibc", WARN, "not glibc (musl? not Linux?)", needed, "use a glibc Linux image")
    if f.glibc < GLIBC_INSTALL:
        needed = f"glibc >= {_v(GLIBC_INSTALL)} (PyTorch's manylinux_2_28 wheels)"
        fix = (
            "use an image of Ubuntu 22.04 or newer, or Debian 12 (Ubuntu 20.04, Debian 11 and "
            "Rocky / RHEL 9 install everything but chapter 9)"
        )
        return Row("glibc", FAIL, found, needed, fix)
    if serving_ok(f):
        return Row("glibc", OK, found, needed)
    fix = (
        "nvidia-pytriton (manylinux_2_35) cannot install here: make setup installs everything "
        "else, chapter 9 is skipped and chapter 10 has no served rung. For them, rent an image "
        "of Ubuntu 22.04 or newer, or Debian 12 (Rocky / RHEL 9's glibc 2.34 is too old too)"
    )
    return Row("glibc", WARN, found, needed, fix)


def serving_ok(f: Facts) -> bool:
    """Whether nvidia-pytriton installs and its tritonserver runs here (glibc and libstdc++)."""
    glibc_ok = f.glibc is not None and f.glibc >= GLIBC_SERVING
    return glibc_ok and (f.glibcxx is None or f.glibcxx >= GLIBCXX_SERVING)


def check_disk(f: Facts) -> Row:
    found = f"{f.disk_free_gb:.0f} GB free" if f.disk_free_gb is not None else "?"
    needed = "~20 GB free at the install's peak (tools/check_disk.sh)"
    if f.disk_rc in (None, 0):
        return Row("disk", OK if f.disk_rc == 0 else INFO, found, needed)
    fix = f.disk_message or "free some space, or VENV=/bigdisk/venv"
    return Row("disk", FAIL, found, needed, fix)


def check_shm(f: Facts) -> Row:
    needed = f"{SHM_NEEDED >> 20} MB /dev/shm (DataLoader workers, Triton's Python backend)"
    if f.shm_bytes is None:
        return Row("/dev/shm", WARN, "none", needed, "mount a tmpfs on /dev/shm")
    found = f"{f.shm_bytes >> 20} MB"
    if f.shm_bytes >= SHM_NEEDED:
        return Row("/dev/shm", OK, found, needed)
    fix = (
        "docker run --shm-size=1g ...; on a host: mount -o remount,size=1G /dev/shm. "
        "On a rental whose container you cannot restart, ask for a larger shm"
    )
    if f.shm_bytes < SHM_MINIMUM:
        fix = "chapter 5's DataLoader and chapter 9's server fail with 'Bus error'. " + fix
    return Row("/dev/shm", WARN, found, needed, fix)


def check_gpu(f: Facts) -> Row:
    needed = "CC 7.0-8.9 for OneFlow and PyTorch on the GPU (V100, T4, A100/A800, A10, L4, L20, RTX 4090)"
    if not f.gpus:
        found = "none (nvidia-smi not found)" if not f.nvidia_smi else "nvidia-smi lists no GPU"
        return Row("gpu", INFO, found, needed, "quick mode on the CPU; full mode wants a GPU")
    name, cc = f.gpus[0]
    found = f"{name}, CC {_v(cc)}" + (f" (+{len(f.gpus) - 1} more)" if len(f.gpus) > 1 else "")
    fix = ""
    if cc is None:
        fix = "driver too old to report compute capability"
    elif cc < TORCH_MIN_CC:
        fix = "PyTorch 2.10 has no code for this GPU: everything runs on the CPU. Rent a newer GPU"
    elif not cuda_compat.runs_on(cc, cuda_compat.ONEFLOW_CUDA_ARCHS):
        fix = (
            "OneFlow 0.9.0 has no code for this GPU (Hopper: H100, H200, H800, H20; Blackwell): its "
            "cells run on the CPU (PyTorch, ONNX Runtime and Triton use the GPU). To see OneFlow on "
            "a GPU, rent one of compute capability 7.0-8.9 (A100/A800, A10, L20, L4, RTX 3090/4090)"
        )
    return Row("gpu", WARN if fix else OK, found, needed, fix)


def check_driver(f: Facts) -> Row:
    needed = f"NVIDIA driver >= {_v(DRIVER_MIN)} (CUDA 12 wheels)"
    if not f.gpus:
        return Row("driver", INFO, "no GPU", needed)
    fix = ""
    if f.driver is None:
        fix = "nvidia-smi did not report a driver version"
    elif f.driver < DRIVER_MIN:
        fix = (
            "PyTorch and ONNX Runtime fall back to the CPU. Choose an image with a driver of the "
            "525 series or newer (the rental's driver comes with the host)"
        )
    return Row("driver", WARN if fix else OK, _v(f.driver), needed, fix)


def _gib(n: float) -> str:
    return f"{n:.1f} GiB"


def check_memory(f: Facts) -> Row:
    """Host RAM against the chapters' measured peaks: full mode's heaviest, quick mode's."""
    n = machine_needs.NEEDS
    needed = (
        f"{_gib(n['full_host_gib'])} for full mode ({n['full_host_chapter']}, measured), "
        f"{_gib(n['quick_host_gib'])} for quick mode ({n['quick_host_chapter']})"
    )
    if f.host_memory is None:
        return Row("memory", INFO, "unknown", needed)
    have = f.host_memory / machine_needs.GIB
    found = f"{_gib(have)} ({f.host_memory_where})"
    if have < n["quick_host_gib"]:
        fix = (
            f"below quick mode's heaviest chapter: {n['quick_host_chapter']} may be killed for "
            "memory. Close other programs, restart the kernel between chapters, or use a "
            "larger machine (on WSL2, raise memory= in .wslconfig)"
        )
        return Row("memory", WARN, found, needed, fix)
    above = machine_needs.chapters_above(have)
    if not above:
        return Row("memory", OK, found, needed)
    fix = (
        "full mode does not fit: its full-size peaks above this machine's RAM: "
        + ", ".join(f"{k} {_gib(v)}" for k, v in above)
        + " (measured on a CPU). The course chooses quick mode here on its own; on a GPU "
        "rental pick an instance with more RAM for full mode"
    )
    return Row("memory", WARN if f.gpus else INFO, found, needed, fix)


def check_gpu_memory(f: Facts) -> Row:
    """The GPU's memory against full mode's heaviest chapter (a count until a GPU run)."""
    n = machine_needs.NEEDS
    needed = f"about {_gib(n['full_gpu_gib'])} for full mode ({n['full_gpu_chapter']}, counted)"
    if not f.gpus:
        return Row("gpu memory", INFO, "no GPU", needed)
    if f.gpu_memory_mib is None:
        return Row("gpu memory", WARN, "?", needed, "nvidia-smi did not report memory.total")
    found = _gib(f.gpu_memory_mib / 1024)
    if f.gpu_memory_mib * 2**20 >= n["full_gpu_gib"] * machine_needs.GIB:
        return Row("gpu memory", OK, found, needed)
    fix = (
        "too small for full mode: the course chooses quick mode here on its own (its "
        "PyTorch work still runs on this GPU). MODE=full would run out of memory in "
        f"{n['full_gpu_chapter']}"
    )
    return Row("gpu memory", WARN, found, needed, fix)


def check_mode(f: Facts) -> Row:
    """The mode the course will choose here on its own (helpers.core.environment.get_mode)."""
    gpu = f.gpu_memory_mib * 2**20 if f.gpus and f.gpu_memory_mib is not None else None
    fits, why = machine_needs.full_mode_fits(f.host_memory, gpu)
    needed = "full mode where GPU memory and RAM hold the heaviest chapter, else quick"
    return Row("mode", OK if fits or not f.gpus else INFO, "full" if fits else "quick", needed, why)


def check_cpu(f: Facts) -> Row:
    """The CPUs this process may use, and what the busy-machine rule reads in a container."""
    needed = "2 CPUs per participant (quick mode was measured on 2)"
    if f.cpus is None:
        return Row("cpu", INFO, "?", needed)
    if f.cpu_quota is not None:
        threads = max(1, min(f.cpus, int(f.cpu_quota)))
        found = f"{f.cpus} CPUs in the mask, cgroup v{f.cgroup_version} quota {f.cpu_quota:g}"
        fix = (
            f"a container limited by CPU time: the course computes with {threads} thread(s), and "
            "calls a timing contended only when the container's own other processes took CPU "
            "time (its cgroup), not the host's other tenants"
        )
    else:
        found = f"{f.cpus} CPUs" + (
            f", cgroup v{f.cgroup_version}, no quota" if f.cgroup_version else ""
        )
        source = "the container's own (lxcfs)" if f.lxcfs else "the machine's"
        fix = (
            f"timings count other processes on these CPUs ({source} /proc/stat): on a shared "
            "host without a quota, others' work shows as CONTENDED"
        )
    status = WARN if min(f.cpus, f.cpu_quota or f.cpus) < 2 else OK
    return Row("cpu", status, found, needed, fix if status == WARN or f.cpu_quota else "")


def _found(check: str, fact: str, needed: str, fix: str) -> Callable[[Facts], Row]:
    """A check that a program or library is on this machine (its path, else WARN with ``fix``)."""

    def run(f: Facts) -> Row:
        path = getattr(f, fact)
        return Row(check, OK, path, needed) if path else Row(check, WARN, "none", needed, fix)

    run.__name__ = f"check_{fact}"
    return run


RESTORE = ", or make restore on a re-created rental instance (else {} prints a skip line)"
check_cxx = _found(
    "c++",
    "cxx",
    "a C++ compiler (torch.compile's CPU backend, chapter 6)",
    "apt-get install g++ (else chapter 6's compile step fails)",
)
check_nginx = _found(
    "nginx",
    "nginx",
    "nginx (chapter 9's reverse proxy in front of Triton)",
    "apt-get install nginx" + RESTORE.format("that step"),
)
check_libb64 = _found(
    "libb64",
    "libb64",
    "libb64.so.0d (perf_analyzer's load sweep, chapter 9)",
    "apt-get install libb64-0d" + RESTORE.format("the perf_analyzer sweep"),
)


def check_chromium(f: Facts) -> Row:
    needed = "chromium + chromedriver (the book's browser test only; required in CI)"
    if f.chromium and f.chromedriver:
        return Row("chromium", OK, f.chromium, needed)
    found = "chromium only" if f.chromium else "none"
    if "ubuntu" in f.distro.split():
        how = (
            "optional: Ubuntu's chromium is a snap that containers cannot run, so leave it out (the "
            "book still builds; tests/book skips its browser checks)"
        )
    else:
        how = (
            "optional off CI: apt-get install chromium chromium-driver (make setup does it as "
            "root); without it tests/book skips its browser checks"
        )
    return Row("chromium", WARN if f.ci else INFO, found, needed, how)


def check_kernel(f: Facts) -> Row:
    """The kernel `make kernel` registered: still there after the instance was re-created?"""
    needed = "the kernel 'course' of make kernel (only for a JupyterLab you did not start)"
    if not f.kernel_spec:
        return Row("kernel", INFO, "not registered by make kernel", needed, "make kernel")
    found, fix = f.kernel_spec, ""
    if f.kernel_spec_exists and f.kernel_mode == "full" and not f.gpus:
        found = f"{f.kernel_spec} pins COURSE_MODE=full"
        fix = (
            "this machine has no GPU (an instance started without its card?): every chapter "
            "would run at full size on the CPU, for hours. make kernel (without MODE) lets the "
            "course choose"
        )
    elif not f.kernel_spec_exists:
        found = f"missing: {f.kernel_spec}"
        fix = (
            "make kernel registered it there, and it is gone (a re-created instance loses the "
            "system disk): make restore registers it again as it was"
        )
    elif not f.kernel_python_exists:
        found = f"{f.kernel_spec} starts a missing {f.kernel_python}"
        fix = "the environment it points at is gone: make setup, then make kernel"
    return Row("kernel", WARN if fix else OK, found, needed, fix)


def check_frameworks(f: Facts) -> Row:
    """A preinstalled image (a rental's 'OneFlow' image): can its Python serve the course as it is?"""
    needed = "the pins of requirements.txt"
    wanted = [n for n in PINNED_FRAMEWORKS if n in f.pins]
    if not any(n in f.packages for n in wanted):
        return Row("frameworks", INFO, "none installed yet", needed, "make setup installs the pins")
    found = ", ".join(f"{n} {f.packages.get(n, '-')}" for n in wanted)
    off = [n for n in wanted if f.packages.get(n) != f.pins[n]]
    if not off:
        return Row("frameworks", OK, found, needed)
    fix = (
        "this Python differs from the pins: let make setup build .venv beside it (the image's "
        "own environment stays as it is) rather than installing into it"
    )
    return Row("frameworks", INFO, found, ", ".join(f"{n} {f.pins[n]}" for n in wanted), fix)


CHECKS = (
    check_platform,
    check_python,
    check_libpython,
    check_glibc,
    check_disk,
    check_shm,
    check_gpu,
    check_driver,
    check_memory,
    check_gpu_memory,
    check_mode,
    check_cpu,
    check_cxx,
    check_nginx,
    check_libb64,
    check_chromium,
    check_kernel,
    check_frameworks,
)


def run_checks(f: Facts) -> list[Row]:
    """Every check over one set of facts."""
    return [check(f) for check in CHECKS]


def render(rows: list[Row], width: int = 44) -> str:
    """The table: check | found | needed | how to fix (columns wrapped; the last at ``width``)."""
    heads = ("check", "found", "needed", "how to fix")
    cells = [(f"{r.check} [{r.status}]", r.found, r.needed, r.fix or "-") for r in rows]
    w = [max(len(heads[0]), *(len(c[0]) for c in cells))]
    w += [min(32, max(len(heads[i]), *(len(c[i]) for c in cells))) for i in (1, 2)]
    lines = []

    def emit(cols: tuple[str, ...]) -> None:
        wrapped = [textwrap.wrap(col, size) or [""] for col, size in zip(cols, (*w, width))]
        for i in range(max(len(c) for c in wrapped)):
            parts = [c[i] if i < len(c) else "" for c in wrapped]
            lines.append(
                f"{parts[0]:<{w[0]}} | {parts[1]:<{w[1]}} | {parts[2]:<{w[2]}} | {parts[3]}".rstrip()
            )

    emit(heads)
    lines.append("-+-".join("-" * x for x in w) + "-+-" + "-" * width)
    for c in cells:
        emit(c)
    return "\n".join(lines)


# -- gathering the facts of this machine ----------------------------------------------------------


def _run(cmd: list[str], timeout: float = 30) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


_PROBE = r"""
import json, sys, sysconfig, os
from pathlib import Path
cfg = sysconfig.get_config_var
# as helpers.serving.triton_server.libpython_dir looks for it (the stub loads libpython3.10.so.1.0)
name = cfg("INSTSONAME") or "libpython%d.%d.so.1.0" % sys.version_info[:2]
lib = None
for d in (cfg("LIBDIR"), os.path.join(sys.base_prefix, "lib"), os.path.join(sys.prefix, "lib")):
    if d and ".so" in name and os.path.isfile(os.path.join(d, name)):
        lib = os.path.join(d, name)
        break
try:
    import venv, ensurepip  # noqa
    has_venv = True
except ImportError:
    has_venv = False
try:
    from importlib import metadata
    pkgs = {d.metadata["Name"].lower(): d.version for d in metadata.distributions() if d.metadata["Name"]}
except Exception:
    pkgs = {}
print(json.dumps({"version": list(sys.version_info[:2]), "libpython": lib, "has_venv": has_venv,
                  "packages": pkgs}))
"""


def _pins(requirements: Path) -> dict[str, str]:
    pins = {}
    for line in requirements.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;#]+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(3)
    return pins


def _glibc() -> tuple[int, int] | None:
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    m = re.search(r"glibc (\d+)\.(\d+)", libc or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _libraries(name: str) -> list[str]:
    """Where ``ldconfig -p`` finds the x86-64 ``name``, then the usual library folders."""
    out = _run(["ldconfig", "-p"]) or ""
    found = re.findall(re.escape(name) + r" \(libc6,x86-64\) => (\S+)", out)
    folders = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
    return found + [str(Path(d, name)) for d in folders if Path(d, name).exists()]


def _glibcxx() -> int | None:
    for p in _libraries("libstdc++.so.6"):
        try:
            found = [int(n) for n in re.findall(rb"GLIBCXX_3\.4\.(\d+)", Path(p).read_bytes())]
        except OSError:
            continue
        if found:
            return max(found)
    return None


def _gpus() -> tuple[bool, tuple, tuple[int, ...] | None, int | None]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False, (), None, None
    out = _run(
        [smi, "--query-gpu=name,compute_cap,driver_version,memory.total", "--format=csv,noheader"]
    )
    if out is None:  # drivers before 510 have no compute_cap field
        out = _run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        out = "\n".join(
            f"{a},?,{b},{c}"
            for a, b, c in (ln.rsplit(",", 2) for ln in (out or "").splitlines() if ln)
        )
    gpus, driver, memory = [], None, None
    for line in out.splitlines():
        name, cc, drv, mem = (s.strip() for s in line.split(","))
        m = re.match(r"(\d+)\.(\d+)", cc)
        gpus.append((name, (int(m.group(1)), int(m.group(2))) if m else None))
        driver = tuple(int(x) for x in re.findall(r"\d+", drv)) or None
        mib = re.match(r"(\d+)", mem)
        if memory is None and mib:
            memory = int(mib.group(1))  # "24564 MiB"
    return True, tuple(gpus), driver, memory


def _distro() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    fields = dict(re.findall(r'^(ID|ID_LIKE)="?([^"\n]*)"?$', text, re.M))
    return f"{fields.get('ID', '')} {fields.get('ID_LIKE', '')}".strip()


def _kernel(spec: str) -> tuple[bool, str | None, bool, str | None]:
    """Whether the kernel spec folder exists, the Python its kernel.json starts, whether that
    exists, and the COURSE_MODE its environment pins (None: the course chooses)."""
    if not spec:
        return False, None, False, None
    try:
        data = json.loads((Path(spec) / "kernel.json").read_text())
        argv = data["argv"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, None, False, None
    python = argv[0] if argv else None
    mode = (data.get("env") or {}).get("COURSE_MODE") or None
    return True, python, bool(python) and Path(python).exists(), mode


def _lxcfs() -> bool:
    """Whether /proc/stat is lxcfs's per-container view (mounted over the host's)."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return False
    return any(ln.startswith("lxcfs /proc/stat ") for ln in mounts.splitlines())


def gather(venv: str = ".venv", python310: str = "", kernel_spec: str = "") -> Facts:
    """The facts of this machine. ``venv``: the course's environment; ``python310``: Make's PYTHON310;
    ``kernel_spec``: where ``make kernel`` registered the kernel (remembered by the Makefile)."""
    vpy = Path(venv) / "bin" / "python"
    python = str(vpy) if vpy.exists() else (python310 or None)
    probe = {}
    if python:
        out = _run([python, "-c", _PROBE], timeout=120)
        probe = json.loads(out) if out else {}
    disk = subprocess.run(
        ["bash", str(ROOT / "tools" / "check_disk.sh"), venv], capture_output=True, text=True
    )
    probe_dir = Path(venv) if Path(venv).exists() else Path(venv).resolve().parent
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    try:
        shm = os.statvfs("/dev/shm")
        shm_bytes = shm.f_blocks * shm.f_frsize
    except OSError:
        shm_bytes = None
    has_smi, gpus, driver, gpu_mib = _gpus()
    spec_exists, kernel_python, kernel_python_ok, kernel_mode = _kernel(kernel_spec)
    host, host_where = hardware.host_memory()
    cg = cgroup.find()
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return Facts(
        system=platform.system(),
        machine=platform.machine(),
        venv=venv,
        venv_exists=vpy.exists(),
        python=python if probe else None,
        python_version=tuple(probe["version"]) if probe else None,
        libpython=probe.get("libpython"),
        python_has_venv=probe.get("has_venv"),
        packages=probe.get("packages", {}),
        pins=_pins(ROOT / "requirements.txt"),
        glibc=_glibc(),
        glibcxx=_glibcxx(),
        disk_rc=disk.returncode,
        disk_message=" ".join((disk.stdout + disk.stderr).split()),
        disk_free_gb=shutil.disk_usage(probe_dir).free / 2**30,
        shm_bytes=shm_bytes,
        nvidia_smi=has_smi,
        gpus=gpus,
        driver=driver,
        cxx=shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"),
        chromium=shutil.which("chromium") or shutil.which("chromium-browser"),
        chromedriver=shutil.which("chromedriver"),
        nginx=shutil.which("nginx")
        or next(
            (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
        ),
        libb64=next(iter(_libraries("libb64.so.0d")), None),
        ci=os.environ.get("CI", "").lower() == "true",
        distro=_distro(),
        kernel_spec=kernel_spec,
        kernel_spec_exists=spec_exists,
        kernel_python=kernel_python,
        kernel_python_exists=kernel_python_ok,
        kernel_mode=kernel_mode,
        host_memory=host,
        host_memory_where=host_where,
        gpu_memory_mib=gpu_mib,
        cpus=cpus,
        cpu_quota=cgroup.cpu_quota(cg),
        cgroup_version=cg.version if cg else None,
        lxcfs=_lxcfs(),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=os.environ.get("VENV", ".venv"))
    ap.add_argument("--python310", default="", help="the Python 3.10 make would use")
    ap.add_argument("--kernel-spec", default="", help="where make kernel registered the kernel")
    ap.add_argument("--serving-ok", action="store_true", help="exit 0 if nvidia-pytriton fits here")
    args = ap.parse_args(argv)
    if args.serving_ok:
        return 0 if serving_ok(Facts(glibc=_glibc(), glibcxx=_glibcxx())) else 1
    try:
        rows = run_checks(gather(args.venv, args.python310, args.kernel_spec))
    except Exception as exc:  # a bug in the doctor must not stop an install
        print(f"doctor: could not check this machine ({type(exc).__name__}: {exc}); carrying on")
        return 0
    print(render(rows))
    failed = [r.check for r in rows if r.status == FAIL]
    warned = [r.check for r in rows if r.status == WARN]
    if failed:
        print(f"doctor: {', '.join(failed)} blocks the install; see 'how to fix' above.")
        return 1
    note = f" ({len(warned)} warning(s): {', '.join(warned)})" if warned else ""
    print(f"doctor: nothing blocks the install{note}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
