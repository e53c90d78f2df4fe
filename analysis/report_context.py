"""What a report's sections see (`ReportContext`) and the HTML pieces they are made of.

A section is a callable ``section(ctx) -> str`` returning an HTML fragment ("" to skip);
`analysis.report` builds the context of a run or sweep folder and puts the sections'
fragments on one page.  The helpers here escape text (`esc`), show a table (`html_table`)
and embed a figure as inline SVG, also saved as PNG + SVG (`figure`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis import plots
from testbed.core.compat import tomllib
from testbed.core.errors import InputError

Section = Callable[["ReportContext"], str]


class ReportInputError(InputError):
    """The directory is neither a run bundle nor a sweep, or paper.toml is malformed."""


@dataclass
class ReportContext:
    """What sections see. root: the directory; kind: "run" or "sweep"; tables: loaded
    metrics (run) or {"summary": ...} (sweep); meta: metadata.json; spec_text: spec.toml;
    warnings: messages sections may append to; paper: paper.toml values; figure_dir: where
    figures are also saved as PNG + SVG (None: not saved)."""

    root: Path
    kind: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    spec_text: str = ""
    warnings: list[str] = field(default_factory=list)
    paper: list[dict[str, Any]] = field(default_factory=list)
    figure_dir: Path | None = None
    saved: set[str] = field(default_factory=set)  # figure files this render wrote

    def remove_stale_figures(self) -> None:
        """Remove the PNG and SVG files in figure_dir that this render did not write (an
        earlier render's, of a sweep point or metric no longer drawn); a link among them
        goes as a link, never followed, and nothing else is touched."""
        if self.figure_dir is None or not self.figure_dir.is_dir():
            return
        for old in self.figure_dir.iterdir():
            if old.suffix in (".png", ".svg") and old.name not in self.saved \
                    and not old.is_dir():
                old.unlink(missing_ok=True)

    def spec(self) -> dict[str, Any]:
        """The parsed spec ({} when absent or unreadable)."""
        try:
            return tomllib.loads(self.spec_text) if self.spec_text else {}
        except tomllib.TOMLDecodeError:
            return {}


def esc(x: object) -> str:
    """x as HTML text."""
    return html.escape(str(x))


def html_table(df: pd.DataFrame, max_rows: int = 200) -> str:
    """df as an HTML table of at most max_rows rows (and a line saying how many are left)."""
    if not len(df):
        return "<p><em>(none)</em></p>"
    more = f"<p><em>{len(df) - max_rows} more rows not shown</em></p>" if len(df) > max_rows \
        else ""
    return df.head(max_rows).to_html(index=False, border=0, classes="tbl", na_rep="",
                                     float_format=lambda v: f"{v:.6g}") + more


def figure_file_name(name: str) -> str:
    """A figure's file stem made from column names (which come from spec keys): only
    letters, digits, ``-`` and ``_`` (anything else becomes ``_``), at most 120 characters,
    never empty, so a ``../`` in a key cannot leave the figures folder."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_-")[:120]
    return stem or "figure"


def figure(ctx: ReportContext, fig: Figure, name: str, caption: str) -> str:
    """Embed fig as inline SVG; also save it as DIR/figures/<name>.png and .svg."""
    svg = plots.to_svg(fig)
    if ctx.figure_dir is not None:
        base = ctx.figure_dir / figure_file_name(name)
        if base.parent != ctx.figure_dir:  # cannot happen with the name above; be sure
            raise ReportInputError(f"figure name {name!r} leaves {ctx.figure_dir}")
        ctx.saved.update(p.name for p in plots.save(fig, base, svg))
    svg = svg[svg.find("<svg"):]
    return f'<figure class="fig" id="fig-{esc(name)}">{svg}' \
           f'<figcaption>{esc(caption)}</figcaption></figure>'
