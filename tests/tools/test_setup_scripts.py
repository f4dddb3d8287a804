"""tools/check_disk.sh, which `make setup` leans on, and how `make test` runs its pytest processes."""

# course-test-group: no-oneflow
# (OneFlow appears here as a group name and a stand-in module; the pytest runs are subprocesses)

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRA = ("book", "gpu")  # run apart, never by a group


def run(venv: Path, need_gb: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_MIN_FREE_GB=need_gb)
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "check_disk.sh"), str(venv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_enough_room_passes(tmp_path: Path) -> None:
    out = run(tmp_path, "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout


def test_too_little_room_stops_with_the_reason_and_a_way_out(tmp_path: Path) -> None:
    out = run(tmp_path, "1000000")  # a petabyte: no machine running this has it free
    assert out.returncode == 1
    assert "not enough free disk" in out.stdout and "VENV=" in out.stdout


def test_zero_skips_the_check(tmp_path: Path) -> None:
    assert run(tmp_path, "0").returncode == 0


def test_the_makefile_checks_before_installing() -> None:
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP):", 1)[1]
    assert recipe.index("check_disk.sh") < recipe.index("$(IPIP) install")


def test_make_test_runs_each_pytest_process_once() -> None:
    """No wrapper reruns a process that crashed: a native crash fails `make test` (and CI)."""
    assert "rerun" not in (ROOT / "Makefile").read_text().lower()
    assert not (ROOT / "tools" / "rerun_on_crash.sh").exists()
    for target in ("test", "test-unit"):
        dry = _dry_run(target, "VENV=/nonexistent-venv", "GPU=0").splitlines()
        runs = [ln for ln in dry if " -m pytest " in ln]
        # the OneFlow tests in a process of their own (the Makefile's comment says why)
        for group in ("no-oneflow", "oneflow"):
            assert sum(ln.count(f"COURSE_TEST_GROUP={group} ") for ln in runs) == 1, (target, runs)


def _tests_conftest():
    import importlib.util

    # by path: "conftest" in sys.modules may be another folder's (tests/gpu has one)
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    tests_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests_conftest)
    return tests_conftest


def test_unit_test_groups_split_every_file_once() -> None:
    """Each test file lands in exactly one of the two unit-test processes; a file that names
    OneFlow only as a label declares its group."""
    conftest = _tests_conftest()
    uses_oneflow, file_group = conftest.uses_oneflow, conftest.file_group

    tests = ROOT / "tests"
    files = sorted(p for p in tests.rglob("test_*.py") if p.parts[len(tests.parts)] not in EXTRA)
    groups = {f.name: file_group(f.read_text()) for f in files}
    assert set(groups.values()) == set(conftest.TEST_GROUPS)
    assert groups["test_graphs.py"] == "oneflow" and groups["test_data.py"] == "no-oneflow"
    # the guards of the settings' effects run in the group a developer runs first
    for name in ("test_timer.py", "test_comparison.py", "test_triton_repo.py", "test_ladder.py"):
        assert groups[name] == "no-oneflow", name
    assert groups["test_timer_oneflow.py"] == groups["test_comparison_oneflow.py"] == "oneflow"
    assert uses_oneflow("def test_x(flow):") and not uses_oneflow("import torch  # workflow")
    declared = "# course-test-group: no-oneflow\ndef test_x(flow): ..."
    assert file_group(declared) == "no-oneflow" and file_group("import oneflow") == "oneflow"
    for bad in ("# course-test-group: gpu\n", "# course-test-group: oneflow\n" * 2):
        with pytest.raises(pytest.UsageError, match="declares"):
            file_group(bad)


def _pytest_in(folder: Path, group: str, *args: str) -> subprocess.CompletedProcess:
    """pytest with the course's tests/conftest.py on the test files of ``folder``, in a subprocess."""
    import sys

    shutil.copy(ROOT / "tests" / "conftest.py", folder / "conftest.py")
    env = dict(os.environ, COURSE_TEST_GROUP=group)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=folder,
    )


