"""``traincheck report``: one self-contained HTML file from the violations of a run.

The file needs nothing but a browser: CSS and the timeline plots (SVG) are inline, there is no
script and no reference to anything on the network, so it can be attached to a ticket or opened
on an air-gapped cluster. Every piece of text comes from traces and is escaped.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from traincheck_agent.messages import warn
from traincheck_agent.output_files import make_output_dir
from traincheck_agent.report.sentences import plural, plural_noun
from traincheck_agent.report.triage import Group, causes, judged_counts, triage
from traincheck_agent.report.violation_schema import record_problem
from traincheck_agent.report.violations import STATS_EVENTS, VIOLATIONS_GLOB, what_happened
from traincheck_agent.report.waived import WaivedPart, split_waived, waived_section

MAX_BINS = 120
MAX_ROWS_PER_GROUP = 200
MAX_LANES = 40
MAX_VARIABLES_SHOWN = 40
RANK_COLOURS = ("#3b6fb6", "#d9822b", "#2e9e6a", "#c0392b", "#8e5cc4", "#8c6d31", "#d35fa0",
                "#5f7f8c")
KIND_COLOURS = {"context": "#8e44ad", "state": "#c0392b", "ordering": "#3b6fb6", "other": "#7f8c8d"}


class ViolationFileError(ValueError):
    """A violations file that cannot be read; ``str()`` names the file (and line)."""


def find_violation_files(root: Path) -> list[Path]:
    """``violations-*.jsonl`` under ``root`` (searched recursively), or ``root`` itself."""
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise ViolationFileError(f"{root}: no such file or directory")
    return sorted(p for p in root.rglob(VIOLATIONS_GLOB) if p.is_file())


@dataclass
class SkippedRecords:
    """Violation records refused by ``violation_schema``: how many, and the first one's
    ``<file>:<line>: <problem>``."""

    count: int = 0
    first: str = ""

    def add(self, path: Path, line_no: int, problem: str) -> None:
        if not self.count:
            self.first = f"{path}:{line_no}: {problem}"
        self.count += 1


def read_violation_file(path: Path, skipped: SkippedRecords | None = None) -> list[dict[str, Any]]:
    """The records of one file. A torn last line (the process died while writing it) is
    skipped with a warning; a line that is not JSON anywhere else is an error naming the file
    and line. A record of the wrong shape is counted in ``skipped`` and left out, or, without
    ``skipped``, an error too."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise ViolationFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    records = []
    for index, (line_no, line) in enumerate(numbered):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if index == len(numbered) - 1:
                warn(f"{path}:{line_no}: skipped a torn last line ({exc})")
                break
            raise ViolationFileError(f"{path}:{line_no}: not valid JSON ({exc})") from None
        problem = record_problem(value)
        if problem:
            if skipped is None:
                raise ViolationFileError(f"{path}:{line_no}: {problem}")
            skipped.add(path, line_no, problem)
            continue
        records.append(value)
    return records


def read_violations(root: Path, stats: list[dict[str, Any]] | None = None,
                    skipped: SkippedRecords | None = None) -> tuple[list[dict[str, Any]], list[Path]]:
    """The violation records under ``root`` and the files read; stats records (``event:
    coverage`` or ``waivers``) are left out, and appended to ``stats`` when given. ``skipped``:
    see ``read_violation_file``."""
    files = find_violation_files(root)
    records = []
    for path in files:
        for record in read_violation_file(path, skipped):
            if record.get("event") in STATS_EVENTS:
                if stats is not None:
                    stats.append(record)
            else:
                records.append(record)
    return records, files


def coverage_text(stats: list[dict[str, Any]]) -> str:
    """The stats records' coverage in one sentence, "" when every example was covered."""
    from traincheck_agent.inference.coverage import Coverage

    coverage = Coverage()
    for record in stats:
        if isinstance(record.get("coverage"), dict):
            coverage.merge(record["coverage"])
    return coverage.summary()


def not_covered_count(stats: list[dict[str, Any]]) -> int | None:
    """Examples outside the references' domain, over the stats records; None without any."""
    counts = [record["coverage"].get("outside") for record in stats if isinstance(record.get("coverage"), dict)]
    if not counts:
        return None
    return sum(n for outside in counts if isinstance(outside, dict) for n in outside.values()
               if isinstance(n, int) and not isinstance(n, bool))


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _step(record: dict[str, Any]) -> int | None:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _rank(record: dict[str, Any]) -> int:
    rank = record.get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else -1


def rank_ranges(ranks: list[int]) -> str:
    """``0, 2-5, 7``: ranks of a large job stay readable."""
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "-"


