"""helpers.deploy.aoti: chapter 7's AOTInductor file (saved from its page), run in a fresh process.

One compile of a tiny network (tens of seconds on two cores), shared by the tests of this file.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.subprocess_run import run_in_subprocess


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory, torch_mod):
    """A conv + BatchNorm + ReLU + pool + linear network compiled into one .pt2 file."""
    from helpers.deploy import aoti

    nn = torch_mod.nn
    torch_mod.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    ).eval()
    root = tmp_path_factory.mktemp("aoti")
    x = torch_mod.randn(2, 3, 8, 8)
    path = aoti.compile_package(model, x, root / "tiny.pt2", max_batch=8)
    return model, path, root


def test_compile_package_refuses_a_training_model(torch_mod, tmp_path):
    from helpers.deploy import aoti

    with pytest.raises(ValueError, match="eval mode"):
        aoti.compile_package(
            torch_mod.nn.Linear(2, 2).train(), torch_mod.randn(2, 2), tmp_path / "m.pt2"
        )


def test_the_package_runs_other_batch_sizes_here(tiny_package, torch_mod):
    model, path, _ = tiny_package
    runner = torch_mod._inductor.aoti_load_package(str(path))
    with torch_mod.inference_mode():
        for b in (1, 5):  # neither is the example's 2: the batch is free up to max_batch
            x = torch_mod.randn(b, 3, 8, 8)
            np.testing.assert_allclose(runner(x).numpy(), model(x).numpy(), atol=1e-5)


def test_a_fresh_process_runs_it_without_the_model_code(tiny_package, torch_mod):
    model, path, root = tiny_package
    x = np.random.default_rng(0).normal(size=(6, 3, 8, 8)).astype(np.float32)
    np.save(root / "x.npy", x)
    out = run_in_subprocess(
        "helpers.deploy.aoti:run_package",
        dict(package=str(path), inputs=str(root / "x.npy"), outputs=str(root / "y.npy")),
        timeout_s=600,
    )["result"]
    with torch_mod.inference_mode():
        want = model(torch_mod.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.load(root / "y.npy"), want, atol=1e-5)
    # the child imported torch, but neither this test module nor the course's model code
    assert "torch" in out["modules"] and not any(
        m.startswith(("helpers.workload", "helpers.chapters", "torchvision"))
        for m in out["modules"]
    )
    assert {"isa_check_s", "load_s", "run_s"} <= set(out)
