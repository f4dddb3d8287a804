"""helpers.core.oneflow_fix: OneFlow 0.9.0's nn.Graph launch race, fixed before OneFlow starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from helpers.core import oneflow_fix

SRC = Path(__file__).resolve().parents[2] / "src"


def _train_graph(flow, model):
    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

        def build(self, x):
            loss = self.model(x).square().mean()
            loss.backward()
            return loss

    return Step()


def test_the_fix_is_loaded_and_sees_every_graph_launch(flow):
    assert oneflow_fix.status()["loaded"], oneflow_fix.status()
    before = oneflow_fix.counters()["launches"]
    g = _train_graph(flow, flow.nn.Linear(4, 3))
    x = flow.tensor(np.ones((2, 4), np.float32))
    for _ in range(3):
        g(x).numpy()
    assert oneflow_fix.counters()["launches"] - before == 3


# A fresh process: the test hook (a sleep before each enqueue) is read once, at the first launch.
RACE = textwrap.dedent(
    """
    import time

    import numpy as np
    from helpers.core import oneflow_fix
    from helpers.core.environment import import_oneflow
    from tests.core.test_oneflow_fix import _train_graph

    flow = import_oneflow()
    flow.manual_seed(0)
    eager, static = flow.nn.Linear(4, 3), flow.nn.Linear(4, 3)
    static.load_state_dict(eager.state_dict())
    opt = flow.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    x = flow.tensor(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
    g, other = _train_graph(flow, static), _train_graph(flow, flow.nn.Linear(4, 3))
    for step in range(20):
        loss = eager(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        g(x)
        if step % 5 == 4:
            other(x)  # another graph: OneFlow waits until the queue is empty before launching it
    w = {k: v.numpy() for k, v in static.state_dict().items()}
    assert all(np.abs(w[k] - v.numpy()).max() < 1e-5 for k, v in eager.state_dict().items())
    for _ in range(100):  # a call finished early may still be on its way to the (sleeping) enqueue
        c = oneflow_fix.counters()
        if c["launches"] == 24:
            break
        time.sleep(0.01)
    print("COUNTERS", c["launches"], c["finished_before_enqueue"])
    """
)


def test_a_graph_call_that_finishes_before_its_launch_is_recorded_is_harmless(tmp_path):
    """The race, forced on every call: OneFlow alone crashes or hangs here within a few calls."""
    env = dict(
        os.environ,
        COURSE_LAZYJOB_TEST_DELAY_US="3000",
        PYTHONPATH=os.pathsep.join([str(SRC), str(SRC.parent)]),
    )
    out = subprocess.run(
        [sys.executable, "-c", RACE],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    launches, early = map(int, out.stdout.split("COUNTERS")[1].split())
    assert launches == 24 and early > 0, out.stdout