def test_named_files_are_filtered_and_a_test_that_loads_oneflow_fails(tmp_path: Path) -> None:
    """In the no-oneflow process: a named file of the other group is not imported (one skipped
    test says which group), and the test after which OneFlow is loaded fails, once, so a wrong
    declaration cannot pass unseen; a stand-in put back by monkeypatch is no offence."""
    (tmp_path / "test_other.py").write_text(
        "raise RuntimeError('the other group was imported')\n\ndef test_x(flow):\n    pass\n"
    )
    (tmp_path / "test_declared.py").write_text(
        "# course-test-group: no-oneflow\n"
        "import sys, types\n\n"
        "def test_a_stand_in_put_back(monkeypatch):\n"
        "    monkeypatch.setitem(sys.modules, 'oneflow', types.ModuleType('oneflow'))\n\n"
        "def test_loads_it():\n"
        "    sys.modules['oneflow'] = types.ModuleType('oneflow')\n\n"
        "def test_after():\n"
        "    pass\n"
    )
    out = _pytest_in(tmp_path, "no-oneflow", "test_other.py", "test_declared.py")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "3 passed, 1 skipped, 1 error" in out.stdout
    assert "the other group was imported" not in out.stdout
    assert "test_other.py is in the oneflow test group" in out.stdout
    assert "left out 1 named file(s) of the other group: test_other.py" in out.stdout
    assert "ERROR at teardown of test_loads_it" in out.stdout
    assert "OneFlow was imported in the no-oneflow test process" in out.stdout
    bad = _pytest_in(tmp_path, "gpu", "test_declared.py")
    assert bad.returncode != 0 and "COURSE_TEST_GROUP must be one of" in bad.stderr


def test_no_oneflow_group_never_imports_oneflow(tmp_path: Path) -> None:
    """Collecting the no-oneflow group imports no OneFlow (a crash there cannot come from it)."""
    import os
    import sys

    code = (
        "import sys, pytest\n"
        "rc = pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', "
        f"{str(ROOT / 'tests')!r}, '--ignore', {str(ROOT / 'tests' / 'book')!r}])\n"
        "print('ONEFLOW_LOADED', 'oneflow' in sys.modules)\n"
    )
    env = dict(os.environ, COURSE_TEST_GROUP="no-oneflow")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert "ONEFLOW_LOADED False" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_distclean_never_deletes_an_environment_it_did_not_create(tmp_path: Path) -> None:
    """`make distclean VENV=$CONDA_PREFIX` (the documented conda route) must keep the user's env."""
    conda = tmp_path / "conda-env"
    (conda / "conda-meta").mkdir(parents=True)
    own = tmp_path / "my-venv"
    own.mkdir()
    made = tmp_path / "made-by-make"
    made.mkdir()
    (made / ".course-created").write_text("x")
    for venv in (conda, own):
        out = subprocess.run(
            ["make", "-s", "-C", str(ROOT), "distclean", f"VENV={venv}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert venv.exists() and out.returncode != 0, (venv, out.stdout, out.stderr)
        assert "not created by this Makefile" in out.stdout
    # the refusal comes first: nothing else (the rendered book, the ledger) was removed either
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "distclean", f"VENV={made}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0 and f"rm -rf {made}" in dry.stdout


def test_ci_pins_quick_mode_and_runs_the_checks() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "COURSE_MODE=quick" in ci and "make test MODE=quick" in ci and "make check" in ci


def test_missing_system_packages_fail_in_ci_only(tmp_path: Path) -> None:
    """In CI a missing Chromium is a failure, not 18 silently skipped browser tests."""
    import os

    script = str(ROOT / "tools" / "install_system_deps.sh")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    # no apt-get, and id reports a normal user: the script can only report what is missing
    (fake_bin / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake_bin / "id").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake_bin}:{os.environ['PATH']}",
        COURSE_SYSTEM_PACKAGES="course-no-such-package",
    )
    env.pop("CI", None)  # a reader's machine (this test itself runs under CI=true in CI)
    reader = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
    assert (
        reader.returncode == 0 and "missing system packages course-no-such-package" in reader.stdout
    )
    ci = subprocess.run(
        ["bash", script], capture_output=True, text=True, env=dict(env, CI="true"), timeout=60
    )
    assert ci.returncode == 1 and "CI needs the system packages course-no-such-package" in ci.stderr


def test_setup_adds_tensorrt_on_gpu_machines_only() -> None:
    """`make setup GPU=1` installs the TensorRT that ORT's TensorRT EP links (libnvinfer.so.10)."""
    with_gpu = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", "GPU=1", "VENV=/nonexistent-venv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 'install --disable-pip-version-check "tensorrt-cu12==10.' in with_gpu.stdout
    assert "import tensorrt" in with_gpu.stdout
    without = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", "GPU=0", "VENV=/nonexistent-venv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "tensorrt" not in without.stdout


