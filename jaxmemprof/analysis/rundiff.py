"""Two runs compared (``diff BEFORE AFTER`` of two run directories): what a
change to the program did to what it needs.

A diff of two snapshots (analysis/groups.py) compares the arrays live at two
moments; a fix that lowers what a jitted call needs (a donation, a remat,
a sharding) changes nothing there, since the snapshots never see inside a
call. Two runs are compared by their reports instead: the true peak on each
device (XLA's figures of the call included), what that memory is (the
report's roles, per device), XLA's buffers live at the call's own peak by
the user's line, and the findings resolved, new and kept. One table
(``RUNDIFF_COLUMNS``), one row per device and thing compared, that every
output prints.

A line of one run and a line of the other are one site when they are the
same line of the same file, where a file is named relative to the run's
own script: the script itself (``train.py`` in BEFORE, ``train_fixed.py``
in AFTER) and the files beside it by their path from its directory. Where
both scripts can still be read and differ, a line keeps its identity across
lines added or taken out above it (the two texts matched, as difflib
matches them); else it is the same line number.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jaxmemprof.analysis.check import profile_true_peak
from jaxmemprof.analysis.groups import Table

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed
    from jaxmemprof.analysis.report import Report

# The sections, in the order every output lists them.
TRUE_PEAK, ROLE, LINE, FINDING, LIVE_PEAK = "true peak", "role", "line", "finding", "live peak"
SECTIONS = (TRUE_PEAK, ROLE, LINE, FINDING, LIVE_PEAK)
RESOLVED, NEW, KEPT = "resolved", "new", "kept"
ALL_DEVICES = "all devices"
RUNDIFF_COLUMNS = ["section", "device", "what", "base_what", "kind", "change", "base_bytes", "new_bytes",
                   "delta_bytes"]
SCRIPT = "<script>"  # a site key's file where it is the run's own script

_SITE = re.compile(r"^(?P<file>.*?):(?P<line>\d+)(?: \((?P<function>.*)\))?$")


@dataclass(frozen=True)
class RunDiff:
    """Two runs compared: ``rows`` (a :class:`Table` of ``RUNDIFF_COLUMNS``,
    by section, then largest change first); ``base`` and ``new`` the runs'
    names; the true peaks on the busiest device and where each is;
    ``calls``: (base, new) the functions whose call holds each true peak
    ("" at a snapshot); ``roles_where``: (base, new) the call the roles
    describe; ``omitted``: {section: rows left out by ``top``}."""

    base: str
    new: str
    rows: Table
    base_true_peak_bytes: int | None
    new_true_peak_bytes: int | None
    base_where: str
    new_where: str
    roles_where: tuple = ("", "")
    scripts: tuple = ("", "")  # (base, new) the runs' scripts as their manifests name them
    findings: tuple = ()  # (base Finding or None, new Finding or None) of each finding row, in order (their words)
    omitted: dict = field(default_factory=dict)

    @property
    def true_peak_delta(self) -> int | None:
        if self.base_true_peak_bytes is None or self.new_true_peak_bytes is None:
            return None
        return self.new_true_peak_bytes - self.base_true_peak_bytes

    @property
    def changes(self) -> dict:
        """{resolved|new|kept: how many findings}."""
        i, c = self.rows.columns.index("section"), self.rows.columns.index("change")
        out: dict = {}
        for r in self.rows.rows:
            if r[i] == FINDING:
                out[r[c]] = out.get(r[c], 0) + 1
        return out

    def section(self, name: str) -> Table:
        i = self.rows.columns.index("section")
        return Table(self.rows.columns, [r for r in self.rows.rows if r[i] == name], self.rows.filled)


# -- sites across runs -------------------------------------------------------

def script_of(manifest: dict) -> str | None:
    """The run's script as an absolute path (its manifest's ``argv[0]``
    against its ``cwd``), or None: a module (-m), a command (-c), stdin, a
    notebook, or a run of the API."""
    argv, cwd = manifest.get("argv") or [], manifest.get("cwd")
    if not argv or not isinstance(argv[0], str) or argv[0] in ("-c", "-") or not isinstance(cwd, str):
        return None
    first = argv[0]
    path = first if os.path.isabs(first) else os.path.join(cwd, first)
    if not (first.endswith((".py", ".pyc", ".pyz", ".zip")) or os.path.exists(path)):
        return None  # a module's name (-m)
    return os.path.normpath(path)


class Sites:
    """A run's sites as keys that another run's same lines share: (file
    relative to the run's script, line, function); ``lines``: the script's
    line numbers mapped to the other run's, where both texts are known."""

    def __init__(self, manifest: dict, lines: dict | None = None, *, own: bool = False):
        self.cwd = manifest.get("cwd") if isinstance(manifest.get("cwd"), str) else None
        self.script = script_of(manifest)
        self.own = own  # the script named by its own path (another program's)
        self.home = None
        if self.script is not None:
            self.home = self.script if os.path.isdir(self.script) else os.path.dirname(self.script)
        self.lines = lines or {}

    def file_key(self, shown: str) -> str:
        path = shown if os.path.isabs(shown) or self.cwd is None else os.path.join(self.cwd, shown)
        path = os.path.normpath(path)
        if self.script is not None and path == self.script:
            return path if self.own else SCRIPT
        if self.home is not None and path.startswith(self.home.rstrip(os.sep) + os.sep):
            return os.path.relpath(path, self.home)
        return shown

    def key(self, site: str) -> tuple:
        """The site text ``path:line (function)`` (or ``path:line``) as a
        key; a text of another form is its own key."""
        m = _SITE.match(site or "")
        if m is None:
            return ("", site or "", 0, "")
        file = self.file_key(m["file"])
        line = int(m["line"])
        if file == SCRIPT:
            line = self.lines.get(line, line)
        return (file, "", line, m["function"] or "")


def _read(path: str | None) -> list[str] | None:
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(4 << 20).splitlines()
    except OSError:
        return None


def line_map(before: list[str] | None, after: list[str] | None) -> dict:
    """{line of ``before``: the same line in ``after``} (1-based) where the
    two texts differ by lines added, taken out or changed in place; {}
    where either is unknown or they are the same."""
    if before is None or after is None or before == after:
        return {}
    out = {}
    sm = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):  # a line edited in place stays itself
            out.update({i + 1: j + 1 for i, j in zip(range(i1, i2), range(j1, j2))})
    return out