def _colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)] if rank >= 0 else "#7f8c8d"


@dataclass(frozen=True)
class _Bins:
    """Steps ``lo..hi`` split into at most MAX_BINS bins of ``size`` steps."""

    lo: int
    hi: int
    size: int

    @classmethod
    def over(cls, steps: list[int]) -> _Bins:
        lo, hi = min(steps), max(steps)
        return cls(lo, hi, max(1, math.ceil((hi - lo + 1) / MAX_BINS)))

    @property
    def count(self) -> int:
        return (self.hi - self.lo) // self.size + 1

    def index(self, step: int) -> int:
        return (step - self.lo) // self.size

    def label(self, index: int) -> str:
        first = self.lo + index * self.size
        last = min(first + self.size - 1, self.hi)
        return f"step {first}" if first == last else f"steps {first}-{last}"


_PLOT_W, _LEFT, _RIGHT = 960, 70, 20


def _x_axis(bins: _Bins, bottom: int, bin_w: float) -> list[str]:
    parts = [f'<line x1="{_LEFT}" y1="{bottom}" x2="{_PLOT_W - _RIGHT}" y2="{bottom}" class="axis"/>']
    ticks = min(bins.count, 8)
    for i in range(ticks):
        index = round(i * (bins.count - 1) / max(ticks - 1, 1))
        x = _LEFT + (index + 0.5) * bin_w
        step = bins.lo + index * bins.size
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" class="axis"/>'
                     f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{step}</text>')
    parts.append(f'<text x="{(_LEFT + _PLOT_W - _RIGHT) / 2:.0f}" y="{bottom + 32}" '
                 f'text-anchor="middle" class="label">training step</text>')
    return parts


def per_step_svg(records: list[dict[str, Any]]) -> str:
    """Violations per step, one bar per step (or bin of steps), stacked by rank."""
    stepped = [(step, _rank(r)) for r in records if (step := _step(r)) is not None]
    if not stepped:
        return '<p class="muted">No violation carries a step.</p>'
    bins = _Bins.over([step for step, _ in stepped])
    counts: dict[int, Counter] = {}
    for step, rank in stepped:
        counts.setdefault(bins.index(step), Counter())[rank] += 1
    ranks = sorted({rank for _, rank in stepped})
    top, bottom = 12, 192
    height = bottom + 44 + 22
    peak = max(sum(c.values()) for c in counts.values())
    bin_w = (_PLOT_W - _LEFT - _RIGHT) / bins.count
    scale = (bottom - top) / peak
    parts = [f'<svg class="plot" viewBox="0 0 {_PLOT_W} {height}" '
             f'width="{_PLOT_W}" height="{height}" role="img" aria-label="violations per step">']
    for value in sorted({0, (peak + 1) // 2, peak}):
        y = bottom - value * scale
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_PLOT_W - _RIGHT}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value}</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2:.0f}" class="label" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2:.0f})">violations</text>')
    for index, by_rank in sorted(counts.items()):
        y = float(bottom)
        x = _LEFT + index * bin_w + max(bin_w * 0.1, 0.5)
        w = max(bin_w * 0.8, 1.0)
        total = sum(by_rank.values())
        detail = ", ".join(f"rank {r}: {n}" for r, n in sorted(by_rank.items()))
        for rank in ranks:
            n = by_rank.get(rank, 0)
            if not n:
                continue
            h = n * scale
            y -= h
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                         f'fill="{_colour(rank)}"><title>{_e(bins.label(index))}: {total} '
                         f'violations ({_e(detail)})</title></rect>')
    parts += _x_axis(bins, bottom, bin_w)
    x = _LEFT
    for rank in ranks:
        parts.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" fill="{_colour(rank)}"/>'
                     f'<text x="{x + 14}" y="{height - 5}">rank {rank}</text>')
        x += 80
    parts.append("</svg>")
    return "".join(parts)