# `make wheelhouse` / `make setup WHEELHOUSE=dir`: a workshop room installs once-downloaded wheels offline.
def _dry_run(*args: str) -> str:
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _requested(line: str) -> set[str]:
    """What a pip install/download line asks for: its package specs, and -r for a requirements file."""
    import shlex

    words = shlex.split(line.split(" -m pip ", 1)[1].replace("$req", "requirements.txt"))
    wanted, skip = set(), False
    for word in words[1:]:
        if skip:
            skip = False
            continue
        if word in ("-d", "--find-links", "-r"):
            skip = True
            wanted |= {"-r requirements.txt"} if word == "-r" else set()
            continue
        if not word.startswith("-"):
            wanted.add(word)
    return wanted


def test_wheelhouse_downloads_everything_setup_installs_and_setup_uses_only_it(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    setup = _dry_run("setup", f"WHEELHOUSE={wh}", "VENV=/nonexistent-venv", "GPU=0")
    installs = [ln for ln in setup.splitlines() if " -m pip install" in ln and "echo" not in ln]
    assert len(installs) >= 4
    for line in installs:  # every install reads the wheelhouse only
        assert "--no-index" in line, line
        if " -e ." not in line:
            assert f"--find-links {wh}" in line, line
    downloads = [
        ln for ln in _dry_run("wheelhouse", f"WHEELHOUSE={wh}").splitlines() if " download " in ln
    ]
    assert all(f"-d {wh}" in ln for ln in downloads)
    asked = set().union(*(_requested(ln) for ln in installs if " -e ." not in ln))
    fetched = set().union(*(_requested(ln) for ln in downloads))
    assert asked and asked == fetched, (asked, fetched)
    # without WHEELHOUSE the install uses the index as before
    plain = _dry_run("setup", "VENV=/nonexistent-venv", "GPU=0")
    assert "--find-links" not in plain


def test_offline_install_from_a_tiny_wheelhouse(tmp_path: Path) -> None:
    """A wheelhouse of one locally built wheel installs into a scratch venv with no network at all."""
    import shutil
    import sys

    src = tmp_path / "src"
    (src / "course_tiny").mkdir(parents=True)
    (src / "course_tiny" / "__init__.py").write_text("VALUE = 42\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "course-tiny"\nversion = "1.0"\n'
    )
    wh = tmp_path / "wh"
    # no network, no machine-wide pip config (this machine's own local indexes included)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        PIP_INDEX_URL="http://127.0.0.1:9/simple",  # named in pip's output if it is ever consulted
    )
    pip = [sys.executable, "-m", "pip"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wh), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    venv = tmp_path / "scratch"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # the flags `make setup WHEELHOUSE=...` passes to every pip install
    setup = _dry_run("setup", f"WHEELHOUSE={wh}", "VENV=/nonexistent-venv", "GPU=0")
    flags = f"--no-index --find-links {wh}"
    assert flags in setup
    isolate = ["unshare", "-n"] if os.getuid() == 0 and shutil.which("unshare") else []
    if isolate and subprocess.run([*isolate, "true"], capture_output=True).returncode != 0:
        isolate = []  # no permission for a network namespace here: the dead proxy still guards

    def install(spec: str) -> subprocess.CompletedProcess:
        cmd = [*isolate, str(venv / "bin" / "python"), "-m", "pip", "install", *flags.split(), spec]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)

    out = install("course-tiny==1.0")
    assert out.returncode == 0, out.stdout + out.stderr
    check = [str(venv / "bin" / "python"), "-c", "import course_tiny; print(course_tiny.VALUE)"]
    assert subprocess.run(check, capture_output=True, text=True).stdout.strip() == "42"
    # and nothing else can come in: a package missing from the wheelhouse is not fetched
    missing = install("course-tiny-absent==1.0")
    assert missing.returncode != 0 and "No matching distribution" in missing.stderr
    for run in (out, missing):  # no index was consulted, not even the (dead) one configured
        assert "127.0.0.1:9" not in run.stdout + run.stderr, run.stdout + run.stderr


# -- Pins of the bootstrap, system packages per distribution, pip's folders, remembered settings ----------


def _bootstrap() -> list[str]:
    import shlex

    line = next(
        ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("BOOTSTRAP")
    )
    return shlex.split(line.split(":=", 1)[1])


