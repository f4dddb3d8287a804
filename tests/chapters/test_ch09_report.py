"""helpers.chapters.ch09_report: chapter 9's figure, sentences and summary follow the sweep."""

from __future__ import annotations

import matplotlib

from helpers.chapters import ch09_report as report

matplotlib.use("Agg")


def _row(model, clients, queue, compute_image, per_exec=1.0, rps=100.0):
    return {
        "model": model,
        "clients": clients,
        "req/s": rps,
        "p99 ms": 2.0,
        "queue ms/request": queue,
        "compute ms/execution": compute_image * per_exec,
        "compute ms/image": compute_image,
        "requests/exec": per_exec,
    }


def _sweep(queue_at_8):
    return [
        _row("embedder", 1, 0.1, 1.0),
        _row("embedder_dynamic", 1, 0.1, 1.0),
        _row("embedder", 8, queue_at_8, 1.0, rps=200.0),
        _row("embedder_dynamic", 8, 0.5, 0.5, per_exec=4.0, rps=300.0),
    ]


def test_sweep_sentences_say_the_scaler_signal_only_when_the_queue_grew():
    busy, batched = report.sweep_sentences(_sweep(queue_at_8=5.0), (1, 8))
    assert "carried 4.00 requests" in busy and "less model time per image (0.50x)" in busy
    assert batched.endswith("requests waited for a busy model, the scaler's signal.")
    quiet = report.sweep_sentences(_sweep(queue_at_8=0.15), (1, 8))[1]
    assert quiet.endswith("not the scaler's signal on this run (see the table).")


def test_summary_table_adds_the_sweep_rows_only_with_a_sweep_and_the_plot_draws_it():
    first = [("health check", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK")]
    assert len(report.summary_table(first, None, (1, 8), None).rows) == 1
    rows = report.summary_table(first, _sweep(5.0), (1, 8), 0.25).rows
    assert [r["here"] for r in rows[1:]] == [
        "0.25 ms",
        "1.50x requests/s (one run, noisy)",
        "0.50 / 1.00 ms",
    ]
    assert set(report.at_clients(_sweep(5.0), 8)) == {"embedder", "embedder_dynamic"}
    fig = report.plot_sweep(_sweep(5.0), ("embedder", "embedder_dynamic"), (1, 8), "t")
    assert [len(ax.lines) for ax in fig.axes] == [2, 2, 4]
