"""helpers.chapters.ch10_report: the capstone's waterfall, tables and sentences follow the numbers."""

import math

from ladder_support import RUNGS, climb

from helpers.chapters import ch10_ladder as ladder
from helpers.chapters import ch10_report as report
from helpers.measure.ladder import Rung, keep_rule

FULL = [
    {"chapter": s.chapter, "name": s.record, "value": f, "unit": "x"}
    for s, f in zip(ladder.TASK_STEPS, (1.5, 2.0, 4.0, 1.1))
]


def test_reported_cumulative_is_the_articles_21_beside_its_factors_22():
    """Both figures are the article's: its "about 21x" and its step factors' product, 22.0x."""
    from helpers.record.reported import RESNET101_ONEFLOW as R

    expected = math.prod(s.reported for s in ladder.TASK_STEPS)
    assert R["cumulative"] == 21.0 and R["cumulative_of_factors"] == round(expected, 1) == 22.0
    # 21x fits the article's other two wordings of the compile total, 1.56x and about 1.6x
    for other in (R["compile_total_vs_best"], R["compile_total_summary"]):
        assert round(expected / R["compile_total"] * other) == 21
    line = report.article_line()
    for figure in ("22.0x", '"about 21x"', "+64% (1.64x)", '"1.56 倍"', '"约 1.6 倍"', "20.9x"):
        assert figure in line, (figure, line)
    assert "the course uses 1.64x" in line and "more than 25x" in line


def test_sentences_come_from_the_numbers():
    lad = climb()
    text = " ".join(report.explain_gap(lad, ladder.journey_rows(FULL)))
    assert "multiply to 10.00x" in text and "is 10.00x (per-round IQR 10.00-10.00)" in text
    assert "13.20x" in text and "above" in text  # the chapters' 1.5 * 2 * 4 * 1.1
    assert "chapter 05 measured 4.00x" in text and "pipelining gave 4.00x" in text
    assert "2 rung(s) measured here were not built on" in text  # static graph, pipelining
    line = report.static_graph_line(lad)
    assert line.startswith("The final path contains no static graph")
    assert "static graph (torch.compile) at the static graph rung, 1.60x faster" in line
    assert "compiler (torch.compile) at the compiler rung, 0.99x slower" in line
    head = report.headline(lad, "cpu (bf16, 2 threads)", quick="ResNet-18 at 64 px")
    assert "**10.0x**" in head and "a quick-mode figure (ResNet-18 at 64 px)" in head
    assert "IQR 10.00-10.00 over 9 rounds" in head and "80.00 -> 8.00 ms" in head
    assert "quick-mode" not in report.headline(lad, "cuda")
    guide = report.ladder_guide(lad, "cpu")
    assert guide[0].startswith("on cpu") and "batching 4.00x" in guide[0]
    assert guide[1].startswith("not built on: static graph (torch.compile): measured")
    assert any(g.startswith("not built on: pipelining: slower") for g in guide)
    assert any("pruning -> batching -> compiler (folding)" in g for g in guide)
    assert line in guide and "INT8 runtime" in guide[-1]


def test_the_page_names_what_failed_its_check():
    """A failed candidate's reason is listed; the guide names the fastest path that passed."""

    def check(label, settings, base):
        return "3 rows nearest another class" if settings.get("fold") == 1.25 else None

    guide = report.ladder_guide(climb(check=check), "cpu")
    assert any("compiler (folding) fails its check: 3 rows" in line for line in guide)
    lad = climb(check=lambda label, s, base: "wrong" if s.get("int8") else None)
    assert "fastest that passed its check was forward only" in report.ladder_guide(lad, "cpu")[-1]


def test_plot_ladder_draws_every_rung_on_a_log_scale():
    lad = climb()
    ax = report.plot_ladder(lad)
    assert ax.get_yscale() == "log"
    assert len(ax.get_xticklabels()) == len(lad.rows)