def test_bootstrap_pip_and_setuptools_are_past_their_published_vulnerabilities() -> None:
    """pip >= 26.2 (pip < 25 had six CVEs), setuptools >= 78.1.1 and < 81 (flowvision's pkg_resources)."""
    specs = {re.split(r"[<>=!]", s, maxsplit=1)[0]: s for s in _bootstrap()}
    assert set(specs) == {"pip", "setuptools", "wheel"}
    assert ">=26.2" in specs["pip"] and "<25" not in specs["pip"]
    assert ">=78.1.1" in specs["setuptools"] and "<81" in specs["setuptools"]
    makefile = (ROOT / "Makefile").read_text()
    assert "CVE-2026-13346" in makefile and "flowvision" in makefile  # the reasons are recorded


def _fake_apt(tmp_path: Path, distro: str, broken: str = "") -> tuple[dict, Path]:
    """A root shell with a fake apt-get and dpkg-query (a package 'installs' by leaving a file)."""
    fake, db, log = tmp_path / "bin", tmp_path / "db", tmp_path / "apt.log"
    fake.mkdir()
    db.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 0\n")
    (fake / "dpkg-query").write_text(
        f'#!/bin/sh\neval p=\\${{$#}}\n[ -e {db}/"$p" ] && echo "install ok installed"\nexit 0\n'
    )
    (fake / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        '[ "$1" = update ] && exit 0\n'
        "eval p=\\${$#}\n"
        f'[ "$p" = "{broken}" ] && exit 100\n'
        f'touch {db}/"$p"\n'
    )
    for f in fake.iterdir():
        f.chmod(0o755)
    release = tmp_path / "os-release"
    release.write_text(distro)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "COURSE_SYSTEM_PACKAGES")}
    env.update(PATH=f"{fake}:{os.environ['PATH']}", COURSE_OS_RELEASE=str(release))
    return env, log


def test_system_packages_on_ubuntu_install_what_chapter_9_needs_without_chromium(
    tmp_path: Path,
) -> None:
    env, log = _fake_apt(tmp_path, "ID=ubuntu\nID_LIKE=debian\n", broken="libb64-0d")
    script = str(ROOT / "tools" / "install_system_deps.sh")
    out = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    calls = log.read_text().splitlines()
    installs = [c.split()[-1] for c in calls if c.startswith("install")]
    # one package per call: libb64-0d failing did not stop nginx
    assert installs == ["libb64-0d", "nginx"], calls
    assert "Chromium is a snap" in out.stdout and "optional" in out.stdout
    assert "could not install libb64-0d" in out.stdout
    assert "libb64-0d missing: the chapter steps that need it will print a skip line" in out.stdout


def test_system_packages_on_debian_include_the_browser_and_ci_requires_them(tmp_path: Path) -> None:
    env, log = _fake_apt(tmp_path, "ID=debian\n", broken="chromium-driver")
    script = str(ROOT / "tools" / "install_system_deps.sh")
    out = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
    installs = [c.split()[-1] for c in log.read_text().splitlines() if c.startswith("install")]
    assert {"nginx", "libb64-0d", "chromium", "chromium-driver", "fonts-wqy-microhei"} == set(
        installs
    )
    # off CI a missing browser package is one clear line, not a failure
    assert out.returncode == 0 and "browser checks will be skipped (optional)" in out.stdout
    ci = subprocess.run(
        ["bash", script], capture_output=True, text=True, env=dict(env, CI="true"), timeout=60
    )
    assert ci.returncode == 1 and "CI needs the system packages chromium-driver" in ci.stderr


def _pip_dirs(venv: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k not in ("PIP_CACHE_DIR", "TMPDIR")}
    full.update(env)
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "check_disk.sh"), "--pip-dirs", str(venv)],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_pip_cache_and_temporary_files_follow_the_environment_onto_its_disk(tmp_path: Path) -> None:
    """A rental: the environment on the data disk, ~/.cache and /tmp on the small system disk."""
    if os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev:
        pytest.skip("/dev/shm and /tmp are one filesystem here: no second disk to stand for one")
    # the same disk as ~/.cache and /tmp (a laptop): pip keeps its defaults
    assert _pip_dirs(tmp_path / "venv", HOME=str(tmp_path)) == ""
    data_disk = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        venv = data_disk / "envs" / "fast-inference"
        assert _pip_dirs(venv, HOME=str(tmp_path)) == (
            f"PIP_CACHE_DIR={venv}/.pip-cache TMPDIR={venv}/.pip-tmp"
        )
        # what the reader set is kept
        assert _pip_dirs(venv, HOME=str(tmp_path), TMPDIR="/mine") == (
            f"PIP_CACHE_DIR={venv}/.pip-cache"
        )
        # and make setup hands them to every pip install (and to the disk check)
        dry = _dry_run("setup", f"VENV={venv}", "GPU=0")
        installs = [ln for ln in dry.splitlines() if " -m pip install" in ln and "echo" not in ln]
        assert installs and all(
            ln.startswith(f"env PIP_CACHE_DIR={venv}/.pip-cache") for ln in installs
        )
        assert f"TMPDIR={venv}/.pip-tmp bash tools/check_disk.sh" in dry
        assert f"rm -rf {venv}/.pip-tmp" in dry
    finally:
        shutil.rmtree(data_disk, ignore_errors=True)


