"""``jaxmemprof top``'s frame: per process, its live bytes now, the sites
holding them (growth red, shrinkage green), its devices, the sites that keep
growing and the run's newest events."""

from __future__ import annotations

import time

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from jaxmemprof.facts.devices import display
from jaxmemprof.render.escape import safe
from jaxmemprof.units import counted, format_bytes


def _delta(n, *, zero: str = "") -> Text:
    if n is None or n != n:
        return Text("")
    n = int(n)
    if n == 0:
        return Text(zero, style="dim")
    return Text(format_bytes(n, signed=True), style="red" if n > 0 else "green")


def _state(f) -> str:
    if f.gone:
        return "stopped without finishing (its process is gone: killed?)"
    if f.finished:
        return f"finished (exit status {f.exit_status})" if f.exit_status is not None else "finished"
    return "running"


class SiteCell:
    """A site in its table cell, with its mark (growing, in red): one line
    whatever the column's width. Narrower than the site, it is cut at its
    start (``…``), where the directories are: the file, the line and the
    function, at its end, stay; where even they do not fit, the mark
    shortens to ``▲``."""

    SHORT = "  ▲"

    def __init__(self, site: str, mark: str = ""):
        self.site, self.mark = site, mark

    def __rich_measure__(self, console, options) -> Measurement:
        return Measurement(1, cell_len(self.site) + cell_len(self.mark))

    def __rich_console__(self, console, options):
        width = max(options.max_width, 1)
        mark = self.mark
        if cell_len(self.site) + cell_len(mark) > width and mark and width - cell_len(mark) < min(
                cell_len(self.site), 24):
            mark = self.SHORT
        room = width - cell_len(mark)
        site = self.site
        if cell_len(site) > room:
            site = "…" + _last_cells(site, room - 1) if room >= 1 else ""
        text = Text(site, no_wrap=True, overflow="crop", end="")
        text.append(mark, style="red")
        text.truncate(width)
        yield text


def _last_cells(text: str, cells: int) -> str:
    """The end of ``text`` that fits in ``cells`` terminal cells."""
    used, start = 0, len(text)
    while start > 0 and used + cell_len(text[start - 1]) <= cells:
        start -= 1
        used += cell_len(text[start])
    return text[start:]


def process_view(f) -> Group:
    """One process's part of the frame."""
    name = safe(f.path) + ("" if f.process is None else f" (process {f.process})")
    head = Text(name, style="bold")
    head.append(f"  {_state(f)}", style="" if f.finished or f.gone else "bold green")
    if f.command:
        head.append(f"  {safe(f.command)}", style="dim")
    parts: list[RenderableType] = [head]
    if f.snapshot is None:
        parts.append(Text(f"  {safe(f.error or 'no snapshot yet')}", style="dim"))
        return Group(*parts)
    line = Text(f"live {format_bytes(f.live_bytes)} ")
    line.append_text(_delta(f.delta_bytes))
    when = f" at {f.t:.1f} s" if f.t is not None else ""
    line.append(f"   snapshot {f.snapshot}{when}, {counted(f.snapshots, 'snapshot')}, {counted(f.markers, 'marker')}")
    if f.peak is not None:
        line.append(f"   peak {format_bytes(f.peak[1])} (snapshot {f.peak[0]})")
    parts.append(line)

    # A site wider than the screen is cut, never the numbers: only the site
    # column may shrink (the numbers' columns never wrap), and a site cut
    # stays one line.
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("since last", justify="right", no_wrap=True)
    table.add_column("since start", justify="right", no_wrap=True)
    table.add_column("arrays", justify="right", no_wrap=True)
    table.add_column("site")
    for r in f.sites.itertuples(index=False):
        if r.grew_frames >= 3:
            site = SiteCell(safe(r.site), f"  growing ({r.grew_frames} in a row)")
        elif r.delta_bytes > 0:
            site = SiteCell(safe(r.site), "  ▲")
        else:
            site = SiteCell(safe(r.site))
        table.add_row(format_bytes(r.bytes), _delta(r.delta_bytes, zero="·"), _delta(r.start_delta_bytes, zero="·"),
                      str(int(r.count)), site)
    parts.append(table)
    if f.other_sites:
        parts.append(Text(f"... {counted(f.other_sites, 'more site')} hold {format_bytes(f.other_bytes)}", style="dim"))
    if not f.devices.empty:
        dev = Text("devices:")
        for r in f.devices.itertuples(index=False):
            dev.append(f" {safe(display(r.device))} {format_bytes(r.bytes)}")
            if r.delta_bytes:
                dev.append(" ")
                dev.append_text(_delta(r.delta_bytes))
            dev.append(",")
        dev.rstrip()
        if dev.plain.endswith(","):
            dev.right_crop(1)
        parts.append(dev)
    for site, grown, n in f.growing[:3]:
        g = Text("growing: ", style="bold red")
        g.append(f"{safe(site)} {format_bytes(grown, signed=True)} over the last {counted(n, 'snapshot')} seen")
        parts.append(g)
    for kind, message in f.events[:3]:
        parts.append(Text(f"event: {safe(kind)}: {safe(message)[:300]}", style="yellow"))
    return Group(*parts)


def frame_view(frames, *, interval: float | None = None) -> Group:
    """Every process, then a footer line."""
    parts: list[RenderableType] = []
    for i, f in enumerate(frames):
        if i:
            parts.append(Text(""))
        parts.append(process_view(f))
    total = sum(f.live_bytes for f in frames)
    footer = time.strftime("%H:%M:%S")
    if len(frames) > 1:
        footer += f"  {len(frames)} processes, live {format_bytes(total)} in all"
    if interval is not None:
        footer += f"  refreshing every {interval:g} s; Ctrl-C to quit"
    parts.append(Text(footer, style="dim"))
    return Group(*parts)
