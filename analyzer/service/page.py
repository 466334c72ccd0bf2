"""The incident pages as HTML: server-rendered, no JavaScript, charts as inline SVG.

Pure functions of the incident records (the API's JSON shape and the :class:`Incident`), so they
are tested without a server; ``analyzer/service/api_page.py`` serves them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from analyzer.incidents.lifecycle import Incident
from oximeter.runbook import runbook_link

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em;color:#1d2330}
h1{font-size:1.3em} h2{font-size:1.05em;margin-top:1.6em;border-bottom:1px solid #dde}
table{border-collapse:collapse;width:100%}
td,th{padding:.25em .5em;border-bottom:1px solid #eef;text-align:left}
.critical{color:#b3001b} .warning{color:#a65f00} .info{color:#2456a6} .muted{color:#667}
.badge{display:inline-block;padding:0 .5em;border-radius:.6em;background:#eef;margin-right:.4em}
form.act{display:inline-block;margin:.3em 1em .3em 0;padding:.5em;border:1px solid #dde;border-radius:.4em}
input,select,button{font:inherit;margin:.1em}
"""
# Chart geometry, in SVG user units: labels on the left, room on the right for the last mark's text.
WIDTH, ROW_H, LABEL_W, RIGHT_W = 760, 26, 260, 90


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def _t(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}Z"


def _entity(labels: Sequence[tuple[str, str]] | Mapping[str, str]) -> str:
    pairs = labels.items() if isinstance(labels, Mapping) else labels
    return ",".join(f"{k}={v}" for k, v in pairs if k not in ("uuid", "pci_bus_id", "gpu_model")) or "-"


def list_page(incidents: Sequence[Incident], params: Mapping[str, str], suppressed: Mapping[str, str],
              error: str | None = None) -> str:
    """``/incidents``: a filter form (a plain GET) and the matching incidents, newest first."""
    fields = "".join(
        f"<label>{name} <input name='{name}' value='{escape(params.get(name, ''))}' size='10'></label> "
        for name in ("state", "severity", "layer", "rule", "service", "node", "gpu", "from", "to", "since"))
    rows = "".join(
        f"<tr><td><a href='/incidents/{quote(i.id)}'>{escape(i.id)}</a></td>"
        f"<td>{escape(i.state)}{' (suppressed)' if i.id in suppressed else ''}</td>"
        f"<td class='{escape(i.severity)}'>{escape(i.severity)}</td><td>{escape(i.layer)}</td>"
        f"<td>{escape(i.rule)}</td><td>{escape(i.root_cause.entity or '-')}</td>"
        f"<td>{_t(i.first_onset)}</td></tr>"
        for i in incidents)
    table = ("<table><tr><th>id</th><th>state</th><th>severity</th><th>layer</th><th>rule</th>"
             f"<th>root cause</th><th>onset</th></tr>{rows}</table>") if incidents else "<p>No incidents.</p>"
    problem = f"<p class='critical'>{escape(error)}</p>" if error else ""
    return _page("Incidents", f"<h1>Incidents</h1><form method='get' action='/incidents'>{fields}"
                              f"<button>Filter</button></form>{problem}{table}")


def _log_ratio_x(ratio: float) -> float:
    """Where a value/baseline ratio sits on the evidence chart: 1× in the middle, 1/100× to 100×."""
    clamped = min(100.0, max(0.01, ratio))
    return LABEL_W + (WIDTH - LABEL_W - RIGHT_W) * (math.log10(clamped) + 2) / 4


def evidence_svg(incident: Incident) -> str:
    """Each member's value against its baseline: the band is 1/2× to 2× the baseline, log scale."""
    rows = [e for e in incident.evidence if e.baseline not in (None, 0)]
    if not rows:
        return "<p class='muted'>No member has a baseline to chart against.</p>"
    height = ROW_H * len(rows) + 30
    band = (f"<rect x='{_log_ratio_x(0.5):.1f}' y='0' width='{_log_ratio_x(2) - _log_ratio_x(0.5):.1f}' "
            f"height='{height - 20}' fill='#e4ecfa'><title>baseline band: 1/2× to 2×</title></rect>"
            f"<line x1='{_log_ratio_x(1):.1f}' x2='{_log_ratio_x(1):.1f}' y1='0' y2='{height - 20}' "
            "stroke='#2456a6' stroke-dasharray='4 3'/>")
    marks = []
    for n, e in enumerate(rows):
        y = n * ROW_H + ROW_H / 2
        ratio = e.value / float(e.baseline or 1)
        colour = "#b3001b" if e.role == "cause" else "#a65f00"
        marks.append(
            f"<text x='4' y='{y + 4:.0f}' font-size='12'>{escape(e.signal)} "
            f"{escape(_entity(e.labels))}</text>"
            f"<line x1='{_log_ratio_x(1):.1f}' x2='{_log_ratio_x(ratio):.1f}' y1='{y:.0f}' y2='{y:.0f}' "
            f"stroke='{colour}' stroke-width='8'><title>{e.value:.4g} vs baseline {e.baseline:.4g} "
            f"({ratio:.3g}×)</title></line>")
    axis = "".join(f"<text x='{_log_ratio_x(r):.1f}' y='{height - 6}' font-size='11' text-anchor='middle'>"
                   f"{label}</text>" for r, label in ((0.01, "1/100×"), (0.1, "1/10×"), (1, "baseline"),
                                                      (10, "10×"), (100, "100×")))
    return (f"<svg class='chart' role='img' aria-label='evidence against baseline' width='{WIDTH}' "
            f"height='{height}' xmlns='http://www.w3.org/2000/svg'>{band}{''.join(marks)}{axis}</svg>")