SAME_PROGRAM = 0.5  # two scripts that can be read are one program's versions from this share of lines alike


def site_keys(base_manifest: dict, new_manifest: dict) -> tuple[Sites, Sites]:
    """The two runs' :class:`Sites`, the base's script lines mapped onto
    the new one's; two scripts that can be read and have less than half
    their lines alike are two programs: each is named by its own path."""
    b, n = script_of(base_manifest), script_of(new_manifest)
    if b == n:
        return Sites(base_manifest), Sites(new_manifest)
    before, after = _read(b), _read(n)
    if before is not None and after is not None and before != after and \
            difflib.SequenceMatcher(None, before, after, autojunk=False).ratio() < SAME_PROGRAM:
        return Sites(base_manifest, own=True), Sites(new_manifest, own=True)
    return Sites(base_manifest, line_map(before, after)), Sites(new_manifest)


def same_sites(base_manifest: dict, new_manifest: dict):
    """For a diff of two runs' snapshots by site or file (groups.diff's
    ``same``): the base's groups that are a line (or file) of the new run
    under another name (``site_keys``) keyed as the new run names them,
    their bytes and counts added where two become one."""
    sb, sn = site_keys(base_manifest, new_manifest)

    def key(k: tuple, sites: Sites, by: str):
        return sites.key(str(k[0])) if by == "site" else sites.file_key(str(k[0]))

    def same(base: dict, new: dict, by: str) -> dict:
        if by not in ("site", "file"):
            return base
        index = {key(k, sn, by): k for k in new}
        out: dict = {}
        for k, (b, c) in base.items():
            k2 = index.get(key(k, sb, by), k)
            if k2 in out:
                out[k2] = [out[k2][0] + b, out[k2][1] + c]
            else:
                out[k2] = [b, c]
        return out

    return same


# -- the comparison ----------------------------------------------------------

