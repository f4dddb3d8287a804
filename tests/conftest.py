"""Shared test setup: headless matplotlib, tiny thread counts, and a private results folder."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import matplotlib
import pytest

# Headless plots in this process only: an MPLBACKEND environment variable would also reach the
# notebook kernels nbval starts in the same session, and their figures would vanish from the book.
matplotlib.use("Agg")


_oneflow_reported = False


@pytest.fixture(autouse=True)
def _no_oneflow_in_the_no_oneflow_group():
    """In the no-oneflow process, fail the first test after which OneFlow is loaded.

    Defined first of the autouse fixtures, so it checks after every other fixture's teardown
    (a stand-in module a test put into ``sys.modules`` with ``monkeypatch`` is gone by then)."""
    global _oneflow_reported
    yield
    if (
        not _oneflow_reported
        and os.environ.get("COURSE_TEST_GROUP") == "no-oneflow"
        and "oneflow" in sys.modules
    ):
        _oneflow_reported = True
        pytest.fail(
            "OneFlow was imported in the no-oneflow test process (by this test, or by the "
            "collection before it): move the test to a file of the oneflow group, or drop the "
            "file's `# course-test-group: no-oneflow` declaration",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def results_dir(tmp_path, monkeypatch):
    """Point the ledger at a temporary folder so no test writes into the repository's results/."""
    folder = tmp_path / "results"
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test opened."""
    yield
    import sys

    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture(scope="session")
def torch_mod():
    import torch

    torch.set_num_threads(1)
    return torch


@pytest.fixture(scope="session")
def tiny_classifier():
    """The tests' one tiny CNN (:func:`tiny_models.tiny_classifier`), as a fixture."""
    import tiny_models  # tests/ is on sys.path: the folder of this conftest

    return tiny_models.tiny_classifier


@pytest.fixture(scope="session")
def images():
    """``make(n=2, size=8, seed=0)``: random float32 images (:func:`tiny_models.images`)."""
    import tiny_models

    return tiny_models.images


@pytest.fixture(scope="session")
def tiny_embedder_onnx(torch_mod):
    """A builder: ``(root, size, dim) -> (x, onnx_path)``, a tiny calibrated embedder in ONNX.

    The serving tests (one Triton server, and nginx in front of two) serve this model; ``x`` is
    8 random images of ``size`` px it was calibrated on, ``onnx_path`` its export (batch dynamic).
    """
    import numpy as np

    from helpers.deploy import export
    from helpers.workload import models

    def build(root, size, dim):
        torch_mod.manual_seed(0)
        x = np.random.default_rng(0).normal(size=(8, 3, size, size)).astype(np.float32)
        emb = models.build_embedder("torch", dim, 0.25)
        models.calibrate_batchnorm(emb, torch_mod.from_numpy(x))
        onnx_path = export.export_onnx(
            emb,
            torch_mod.from_numpy(x[:2]),
            root / "tiny.onnx",
            input_name="image",
            output_name="embedding",
        ).path
        return x, onnx_path

    return build


@pytest.fixture(scope="session")
def infer_json():
    """``(url, model, inputs) -> {output: array}``: one inference as plain JSON, what curl sends."""
    import numpy as np

    from helpers.serving import triton_client

    def infer(url, model, inputs, timeout=60.0):
        body = triton_client.infer_json_body(inputs)
        resp = triton_client.http_request(
            url, "POST", f"/v2/models/{model}/infer", body=body, timeout=timeout
        )
        if resp.status != 200:
            raise triton_client.TritonRequestError(resp.status, resp.error_message())
        return {
            o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"])
            for o in resp.json()["outputs"]
        }

    return infer


@pytest.fixture(scope="session")
def flow():
    from helpers.core.environment import import_oneflow

    return import_oneflow()


# ---- OneFlow tests run in a pytest process of their own (`make test` sets COURSE_TEST_GROUP) ----
# Not a crash guard (the Makefile's `test` target says why the split stays). The split is by file,
# because collecting a test file imports it (and some helpers import OneFlow at module level): a file
# that mentions OneFlow (`oneflow`, the `flow` fixture) belongs to the "oneflow" group, every other
# file to "no-oneflow". A file that names OneFlow only as a label or a stand-in (a framework name, a
# fake module) and imports none declares `# course-test-group: no-oneflow` on a line of its own; the
# no-oneflow process fails the first test after which OneFlow is loaded, so a wrong declaration (or a
# helper that starts importing OneFlow) cannot pass unseen. Without COURSE_TEST_GROUP everything runs.
# Files named on the command line are filtered too: one of the other group is not imported, and shows
# as one skipped test naming its group (and a line in the summary), instead of running in the wrong
# process.