def _make(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    # a make that runs this test (make test MODE=quick) passes its variables down through
    # MAKEFLAGS and the environment; the dry runs here must see only what they are given
    inherited = {"VENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MODE", "NO_GPU", "COURSE_MODE"}
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_a_venv_given_once_is_remembered_by_the_next_make_commands(tmp_path: Path) -> None:
    """make setup VENV=$CONDA_PREFIX once; make lab, book, test then use it, not a second .venv."""
    import sys

    conda = tmp_path / "envs" / "fast-inference"
    (conda / "bin").mkdir(parents=True)
    (conda / "bin" / "python").symlink_to(sys.executable)
    (conda / ".course-installed").write_text("")  # installed: setup has nothing left to do
    local = tmp_path / "local.mk"
    out = _make("setup", f"VENV={conda}", f"LOCAL_MK={local}", "GPU=0")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"VENV ?= {conda}" in local.read_text() and "remembered VENV" in out.stdout
    for target in ("lab", "book", "test"):
        dry = _make("-n", target, f"LOCAL_MK={local}", "GPU=0")
        assert dry.returncode == 0, dry.stderr
        assert f"{conda}/bin/" in dry.stdout and ".venv/bin" not in dry.stdout, target
        assert "-m venv" not in dry.stdout  # no second environment is created
    # the command line still wins
    other = _make("-n", "lab", f"LOCAL_MK={local}", f"VENV={tmp_path}/other").stdout
    assert f"{tmp_path}/other/bin/" in other
    doctor = _make("-n", "doctor", f"LOCAL_MK={local}").stdout
    assert f"--venv {conda}" in doctor and "remembered in" in doctor
    # VENV=.venv forgets it (the line setup runs; remember.sh with no value removes the setting)
    dry = _make("-n", "setup", "VENV=.venv", f"LOCAL_MK={local}", "GPU=0").stdout
    lines = [ln.strip() for ln in dry.splitlines()]
    assert f"bash tools/remember.sh {local} VENV" in lines, dry[-500:]
    forget = subprocess.run(
        ["bash", str(ROOT / "tools" / "remember.sh"), str(local), "VENV"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert forget.returncode == 0 and not local.exists(), forget.stdout


def test_restore_puts_back_the_system_packages_and_the_kernel_as_registered(tmp_path: Path) -> None:
    local = tmp_path / "local.mk"
    local.write_text(
        f"KERNEL_ARGS ?= MODE=full KERNEL_INSTALL=--prefix={tmp_path}/k\n"
        f"KERNEL_SPEC ?= {tmp_path}/k/share/jupyter/kernels/course\n"
    )
    dry = _make("-n", "restore", f"LOCAL_MK={local}", "VENV=/nonexistent-venv", "GPU=0")
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout
    assert text.index("install_system_deps.sh") < text.index("ipykernel install")
    assert f"install --prefix={tmp_path}/k --name course" in text and "COURSE_MODE full" in text
    assert f'--kernel-spec "{tmp_path}/k/share/jupyter/kernels/course"' in text  # then the doctor
    # nothing registered: restore says so instead of registering a kernel nobody asked for
    bare = _make("-n", "restore", f"LOCAL_MK={tmp_path}/none.mk", "VENV=/nonexistent-venv")
    assert "ipykernel install" not in bare.stdout and "no make kernel registration" in bare.stdout


def test_kernel_pins_a_mode_and_hides_the_gpu_only_when_asked(tmp_path: Path) -> None:
    """make kernel without MODE lets every chapter choose; NO_GPU=1 is a quick-mode hub's kernel."""
    local = f"LOCAL_MK={tmp_path}/local.mk"
    plain = _make("-n", "kernel", local, "VENV=/nonexistent-venv", "GPU=0").stdout
    assert "ipykernel install" in plain
    assert "COURSE_MODE" not in plain and "CUDA_VISIBLE_DEVICES" not in plain
    hub = _make("-n", "kernel", local, "VENV=/nonexistent-venv", "GPU=0", "MODE=quick", "NO_GPU=1")
    assert '--env COURSE_MODE quick --env CUDA_VISIBLE_DEVICES ""' in hub.stdout
    assert 'KERNEL_ARGS "MODE=quick NO_GPU=1 KERNEL_INSTALL=--user"' in hub.stdout  # for restore


# -- make audit: pip-audit's report read honestly ------------------------------------------------------


def _audit_module():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("course_audit", ROOT / "tools" / "audit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["course_audit"] = module
    spec.loader.exec_module(module)
    return module


def test_audit_never_reads_packages_it_could_not_check_as_clean() -> None:
    audit = _audit_module()
    not_found = "Dependency not found on PyPI and could not be audited: torch (2.10.0)"
    nothing = {"dependencies": [{"name": "torch", "skip_reason": not_found}], "fixes": []}
    status, lines = audit.verdict(nothing)
    assert status == 2 and "NOTHING WAS CHECKED" in lines[-1]
    clean = {"name": "torch", "version": "2.10.0", "vulns": []}
    partial = {"dependencies": [clean, {"name": "onnx", "skip_reason": "x"}]}
    assert audit.verdict(partial)[0] == 2
    # the course's own package is never on PyPI: its skip does not count
    own = {"name": audit.OWN_PACKAGE, "skip_reason": "not on PyPI"}
    assert audit.verdict({"dependencies": [clean, own]})[0] == 0


def test_audit_accepts_only_the_pins_requirements_txt_explains() -> None:
    audit = _audit_module()
    onnx = {
        "name": "onnx",
        "version": "1.17.0",
        "vulns": [{"id": "GHSA-x", "aliases": ["CVE-2025-51480"], "fix_versions": ["1.21.0"]}],
    }
    status, lines = audit.verdict({"dependencies": [onnx]})
    assert status == 0 and any("accepted" in ln and "CVE-2025-51480" in ln for ln in lines)
    assert any("why onnx is accepted" in ln for ln in lines)
    newer = dict(onnx, version="1.18.0")  # another version is not what the reason was written for
    assert audit.verdict({"dependencies": [newer]})[0] == 1
    torch = dict(onnx, name="torch", version="2.10.0")
    status, lines = audit.verdict({"dependencies": [onnx, torch]})
    assert status == 1 and any(ln.strip().startswith("FOUND") and "torch" in ln for ln in lines)
    # every accepted pin is the pin of requirements.txt, and its comment names the package's CVEs
    req = (ROOT / "requirements.txt").read_text()
    for name, (version, _why) in audit.ACCEPTED.items():
        assert f"\n{name}=={version}\n" in req, name
        assert f"# - {name} {version}:" in req, name
    assert all(cve in req for cve in ("CVE-2025-51480", "CVE-2026-27489", "CVE-2026-34445"))
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'name = "{audit.OWN_PACKAGE}"' in pyproject


def test_audit_says_when_the_service_cannot_be_reached(tmp_path: Path) -> None:
    import sys

    fake = tmp_path / "pip-audit"
    fake.write_text(
        "#!/bin/sh\necho 'requests.exceptions.ConnectionError: Failed to resolve api.osv.dev' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    cmd = [sys.executable, str(ROOT / "tools" / "audit.py"), "--pip-audit", str(fake)]
    out = subprocess.run(
        [*cmd, "--service", "osv", "--requirements", str(ROOT / "requirements.txt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "could not reach api.osv.dev" in out.stdout, out.stdout
    # a pip-audit that writes its report: the report is read, not pip-audit's own verdict
    report = '{"dependencies": [{"name": "numpy", "skip_reason": "not found"}]}'
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        f"echo '{report}' > \"$out\"\necho 'No known vulnerabilities found'\n"
    )
    out = subprocess.run(
        [*cmd, "--python", sys.executable], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "NOTHING WAS CHECKED" in out.stdout, out.stdout


def test_audit_is_never_part_of_check_test_or_ci() -> None:
    """CI must pass offline: the audit needs the internet."""
    text = (ROOT / "Makefile").read_text()
    for target in ("\ncheck: setup", "\ntest: test-unit", "\ntest-unit: setup"):
        assert "audit" not in text.split(target, 1)[1].split("\n\n", 1)[0], target
    assert "audit" not in (ROOT / ".ci" / "run").read_text()
    assert "\naudit:" in text and "pip-audit==" in text
