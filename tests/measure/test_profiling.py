"""helpers.measure.profiling: profiler tables and peak tensor memory."""

from __future__ import annotations

import pytest

from helpers.measure import profiling


class _Task:
    """A task as make_task builds one: callable on a batch, its network as ``module``."""

    def __init__(self, torch_mod, work):
        self.module, self.work = torch_mod.nn.Linear(4, 4), work

    def __call__(self, x):
        return self.work(self, x)


def test_peak_memory_sees_temporaries_and_retained(torch_mod):
    kept = []

    def work(task, x):
        a = torch_mod.ones(1024, 1024)  # 4 MiB temporary
        b = a * 2  # another 4 MiB while a is alive
        kept.append(b.sum(dim=0))  # 4 KiB kept
        task.module(x).sum().backward()  # the warm-up's gradients are dropped before the call

    mem = profiling.task_peak_memory(_Task(torch_mod, work), torch_mod.ones(1, 4))
    assert mem["peak"] >= 8 * 2**20 and mem["peak"] < 9 * 2**20
    assert 0 < mem["retained"] < 2**20
    assert mem["method"].startswith("torch.profiler")


def test_peak_memory_bad_inputs(torch_mod):
    with pytest.raises(TypeError, match="make_task"):
        profiling.task_peak_memory(lambda x: x, 1)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        profiling.task_peak_memory(_Task(torch_mod, lambda t, x: None), 1, device="meta")


def test_table_rows_narrows_the_profilers_own_table(torch_mod):
    x = torch_mod.randn(64, 64)
    x @ x
    with torch_mod.profiler.profile(
        activities=[torch_mod.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        x @ x + 1
    # every row: which op took the most self time depends on the machine's load (a busy
    # machine once put the product outside the top 3), and that is not what this test checks
    text = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10)
    rows = profiling.table_rows(text, ["Name", "Self CPU", "Self CPU Mem", "# of Calls"])
    assert 1 <= len(rows) <= 10 and list(rows[0]) == [
        "Name",
        "Self CPU",
        "Self CPU Mem",
        "# of Calls",
    ]
    assert any(r["Name"] == "aten::mm" for r in rows) or any("mm" in r["Name"] for r in rows)
    assert all(r["# of Calls"].isdigit() for r in rows)
    with pytest.raises(KeyError, match="no column"):
        profiling.table_rows(text, ["Name", "Self GPU"])
    # an optional column is kept where the table has it, in the table's order
    some = profiling.table_rows(
        text, ["# of Calls", "Name"], optional=["Self CUDA Mem", "Self CPU"]
    )
    assert list(some[0]) == ["Name", "Self CPU", "# of Calls"]
    with pytest.raises(ValueError, match="not a torch.profiler table"):
        profiling.table_rows("Name  Calls\nmm  1", ["Name"])
    # a name with spaces stays whole: columns are cut at the rule of dashes
    toy = "-----------  -----\n       Name  Calls\n-----------  -----\n  my op one      2\n-----------  -----\n"
    assert profiling.table_rows(toy, ["Name", "Calls"]) == [{"Name": "my op one", "Calls": "2"}]