def timeline_svg(incident: Incident, now: datetime) -> str:
    """Each member's anomalous span on a time axis, with the onset, opening and resolve marked."""
    start, end = incident.first_onset, incident.resolved_at or now
    span_s = max(60.0, (end - start).total_seconds())

    def x(moment: datetime) -> float:
        return LABEL_W + (WIDTH - LABEL_W - RIGHT_W) * (moment - start).total_seconds() / span_s

    bars = []
    for n, e in enumerate(incident.evidence):
        y = n * ROW_H + 8
        stop = e.cleared_at or end
        bars.append(f"<text x='4' y='{y + 12:.0f}' font-size='12'>{escape(e.signal)}</text>"
                    f"<rect x='{x(e.onset):.1f}' y='{y:.0f}' width='{max(2.0, x(stop) - x(e.onset)):.1f}' "
                    f"height='14' fill='{'#b3001b' if e.role == 'cause' else '#e0a040'}'>"
                    f"<title>{_t(e.onset)} to {_t(e.cleared_at)}</title></rect>")
    height = ROW_H * len(incident.evidence) + 40
    marks = [("onset", incident.first_onset), ("opened", incident.opened_at)]
    marks += [("resolved", incident.resolved_at)] if incident.resolved_at else []
    lines = "".join(f"<line x1='{x(m):.1f}' x2='{x(m):.1f}' y1='0' y2='{height - 22}' stroke='#334' "
                    f"stroke-dasharray='3 3'/><text x='{x(m) + 3:.1f}' y='{height - 8}' font-size='11'>"
                    f"{label} {m:%H:%M}</text>" for label, m in marks)
    return (f"<svg class='chart' role='img' aria-label='timeline' width='{WIDTH}' height='{height}' "
            f"xmlns='http://www.w3.org/2000/svg'>{''.join(bars)}{lines}</svg>")


def _forms(incident_id: str) -> str:
    base = f"/incidents/{quote(incident_id)}"
    who = ("<input name='by' placeholder='your name' required> <input name='note' placeholder='note'> "
           "<input name='token' type='password' placeholder='write token' required>")
    silence = ("<select name='for'><option>1h</option><option>4h</option><option>24h</option></select>")
    return (f"<form class='act' method='post' action='{base}/ack'>{who} <button>Acknowledge</button></form>"
            f"<form class='act' method='post' action='{base}/silence'>{who} {silence} "
            "<button>Silence</button></form>"
            f"<form class='act' method='post' action='{base}/resolve'>{who} <button>Resolve</button></form>")


def incident_page(incident: Incident, doc: Mapping[str, Any], now: datetime, runbook_url: str = "") -> str:
    """``/incidents/<id>``: what, where and why, the evidence charts, the timeline and the buttons."""
    i = incident
    suppressed = doc.get("suppressed")
    head = (f"<h1 class='{escape(i.severity)}'>{escape(i.title)}</h1>"
            f"<p><span class='badge'>{escape(i.state)}</span><span class='badge'>{escape(i.severity)}</span>"
            f"<span class='badge'>layer {escape(i.layer)}</span>"
            f"<span class='badge'>rule {escape(i.rule)}</span>"
            + (f"<span class='badge'>suppressed: {escape(str(suppressed))}</span>" if suppressed else "")
            + f"</p><p><b>Root cause</b>: {escape(i.root_cause.signal)} on "
            f"{escape(i.root_cause.entity or '-')}. "
            f"{escape(i.sentence)}</p>"
            f"<p><b>Impact</b>: signals {escape(', '.join(i.impact_signals) or '-')}; services "
            f"{escape(', '.join(i.services) or '-')}; nodes {escape(', '.join(i.nodes) or '-')}.</p>"
            f"<p>Onset {_t(i.first_onset)} · opened {_t(i.opened_at)} · resolved {_t(i.resolved_at)}</p>")
    runbook = escape(runbook_link(i.runbook, runbook_url or None))
    evidence_rows = "".join(
        f"<tr><td>{escape(e.role)}</td><td>{escape(e.signal)}</td><td>{escape(_entity(e.labels))}</td>"
        f"<td>{e.value:.4g}</td><td>{'-' if e.baseline is None else f'{e.baseline:.4g}'}</td>"
        f"<td>{_t(e.onset)}</td><td>{_t(e.cleared_at)}</td></tr>" for e in i.evidence)
    changes = "".join(f"<li>{_t(c.at)} {escape(c.kind)}: {escape(c.description)}</li>" for c in i.changes)
    timeline = "".join(f"<tr><td>{escape(str(t['at'])[:19])}Z</td><td>{escape(str(t['kind']))}</td>"
                       f"<td>{escape(str(t['text']))}</td></tr>" for t in doc.get("timeline", ()))
    body = (f"<p><a href='/incidents'>← all incidents</a></p>{head}"
            f"<h2>Evidence against baseline</h2>{evidence_svg(i)}"
            f"<table><tr><th>role</th><th>signal</th><th>entity</th><th>value</th><th>baseline</th>"
            f"<th>onset</th><th>cleared</th></tr>{evidence_rows}</table>"
            f"<h2>When</h2>{timeline_svg(i, now)}"
            f"<h2>Timeline</h2><table id='timeline'>{timeline}</table>"
            + (f"<h2>Changes nearby</h2><ul>{changes}</ul>" if changes else "")
            + f"<h2>Runbook</h2><p>{runbook}</p><h2>Act</h2>{_forms(i.id)}")
    return _page(i.title, body)


def message_page(title: str, text: str, status_link: str = "/incidents") -> str:
    """A short page for a refused or failed action, with the way back."""
    back = f"<p><a href='{escape(status_link)}'>back</a></p>"
    return _page(title, f"<h1>{escape(title)}</h1><p>{escape(text)}</p>{back}")