def lanes_svg(rows: list[tuple[str, list[dict[str, Any]], str]], all_records: list[dict[str, Any]],
              label: str) -> str:
    """One lane per row (a group or a rank): a dot at each step with violations, its area
    proportional to their number."""
    stepped = [step for r in all_records if (step := _step(r)) is not None]
    if not stepped or not rows:
        return ""
    bins = _Bins.over(stepped)
    left = 300
    plot_w = _PLOT_W - left - _RIGHT
    bin_w = plot_w / bins.count
    lane_h = 22
    bottom = 8 + lane_h * len(rows)
    height = bottom + 40
    peak = 1
    binned = []
    for _, records, _ in rows:
        counts = Counter(bins.index(s) for s in (_step(r) for r in records) if s is not None)
        binned.append(counts)
        peak = max(peak, *counts.values()) if counts else peak
    parts = [f'<svg class="plot" viewBox="0 0 {_PLOT_W} {height}" '
             f'width="{_PLOT_W}" height="{height}" role="img" aria-label="{_e(label)}">']
    for i, ((name, _, colour), counts) in enumerate(zip(rows, binned, strict=True)):
        y = 8 + lane_h * i + lane_h / 2
        short = name if len(name) <= 44 else name[:43] + "\u2026"
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{_PLOT_W - _RIGHT}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end"><title>{_e(name)}</title>'
                     f'{_e(short)}</text>')
        for index, n in sorted(counts.items()):
            cx = left + (index + 0.5) * bin_w
            r = 2.5 + 6.5 * math.sqrt(n / peak)
            parts.append(f'<circle cx="{cx:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{colour}" '
                         f'fill-opacity="0.8"><title>{_e(name)}, {_e(bins.label(index))}: {n} '
                         f'violations</title></circle>')
    # The x axis, on the lanes' own scale.
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{_PLOT_W - _RIGHT}" y2="{bottom}" class="axis"/>')
    ticks = min(bins.count, 6)
    for i in range(ticks):
        index = round(i * (bins.count - 1) / max(ticks - 1, 1))
        x = left + (index + 0.5) * bin_w
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">'
                     f'{bins.lo + index * bins.size}</text>')
    parts.append(f'<text x="{(left + _PLOT_W - _RIGHT) / 2:.0f}" y="{bottom + 32}" '
                 f'text-anchor="middle" class="label">training step</text></svg>')
    return "".join(parts)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;
 margin:0;background:#f4f5f7}
