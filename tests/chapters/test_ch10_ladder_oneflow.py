"""helpers.chapters.ch10_ladder's pieces that take chapter 10's saliency tasks: in the oneflow test
group, because helpers.workload.saliency imports OneFlow (the rest: tests/chapters/test_ch10_ladder.py)."""

from __future__ import annotations

import pytest

from helpers.chapters import ch10_ladder as ladder


def test_order_stable_images_leave_out_maps_that_move():
    import torch

    from helpers.workload import saliency as st

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(3)
    )
    x = torch.randn(12, 3, 8, 8)
    net(x)
    task = st.make_task(net.eval(), "single_forward")
    choice = ladder.order_stable_images(task, x, 5, batch=4, threads=1)
    assert len(choice.keep) == 5 and choice.pool == 12 and choice.order_dependent == 0
    assert list(choice.keep) == sorted(choice.keep)

    # a task whose map depends on the batch it runs in (a planted defect) leaves every image out
    def batch_dependent(xb):
        r = task(xb)
        return st.TaskResult(r.logits, r.saliency * len(xb))

    with pytest.raises(AssertionError, match="only 0 of 12"):
        ladder.order_stable_images(batch_dependent, x, 5, batch=4, threads=1)
    with pytest.raises(ValueError, match="n must be"):
        ladder.order_stable_images(task, x, 13, batch=4, threads=1)


def test_answer_concatenates_in_order_and_knows_forward_only():
    import torch

    from helpers.workload import saliency as st

    parts = [st.TaskResult(torch.ones(2, 3) * i, torch.ones(2, 4, 4) * i) for i in range(3)]
    maps, logits = ladder.answer(parts)
    assert maps.shape == (6, 4, 4) and logits.dtype == torch.float32
    assert logits[:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    maps, logits = ladder.answer([st.TaskResult(torch.ones(2, 3).bfloat16(), None)])
    assert maps is None and logits.dtype == torch.float32
    with pytest.raises(ValueError, match="no results"):
        ladder.answer([])
