"""Results as tables: one :class:`Table`, HTML in the book and aligned text in a terminal."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from helpers.measure.measurement import Measurement, paired_ratio

__all__ = ["CORES_BUSY", "Table", "ShowsAsTable", "compare_rows", "compare_table", "paired_table"]

# The column of ``Measurement.cores_used``: CPU time over wall time counts a thread that polls for
# work as busy, so it says how many cores were busy, not how many computed.
CORES_BUSY = "cores busy (computing or spinning)"

# The HTML form wraps its headers and cells instead of scrolling sideways.
_CSS = "border-collapse:collapse;font-size:0.85em;max-width:100%;font-variant-numeric:tabular-nums"


class Table:
    """Rows (dicts) shown as HTML where a notebook renders it, aligned text when printed: the
    first row's keys or ``columns``; floats in ``floatfmt`` or per column ``formats``
    (``{"p50_ms": ".1f"}``), None as ``-``; ``title`` above, ``notes`` (lines) below."""

    def __init__(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        columns: Sequence[str] | None = None,
        title: str | None = None,
        floatfmt: str = ".2f",
        formats: dict[str, str] | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        rows = [dict(r) for r in rows]
        if not rows:
            raise ValueError("no rows to show")
        self.columns = list(columns) if columns is not None else list(rows[0])
        for i, r in enumerate(rows):
            missing = [k for k in self.columns if k not in r]
            if missing:
                raise ValueError(
                    f"row {i} lacks {missing}: every row needs the keys of the first row"
                )
        self.rows, self.title, self.floatfmt = rows, title, floatfmt
        self.formats = dict(formats or {})
        unknown = [k for k in self.formats if k not in self.columns]
        if unknown:
            raise ValueError(f"formats for unknown columns {unknown}; columns: {self.columns}")
        self.notes = [str(n) for n in notes]

    def column(self, name: str) -> list[Any]:
        """The values of one column, in row order."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; columns: {self.columns}")
        return [r[name] for r in self.rows]

    def _cell(self, key: str, value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return format(value, self.formats.get(key, self.floatfmt))
        if key in self.formats and isinstance(value, (int, float)) and not isinstance(value, bool):
            return format(value, self.formats[key])
        return str(value)

    def cells(self) -> list[list[str]]:
        """The header row, then every row, as the strings both renderings show."""
        return [list(self.columns)] + [
            [self._cell(k, r[k]) for k in self.columns] for r in self.rows
        ]

    def __str__(self) -> str:
        cells = self.cells()
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [
            "  ".join(
                c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths))
            ).rstrip()
            for row in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(([self.title] if self.title else []) + lines + self.notes)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head, *body = self.cells()
        numeric = [all(isinstance(r[k], (int, float, type(None))) for r in self.rows) for k in head]
        align = ["right" if j and numeric[j] else "left" for j in range(len(head))]

        def row(tag: str, cells: list[str]) -> str:
            style = 'style="text-align:{};padding:2px 6px"'
            tds = (
                f"<{tag} {style.format(a)}>{html.escape(c)}</{tag}>" for c, a in zip(cells, align)
            )
            return f"<tr>{''.join(tds)}</tr>"

        # headers break at their underscores (p50_ms -> "p50 ms"), so many columns still fit
        th = row("th", [h.replace("_", " ") for h in head])
        caption = self.title and (
            f'<caption style="caption-side:top;text-align:left">{html.escape(self.title)}</caption>'
        )
        notes = "".join(
            f'<p style="font-size:0.85em;margin:2px 0">{html.escape(n)}</p>' for n in self.notes
        )
        return (
            f'<table class="course-table" style="{_CSS}">{caption or ""}<thead>{th}</thead>'
            f"<tbody>{''.join(row('td', r) for r in body)}</tbody></table>{notes}"
        )


class ShowsAsTable:
    """A result that shows as its :meth:`table`: text in a terminal, HTML in a notebook."""

    def table(self) -> Table:
        raise NotImplementedError

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:  # what a notebook shows as text: the table, not every field
        return str(self)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def compare_rows(measurements: Sequence[Measurement]) -> list[dict[str, Any]]:
    """One dict per measurement: where it ran, p50/p99 ms, IQR (% of p50), items/s, the speedup
    (median throughputs over the first's), and the machine's load."""
    if not measurements:
        raise ValueError("nothing to compare: give at least one Measurement")
    base = measurements[0]
    flags = {True: "CONTENDED", False: "quiet", None: "?"}
    return [
        {
            "label": m.label,
            "device": m.device or m.meta.get("device", "?"),
            "threads": m.threads if m.threads is not None else m.meta.get("threads", "?"),
            CORES_BUSY: "?" if m.cores_used is None else f"{m.cores_used:.2f}",
            "runs": len(m.times_s),
            "p50_ms": m.median * 1e3,
            "p99_ms": m.p99 * 1e3,
            "iqr_pct": 100 * m.relative_iqr,
            "items_per_s": m.throughput,
            "speedup": m.throughput / base.throughput,
            "machine": flags[m.contended],
        }
        for m in measurements
    ]


def compare_table(measurements: Sequence[Measurement], **kwargs: Any) -> Table:
    """A :class:`Table` of measurements with speedups against the first."""
    return Table(compare_rows(measurements), **kwargs)


def paired_table(
    runs: Mapping[str, Measurement],
    baseline: str,
    *,
    meta: Mapping[str, Mapping[str, Any]] | None = None,
    title: str | None = None,
) -> Table:
    """One interleaved run as a :class:`Table`: median ms, and the paired ratio over ``baseline``
    with its per-round IQR and reading; ``meta[label]`` adds columns."""
    if baseline not in runs:
        raise KeyError(f"baseline {baseline!r} is not one of the runs: {list(runs)}")
    rows = []
    for label, m in runs.items():
        r = paired_ratio(runs[baseline], m)
        rows.append(
            {
                "variant": label,
                **dict((meta or {}).get(label, {})),
                "ms per call": m.median * 1e3,
                "speedup": "1 (baseline)" if label == baseline else f"{r.median:.2f}x",
                r.SPREAD: "-" if label == baseline else r.interval,
                "reading": "-" if label == baseline else r.reading,
            }
        )
    return Table(rows, title=title)
