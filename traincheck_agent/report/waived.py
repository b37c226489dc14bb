"""Waived violations in the report: which records a waiver covers, which waivers matched
nothing, and the report's "Waived" section.

A record is waived when it carries a ``waived`` mark (check mode and ``traincheck check`` mark
what their waivers file covers), or, when the report is given a waivers file itself, when that
file covers it: the given file then decides for every record. Which waivers matched nothing
comes from the ``waivers`` stats records of every rank added up (a waiver matched on any rank
is not stale), or from the given file's matches.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from traincheck_agent.check.waivers import Waivers, merge_tallies, waived_mark
from traincheck_agent.report.sentences import plural
from traincheck_agent.report.triage import distinct_violations
from traincheck_agent.report.violations import WAIVERS_EVENT

MAX_ROWS = 200


@dataclass
class WaivedPart:
    """The waived records of a report (distinct: one per violation, however many ranks wrote it)
    and the waivers that matched nothing, in words."""

    records: list[dict[str, Any]] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """Lines for the terminal: how many were waived, and each stale waiver."""
        lines = [f"{plural(len(self.records), 'violation')} waived"] if self.records else []
        return lines + [f"stale: {line}" for line in self.stale]


def split_waived(records: list[dict[str, Any]], stats: list[dict[str, Any]],
                 waivers: Waivers | None = None) -> tuple[list[dict[str, Any]], WaivedPart]:
    """The records that are not waived, and the waived part. With ``waivers``, every record is
    judged against that file (its earlier mark, if any, replaced)."""
    if waivers is not None:
        for record in records:
            record.pop("waived", None)
            waiver = waivers.match(record)
            if waiver is not None:
                record["waived"] = waived_mark(waiver, waivers.path)
    active = [r for r in records if not r.get("waived")]
    waived = distinct_violations([r for r in records if r.get("waived")])
    if waivers is not None:
        stale = [f"waiver {w.index} of {waivers.path} ({w.label()}) matched nothing" for w in waivers.stale()]
    else:
        tallies = [r["waivers"] for r in stats if r.get("event") == WAIVERS_EVENT and isinstance(r.get("waivers"), dict)]
        stale = [f"waiver {e['index']} of {e['file']} ({e['label']}) matched nothing on any rank"
                 for e in merge_tallies(tallies) if not e["matched"]]
    return active, WaivedPart(waived, stale)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def waived_section(part: WaivedPart) -> str:
    """The report's "Waived" section: one row per waiver with the violations it covered; then
    the waivers that matched nothing. "" when there is neither."""
    if not part.records and not part.stale:
        return ""
    by_waiver: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for record in part.records:
        mark = record["waived"]
        by_waiver[(str(mark.get("file", "")), mark.get("waiver", -1))].append(record)
    rows = []
    for (source, index), records in sorted(by_waiver.items())[:MAX_ROWS]:
        steps = sorted({r["step"] for r in records if type(r.get("step")) is int})
        ranks = sorted({r["rank"] for r in records if type(r.get("rank")) is int})
        invariants = sorted({str(r.get("invariant", "")) for r in records})
        step_text = "-" if not steps else str(steps[0]) if steps[0] == steps[-1] else f"{steps[0]}-{steps[-1]}"
        rows.append(f"<tr><td>{_e(source)} #{_e(index)}</td><td>{_e(records[0]['waived'].get('reason', ''))}</td>"
                    f"<td>{_e(', '.join(invariants))}</td><td>{len(records)}</td><td>{_e(step_text)}</td>"
                    f"<td>{_e(', '.join(map(str, ranks)) or '-')}</td></tr>")
    parts = ['<section id="waived"><h2>Waived</h2>',
             f'<p class="muted">{len(part.records)} violations were covered by a waiver: logged, not counted '
             "as failures above.</p>"]
    if rows:
        parts.append("<table><thead><tr><th>waiver</th><th>reason</th><th>invariants</th><th>violations</th>"
                     "<th>steps</th><th>ranks</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    if part.stale:
        parts.append("<h3>Stale waivers</h3><ul>" + "".join(f"<li>{_e(line)}</li>" for line in part.stale) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


__all__ = ["WaivedPart", "split_waived", "waived_section"]