def _rows_of(section: str, base: dict, new: dict, names_base: dict, names_new: dict, kinds: dict) -> list[tuple]:
    """Rows for the keys of either side: (key -> bytes) each; names: key ->
    (device, what); kinds: key -> kind."""
    out = []
    for key in dict.fromkeys([*base, *new]):
        b, n = base.get(key), new.get(key)
        if (b or 0) == (n or 0):
            continue
        device, what = names_new.get(key) or names_base[key]
        base_what = names_base[key][1] if key in names_base else ""
        out.append((section, device, what, base_what if base_what != what else "", kinds.get(key, ""), "",
                    int(b or 0), int(n or 0), int(n or 0) - int(b or 0)))
    out.sort(key=lambda r: (-abs(r[8]), r[1], r[2], r[4]))
    return out


def _true_peak(rep: Report) -> tuple[int | None, str]:
    """(the true peak on the busiest device, where): the report's, else a
    profile's without memory events (its largest program's call peak: at
    least that, nothing outside the calls being known)."""
    head = rep.headline
    if head.true_peak_bytes is not None:
        return int(head.true_peak_bytes), head.true_peak_where or ""
    estimated = profile_true_peak(rep)
    if estimated is None:
        return None, ""
    return estimated[0], f"at least: the call peak of {estimated[1]} (a profile without memory events)"


def _device_peaks(ar: Attributed, rep: Report) -> dict:
    """{device: the true peak there} where the report tells it per device:
    the roles of the true peak's own call (they add up to its peak on each
    device), else the busiest device's alone."""
    head = rep.headline
    if head.true_peak_bytes is None:
        estimated = profile_true_peak(rep)  # a profile without memory events: its largest program's call, at least
        return {} if estimated is None else {"busiest device": estimated[0]}
    peaks = ar.peaks
    by = rep.roles.by_role
    same = peaks.in_call and getattr(rep.roles, "call", None) == (peaks.call.function_id, peaks.call.signature,
                                                                   peaks.call.call_index)
    if same and not by.empty and len(set(by["device"])) == max(int(head.devices or 1), 1):
        return {str(d): int(b) for d, b in by.groupby("device", sort=True)["bytes"].sum().items()}
    devices = [str(d.get("name")) for d in (ar.run.manifest.get("devices") or []) if isinstance(d, dict)]
    if len(devices) == 1:
        return {devices[0]: int(head.true_peak_bytes)}
    return {"busiest device": int(head.true_peak_bytes)}


def _role_bytes(rep: Report) -> tuple[dict, dict]:
    by = rep.roles.by_role
    data, names = {}, {}
    for d, role, b in zip(by["device"], by["role"], by["bytes"]):
        data[(str(d), str(role))] = int(b)
        names[(str(d), str(role))] = (str(d), str(role))
    return data, names


def _line_bytes(ar: Attributed, rep: Report, sites: Sites) -> tuple[dict, dict, dict]:
    """XLA's buffers live at the true peak's call's own peak, by the user's
    line and kind (the signature that call ran, else its function's
    largest): (key -> bytes, key -> (device, site), key -> kind)."""
    peaks = ar.peaks
    jp = rep.jit_peak
    if not peaks.in_call or jp.empty:
        return {}, {}, {}
    call = peaks.call
    rows = jp[jp["function_id"] == call.function_id]
    if call.signature is not None and (rows["signature"] == call.signature).any():
        rows = rows[rows["signature"] == call.signature]
    else:
        rows = rows[rows["largest_signature"].astype(bool)]
    data: dict = {}
    names, kinds = {}, {}
    for site, kind, b in zip(rows["site"], rows["kind"], rows["bytes"]):
        key = (sites.key(str(site)), str(kind))
        data[key] = data.get(key, 0) + int(b)
        names[key] = ("per device", str(site))
        kinds[key] = str(kind)
    return data, names, kinds


