"""tools/check_disk.sh, which `make setup` leans on, and how `make test` runs its pytest processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    assert recipe.index("check_disk.sh") < recipe.index("$(PIP) install")


def test_make_test_runs_each_pytest_process_once() -> None:
    """No wrapper reruns a process that crashed: a native crash fails `make test` (and CI)."""
    text = (ROOT / "Makefile").read_text()
    assert "UNIT := $(PY) -m pytest" in text and "rerun" not in text.lower()
    assert not (ROOT / "tools" / "rerun_on_crash.sh").exists()
    for target in ("\ntest: setup", "\ntest-unit: setup"):
        recipe = text.split(target, 1)[1].split("\n\n", 1)[0]
        # the OneFlow tests in a process of their own (the Makefile's comment says why)
        assert "COURSE_TEST_GROUP=no-oneflow $(UNIT)" in recipe
        assert "COURSE_TEST_GROUP=oneflow $(UNIT)" in recipe


def test_unit_test_groups_split_every_file_once() -> None:
    """Each test file lands in exactly one of the two unit-test processes."""
    import importlib.util

    # by path: "conftest" in sys.modules may be another folder's (tests/gpu has one)
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    tests_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests_conftest)
    uses_oneflow = tests_conftest.uses_oneflow

    files = sorted((ROOT / "tests").glob("test_*.py"))
    flow_files = {f.name for f in files if uses_oneflow(f.read_text())}
    assert "test_graphs.py" in flow_files and "test_data.py" not in flow_files
    assert uses_oneflow("def test_x(flow):") and not uses_oneflow("import torch  # workflow")


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
    assert len(installs) >= 5
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