def test_checks_table_counts_maps_beyond_the_bound_and_names_failures(torch_mod):
    from helpers.core import comparison, precision

    lad = climb(check=lambda label, s, base: "wrong class" if s.get("int8") else None)
    ref = torch_mod.ones(4, 2, 3)
    bound = precision.tolerance("fp32")
    moved = ref.clone()
    moved[1] += 1.0  # one image's map far beyond float32's bound
    exact = comparison.assert_outputs_close(ref, ref, mode="fp32")
    task = comparison.TaskCheck("t", "bf16", 4, 1.0, 0.999, 3, 3, 1.0, {})
    checks = {"naive": [exact, exact], "forward only": [task]}
    results = {"naive": (ref, None), "batching": (moved, None), "forward only": (None, None)}
    table = report.checks_table(lad, checks, results, ref, bound, notes=["4 images kept"])
    by_path = {r["path"]: r for r in table.rows}
    assert (
        by_path["naive"]["maps beyond fp32"] == 0
        and "of the fp32 bound" in by_path["naive"]["maps"]
    )
    logits = by_path["forward only"]["logits"]
    assert "task level (bf16)" in logits and "top-1 kept on 3/3" in logits
    assert by_path["forward only"]["maps"] == "-"
    assert by_path["INT8 runtime"]["logits"] == "FAILS: wrong class"
    assert "batching" not in by_path  # a path without a check result is not a row
    assert "(4 images)" in str(table) and "4 images kept" in str(table)
    # a map that moved is counted: the same table over the moved maps as reference rows
    results = {"naive": (moved, None)}
    table = report.checks_table(lad, {"naive": [exact, exact]}, results, ref, bound)
    assert table.rows[0]["maps beyond fp32"] == 1


def pipelining_ladder(replicas_cost):
    """The fake capstone with the page's two pipelining controls."""
    rungs = list(RUNGS)
    i = next(k for k, r in enumerate(rungs) if r.key == "pipelining")
    controls = {report.TWIN: {"pipeline": True}, report.REPLICAS: replicas_cost}
    rungs[i] = Rung("pipelining", {"pipelining": {"pipeline": True}}, controls=controls)
    return climb(rungs)


def test_ladder_sentences_follow_the_pipelining_controls_and_the_served_figures():
    lad = pipelining_ladder({"pipeline": False})  # replicas as fast as the base
    lines = report.ladder_sentences(lad, "cpu (fp32)", None, keep_rule)
    assert lines[0].startswith("End to end on cpu (fp32), the saliency task runs **")
    assert lines[1] == report.article_line()
    assert not any("static graph" in line or "not built on" in line for line in lines[2:])
    pipe = next(line for line in lines if line.startswith("Pipelining over batching"))
    assert "0.77x" in pipe and pipe.endswith(".")  # slower: no word on what its gain is
    control = next(line for line in lines if line.startswith("Control: the A/A twin"))
    assert control.endswith("not kept, as it must be.")
    assert not any("Served" in line or "busy" in line for line in lines)
    served = {"rps": 123.4, "p99_ms": 5.67}
    last = report.ladder_sentences(lad, "cpu", "quick", keep_rule, served, in_flight=16)[-1]
    assert last == (
        "Served: 123 requests/s with 16 in flight, each decoded by its client; p99 latency 5.7 ms."
    )
    # a keep rule that keeps everything: the twin is a false keep, the gain is named
    lines = report.ladder_sentences(lad, "cpu", None, lambda r: True)
    assert any(line.endswith("kept, a false keep (the noise).") for line in lines)
    assert any(line.endswith(": its gain is overlap.") for line in lines)


def test_machines_table_sets_this_machine_beside_the_reference_runs():
    lad = climb()
    refs = {
        "h200": [
            {"chapter": "10_capstone", "name": "ladder_batching_factor", "value": 3.5},
            {"chapter": "10_capstone", "name": "end_to_end_speedup", "value": 9.0},
            {"chapter": "05_parallelism", "name": "ladder_x_factor", "value": 2.0},
        ]
    }
    table = report.machines_table(lad, "cpu", refs)
    rows = table.rows
    assert [r["rung"] for r in rows[: len(lad.rows) - 1]] == [r["key"] for r in lad.rows[1:]]
    assert rows[-1] == {"run": "h200", "rung": "batching", "device": "-", "factor": 3.5}
    assert len(rows) == len(lad.rows)  # one reference row: the other two are not ladder factors