TEST_GROUPS = ("oneflow", "no-oneflow")
_DECLARED = re.compile(r"^# course-test-group: (\S+)[ \t]*$", re.MULTILINE)


def uses_oneflow(source: str) -> bool:
    """Whether a test file's source touches OneFlow."""
    return re.search(r"\boneflow\b|\bflow\b", source) is not None


def file_group(source: str) -> str:
    """The unit-test group of a test file: its declared group, else by :func:`uses_oneflow`."""
    declared = _DECLARED.findall(source)
    if len(declared) > 1 or (declared and declared[0] not in TEST_GROUPS):
        raise pytest.UsageError(
            f"a test file declares `# course-test-group: <group>` once, with a group of "
            f"{TEST_GROUPS}; got {declared}"
        )
    if declared:
        return declared[0]
    return "oneflow" if uses_oneflow(source) else "no-oneflow"


def _selected_group() -> str | None:
    group = os.environ.get("COURSE_TEST_GROUP")
    if group and group not in TEST_GROUPS:
        raise pytest.UsageError(f"COURSE_TEST_GROUP must be one of {TEST_GROUPS}, got {group!r}")
    return group or None


def pytest_configure(config):
    _selected_group()  # a misspelt group is a usage error before anything is collected


def _is_test_file(path: Path) -> bool:
    return path.suffix == ".py" and path.name.startswith("test_")


def pytest_ignore_collect(collection_path, config):
    """Leave out, unimported, the test files of the other group found in a folder."""
    group = _selected_group()
    if not group or not _is_test_file(collection_path):
        return None
    return True if file_group(collection_path.read_text(encoding="utf-8")) != group else None


# named files of the other group (pytest_ignore_collect is not asked about named files)
_left_out: set[str] = set()


class _OtherGroupFile(pytest.File):
    """A test file named on the command line that belongs to the other group: not imported."""

    def collect(self):
        group = file_group(self.path.read_text(encoding="utf-8"))
        item = _OtherGroupItem.from_parent(self, name="other-test-group")
        item.add_marker(
            pytest.mark.skip(
                reason=f"{self.path.name} is in the {group} test group, left out by "
                f"COURSE_TEST_GROUP={_selected_group()} (unset it to run every file)"
            )
        )
        yield item


class _OtherGroupItem(pytest.Item):
    def runtest(self):  # never reached: the item carries a skip mark
        raise AssertionError("a test file of the other group must not run")

    def reportinfo(self):
        return self.path, 0, f"{self.path.name} (other test group)"


def pytest_pycollect_makemodule(module_path, parent):
    """A named test file of the other group becomes one skipped item; its module is not imported."""
    group = _selected_group()
    if not group or not _is_test_file(module_path):
        return None
    if file_group(module_path.read_text(encoding="utf-8")) == group:
        return None
    _left_out.add(module_path.name)
    return _OtherGroupFile.from_parent(parent, path=module_path)


def pytest_terminal_summary(terminalreporter):
    if _left_out:
        terminalreporter.write_line(
            f"COURSE_TEST_GROUP={_selected_group()} left out {len(_left_out)} named file(s) of the "
            f"other group: {', '.join(sorted(_left_out))}"
        )


class _FakeMachine:
    """Injectable readers: a wall clock, this process's CPU clock and /proc/stat, moved by hand."""

    def __init__(self, cpus=2, ticks=100):
        self.wall = 0.0
        self.own = 0.0  # this process's CPU seconds
        self.busy = 0.0  # all CPUs' busy seconds (/proc/stat reports whole ticks of them)
        self.steal = 0.0
        self.la = 1.0
        from helpers.measure import machine

        self.readers = machine._Readers(
            proc_stat=lambda: (round(self.busy * ticks), round(self.steal * ticks)),
            container_cpu_s=lambda: None,  # no container CPU quota: /proc/stat is read
            family_cpu_s=lambda: self.own,
            process_cpu_s=lambda: self.own,
            wall_s=lambda: self.wall,
            loadavg=lambda: self.la,
            clock_ticks=ticks,
            cpus=cpus,
        )

    def run(self, wall, own, others, steal=0.0):
        """Advance: `wall` seconds pass, we use `own` CPU seconds, others `others` (busy ticks)."""
        self.wall += wall
        self.own += own
        self.busy += own + others
        self.steal += steal


@pytest.fixture
def fake_machine() -> _FakeMachine:
    """A machine whose clocks and /proc/stat a test moves by hand (see ``helpers.measure.machine``)."""
    return _FakeMachine()