main{max-width:1000px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px}
h3{font-size:15px;margin:0 0 6px}
.muted{color:#66707a}.summary{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0}
.stat{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:6px 12px}
.stat b{display:block;font-size:18px}
.card{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:14px 16px;margin:12px 0}
.card.top{border-left:5px solid #c0392b}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;color:#fff;
 margin-right:6px;vertical-align:1px}
.why{color:#4a535c;font-style:italic;margin:4px 0 8px}
.hint{background:#eef4fb;border-left:3px solid #3b6fb6;padding:4px 10px;margin:6px 0}
.also{border-left:3px solid #9aa5b1;padding:4px 10px;margin:8px 0}
dl{display:grid;grid-template-columns:120px 1fr;gap:2px 12px;margin:6px 0}
dt{color:#66707a}dd{margin:0;overflow-wrap:anywhere}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f6f8fa;border:1px solid #e5e8eb;border-radius:4px;padding:8px;overflow:auto;
 max-height:360px;white-space:pre-wrap;overflow-wrap:anywhere}
.example{background:#fff8f0;border-left:3px solid #d9822b;padding:6px 10px;margin:8px 0;
 overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{text-align:left;border-bottom:1px solid #eceef1;padding:3px 6px;vertical-align:top;
 overflow-wrap:anywhere}
th{background:#f6f8fa}
details{margin:6px 0}summary{cursor:pointer;color:#3b6fb6}
.plot{max-width:100%;height:auto;background:#fff;border:1px solid #dde1e6;border-radius:6px}
.plot text{font-size:11px;fill:#4a535c}.plot .label{font-size:12px;fill:#1d232a}
.plot .axis{stroke:#4a535c;stroke-width:1}.plot .grid{stroke:#e5e8eb;stroke-width:1}
.ok{background:#e8f6ee;border:1px solid #9bd3b1;border-radius:8px;padding:14px 16px}
"""


def _group_label(group: Group) -> str:
    """What the group is about, short enough for a lane: the relation and its API / event."""
    return f"{group.relation} {group.subject}"


def _group_title(group: Group) -> str:
    return group.sentence or _group_label(group)


def _steps_text(group: Group) -> str:
    if group.first_step is None:
        return "none recorded"
    if group.first_step == group.last_step:
        return str(group.first_step)
    return f"{group.first_step} to {group.last_step} ({len(group.steps)} steps with violations)"


def _also_block(group: Group) -> str:
    """A group of the same cause, inside the card of the group that leads it."""
    example = group.example
    return (
        f'<div class="also"><b>Same cause:</b> {_e(_group_title(group))}'
        f'<p class="muted">{_e(_group_label(group))}; {_e(plural(group.count, "violation"))}; steps '
        f'{_e(_steps_text(group))}; invariant {_e(", ".join(group.invariants))}; expected: '
        f'{_e(group.expected or "(not recorded)")}</p>'
        f'<p class="muted">First violation (rank {_e(example.get("rank"))}, step {_e(example.get("step"))}): '
        f"{_e(what_happened(example))}</p></div>"
    )


def _group_card(number: int, group: Group, followers: list[Group] | None = None) -> str:
    colour = KIND_COLOURS[group.kind]
    rows = [
        ("about", _group_label(group)),
        ("expected", group.expected or "(not recorded)"),
        ("steps", _steps_text(group)),
        ("violations", str(group.count)),
        ("ranks", rank_ranges(group.ranks)),
        ("invariants", ", ".join(group.invariants)),
        ("support", f"{group.support} passing examples in the clean runs"),
    ]
    if group.patterns:
        rows.append(("patterns", ", ".join(f"{p} ({n})" for p, n in group.patterns)))
    if group.variables:
        shown = group.variables[:MAX_VARIABLES_SHOWN]
        unshown = len(group.variables) - len(shown)
        rows.append(("variables", ", ".join(shown) + (f" and {unshown} more" if unshown > 0 else "")))
    if group.apis:
        rows.append(("APIs", ", ".join(group.apis)))
    example = group.example
    evidence = example.get("evidence", {})
    table_rows = []
    for record in group.records[:MAX_ROWS_PER_GROUP]:
        table_rows.append(
            f"<tr><td>{_e(record.get('step'))}</td><td>{_e(record.get('rank'))}</td>"
            f"<td>{_e(record.get('variable') or record.get('api') or '')}</td>"
            f"<td>{_e(what_happened(record))}</td></tr>")
    hidden = len(group.records) - len(table_rows)
    more = f'<p class="muted">{hidden} more not listed.</p>' if hidden > 0 else ""
    return (
        f'<article class="card{" top" if number == 1 else ""}" id="group-{number}">'
        f'<h3><span class="badge" style="background:{colour}">#{number} {_e(group.kind)}</span>'
        f"{_e(_group_title(group))}</h3>"
        + (f'<p class="hint"><b>hint:</b> {_e(group.hint)}</p>' if group.hint else "")
        + f'<p class="why">{_e(group.rank_reason)}</p>'
        "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"
        f'<div class="example"><b>First violation</b> (rank {_e(example.get("rank"))}, step '
        f'{_e(example.get("step"))}): {_e(what_happened(example))}</div>'
        f"<details><summary>Evidence</summary><pre>"
        f"{_e(json.dumps(evidence, indent=2, sort_keys=True, default=str))}</pre></details>"
        + "".join(_also_block(other) for other in followers or [])
        +
        f"<details><summary>All {group.count} violations</summary><table><thead><tr><th>step</th>"
        f"<th>rank</th><th>variable / API</th><th>what happened</th></tr></thead><tbody>"
        + "".join(table_rows) + f"</tbody></table>{more}</details></article>"
    )


def header_tiles(kept: list[dict[str, Any]], groups: list[Group], not_covered: int | None = None,
                 waived: int | None = None) -> list[tuple[str, str]]:
    """The report's header tiles, (value, label) each: violations, groups, invariants, ranks,
    steps; examples not covered when the stats records say; waived violations when given (the
    waivers' own count, ``None`` when nothing was waived or waivers are not in use)."""
    ranks = sorted({r for r in (_rank(record) for record in kept) if r >= 0})
    steps = [s for s in (_step(r) for r in kept) if s is not None]
    invariants = {r.get("invariant") for r in kept}
    tiles = [(str(len(kept)), plural_noun(len(kept), "violation")),
             (str(len(groups)), plural_noun(len(groups), "group")),
             (str(len(invariants)), plural_noun(len(invariants), "invariant")),
             (str(len(ranks)) if ranks else "-",
              plural_noun(len(ranks), "rank") + (f" ({rank_ranges(ranks)})" if ranks else "")),
             (f"{min(steps)}\u2013{max(steps)}" if steps else "-", "steps")]
    if not_covered is not None:
        tiles.append((str(not_covered), "not covered (outside the references' domain)"))
    if waived is not None:
        tiles.append((str(waived), "waived"))
    return tiles


def render_report(records: list[dict[str, Any]], source: str, files: list[Path] | None = None,
                  groups: list[Group] | None = None, coverage: str = "", not_covered: int | None = None,
                  waived: WaivedPart | None = None) -> str:
    """The HTML report of ``records`` (violation records of any ranks), grouped by
    :func:`triage` unless ``groups`` is given; ``coverage``: what was not covered, in words, and
    ``not_covered`` how many examples; ``waived``: the waived violations and stale waivers, shown
    in a section of their own and counted in a header tile."""
    groups = triage(records) if groups is None else groups
    waived_html = waived_section(waived) if waived is not None else ""
    kept = [r for g in groups for r in g.records]  # de-duplicated
    ranks = sorted({_rank(r) for r in kept})
    runs = sorted({str(r.get("run_id")) for r in kept if r.get("run_id")})
    waived_count = len(waived.records) if waived is not None and waived.records else None
    led = causes(groups)  # a group of the same cause as an earlier one is shown inside its card
    stats = header_tiles(kept, [lead for lead, _ in led], not_covered, waived_count)
    head = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>traincheck report: {_e(source)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>traincheck report</h1><p class=\"muted\">{_e(source)}"
        + (f" &middot; run {_e(', '.join(runs))}" if runs else "")
        + (f" &middot; {plural(len(files), 'violations file')}" if files is not None else "") + "</p>"
        + (f'<p class="muted">Not covered: {_e(coverage)}. Examples outside the contexts the clean references '
           "showed are counted, never judged.</p>" if coverage else "")
    )
    if not groups:
        held = "every violation was waived" if waived is not None and waived.records else \
            "every checked invariant held"
        body = f'<p class="ok">No violations recorded: {held}.</p>'
        return head + body + waived_html + "</main></body></html>\n"
    summary = '<div class="summary">' + "".join(
        f'<div class="stat"><b>{_e(v)}</b>{_e(k)}</div>' for v, k in stats) + "</div>"
    top = groups[0]
    headline = (f'<p>Likely root cause: <b>{_e(_group_title(top))}</b>.</p>'
                + (f'<p class="hint"><b>hint:</b> {_e(top.hint)}</p>' if top.hint else ""))
    group_rows = [(f"#{i} {_group_label(g)}", [r for member in (g, *followers) for r in member.records],
                   KIND_COLOURS[g.kind])
                  for i, (g, followers) in enumerate(led[:MAX_LANES], start=1)]
    lanes_note = (f" The first {MAX_LANES} of {plural(len(led), 'group')} are drawn."
                  if len(led) > MAX_LANES else "")
    rank_rows = [(f"rank {rank}", [r for r in kept if _rank(r) == rank], _colour(rank))
                 for rank in ranks[:MAX_LANES]]
    ranks_note = (f'<p class="muted">The first {MAX_LANES} of {len(ranks)} ranks are drawn.</p>'
                  if len(ranks) > MAX_LANES else "")
    legend = " ".join(f'<span class="badge" style="background:{c}">{k}</span>'
                      for k, c in KIND_COLOURS.items())
    plots = (
        "<h2>Violations per step</h2>" + per_step_svg(kept)
        + "<h2>Groups over steps</h2>"
        + f'<p class="muted">One lane per group (with the groups of the same cause), in rank order.{lanes_note} {legend}</p>'
        + lanes_svg(group_rows, kept, "groups over steps")
        + "<h2>Ranks over steps</h2>" + ranks_note + lanes_svg(rank_rows, kept, "ranks over steps")
    )
    cards = "<h2>Groups, likely root cause first</h2>" + "".join(
        _group_card(i, g, followers) for i, (g, followers) in enumerate(led, start=1))
    return head + summary + headline + plots + cards + waived_html + "</main></body></html>\n"


def write_report(root: Path, output: Path, skipped: SkippedRecords | None = None, waivers: Any = None,
                 notes: list[str] | None = None) -> tuple[int, int, int, int]:
    """Read the violations under ``root``, write the report to ``output``; returns the numbers
    of records, distinct violations (a violation reported by several ranks counts once),
    groups and files, waived violations left out. ``skipped``: see ``read_violation_file``;
    ``waivers`` (a ``check.waivers.Waivers``): judge every record against it; ``notes``: gets
    the lines about waived violations and stale waivers."""
    stats: list[dict[str, Any]] = []
    records, files = read_violations(root, stats, skipped)
    records, waived = split_waived(records, stats, waivers)
    if notes is not None:
        notes.extend(waived.notes())
    groups = triage(records, judged=judged_counts(stats))
    page = render_report(records, str(root), files, groups, coverage_text(stats), not_covered_count(stats), waived)
    make_output_dir(output.parent)
    output.write_text(page, encoding="utf-8")
    return len(records), sum(g.count for g in groups), len(causes(groups)), len(files)


__all__ = ["SkippedRecords", "ViolationFileError", "find_violation_files", "read_violation_file",
           "read_violations", "render_report", "write_report"]