def _findings(base: list, new: list, sb: Sites, sn: Sites) -> list[tuple]:
    """Each finding of either run: resolved (the base's alone), new (the
    new run's alone) or kept (both: the same rule, case and site), with
    what each says it saves: (row, (base Finding or None, new Finding or None))."""
    def keyed(found, sites):
        out: dict = {}
        for f in found:
            out.setdefault((f.rule, f.case, sites.key(f.site)), f)
        return out

    b, n = keyed(base, sb), keyed(new, sn)
    rows = []
    for key in dict.fromkeys([*b, *n]):
        fb, fn = b.get(key), n.get(key)
        change = KEPT if fb is not None and fn is not None else RESOLVED if fb is not None else NEW
        shown = fn if fn is not None else fb
        assert shown is not None
        base_what = fb.site if fb is not None and fn is not None and fb.site != fn.site else ""
        # on the busiest device, as each report says it (Finding.device_saving)
        sb_, sn_ = (fb.device_saving if fb is not None else None), (fn.device_saving if fn is not None else None)
        delta = (sn_ or 0) - (sb_ or 0) if change == KEPT else None
        rows.append(((FINDING, "", shown.site, base_what, shown.rule + (f" ({shown.case})" if shown.case else ""),
                      change, sb_, sn_, delta), (fb, fn)))
    order = {RESOLVED: 0, NEW: 1, KEPT: 2}
    rows.sort(key=lambda rf: (order[rf[0][5]], -max(rf[0][6] or 0, rf[0][7] or 0), rf[0][4], rf[0][2]))
    return rows


def run_diff(base: tuple[Attributed, Report], new: tuple[Attributed, Report], names: tuple[str, str]) -> RunDiff:
    """BEFORE and AFTER compared: each an attributed run and its report."""
    (bar, brep), (nar, nrep) = base, new
    sb, sn = site_keys(bar.run.manifest, nar.run.manifest)
    rows: list[tuple] = []
    pb, pn = _device_peaks(bar, brep), _device_peaks(nar, nrep)
    wb, wn = _true_peak(brep)[1], _true_peak(nrep)[1]
    for d in sorted(set(pb) | set(pn)):
        b, n = pb.get(d), pn.get(d)
        rows.append((TRUE_PEAK, d, wn or wb, wb if wb != wn else "", "", "", b, n,
                     None if b is None or n is None else n - b))
    tb, tn = brep.headline.true_peak_total_bytes, nrep.headline.true_peak_total_bytes
    if max(int(brep.headline.devices or 1), int(nrep.headline.devices or 1)) > 1 and (tb is not None or
                                                                                     tn is not None):
        rows.append((TRUE_PEAK, ALL_DEVICES, "", "", "", "", tb, tn, None if tb is None or tn is None else tn - tb))
    rb, rnames_b = _role_bytes(brep)
    rn, rnames_n = _role_bytes(nrep)
    rows += _rows_of(ROLE, rb, rn, rnames_b, rnames_n, {})
    lb, lnames_b, kinds_b = _line_bytes(bar, brep, sb)
    ln, lnames_n, kinds_n = _line_bytes(nar, nrep, sn)
    rows += _rows_of(LINE, lb, ln, lnames_b, lnames_n, {**kinds_b, **kinds_n})
    found = _findings(brep.findings, nrep.findings, sb, sn)
    rows += [r for r, _ in found]
    hb, hn = brep.headline, nrep.headline
    (peak_b, where_b), (peak_n, where_n) = _true_peak(brep), _true_peak(nrep)
    if hb.peak_snapshot is not None or hn.peak_snapshot is not None:
        rows.append((LIVE_PEAK, ALL_DEVICES, "", "", "", "", int(hb.peak_bytes), int(hn.peak_bytes),
                     int(hn.peak_bytes) - int(hb.peak_bytes)))
    return RunDiff(base=names[0], new=names[1], rows=Table(RUNDIFF_COLUMNS, rows, True),
                   base_true_peak_bytes=peak_b, new_true_peak_bytes=peak_n, base_where=where_b, new_where=where_n,
                   roles_where=(brep.roles.where, nrep.roles.where), findings=tuple(pair for _, pair in found),
                   scripts=tuple(str((m.get("argv") or [""])[0]) for m in (bar.run.manifest, nar.run.manifest)))


def top(d: RunDiff, n: int | None) -> RunDiff:
    """The first ``n`` rows of the role and line sections (all when None or
    0); what was left out in ``omitted``."""
    if not n:
        return d
    keep: list = []
    omitted: dict = {}
    seen: dict = {}
    i = d.rows.columns.index("section")
    for r in d.rows.rows:
        s = r[i]
        seen[s] = seen.get(s, 0) + 1
        if s in (ROLE, LINE) and seen[s] > n:
            omitted[s] = omitted.get(s, 0) + 1
            continue
        keep.append(r)
    from dataclasses import replace

    return replace(d, rows=Table(d.rows.columns, keep, d.rows.filled), omitted=omitted)
