"""The digest as a chat message (tables per section, chart attached) and as a markdown file."""

from __future__ import annotations

from reporter.digest import Digest, zone
from reporter.message import Link, Message, Section, Severity
from reporter.render import OVERVIEW_UID, dashboard_url, fmt_number
from reporter.settings import ReporterSettings

MARK = {"red": "🔴 RED", "yellow": "🟡 YELLOW", "green": "🟢 ok", "none": "⚪ no data"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.3f} %"


def _dur(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def sections(d: Digest, settings: ReporterSettings) -> tuple[Section, ...]:
    """The digest's sections, in reading order."""
    ds = settings.digest
    routes = ", ".join(f"{route} ({count:.0f})" for route, count in d.top_504_routes) or "none"
    seed = Section("Yesterday at a glance", table=(
        ("number", "value", "status"),
        ("max queue length", f"{fmt_number(d.max_queue_length)} ({d.max_queue_where})",
         f"{MARK[d.queue_colour]} (red > {ds.queue_length_red:g})"),
        ("top-3 routes by 504", routes, ""),
        ("GPU utilisation spread (stddev)", fmt_number(d.gpu_spread),
         f"{MARK[d.spread_colour]} (yellow > {ds.gpu_spread_yellow:g})"),
    ))
    incident_rows: list[tuple[str, ...]] = [("by", "name", "incidents")]
    incident_rows += [("layer", k, str(v)) for k, v in d.by_layer]
    incident_rows += [("rule", k, str(v)) for k, v in d.by_rule]
    incidents = Section(
        "Incidents", f"{d.incidents} incident(s); MTTD {_dur(d.mttd_s)}, MTTR {_dur(d.mttr_s)}",
        table=tuple(incident_rows) if len(incident_rows) > 1 else ())
    slo_rows: list[tuple[str, ...]] = [("service", "requests", "TTFT p99", f"≤ {ds.slo_ttft_p99_s:g} s",
                                        "TTFT budget left", "availability", "availability budget left")]
    slo_rows += [(r.service, f"{r.requests:.0f}",
                  "-" if r.ttft_p99_s is None else f"{fmt_number(r.ttft_p99_s)} s", _pct(r.ttft_share_ok),
                  _pct(r.ttft_budget_left), _pct(r.availability), _pct(r.availability_budget_left))
                 for r in d.slo]
    objectives = f"TTFT p99 ≤ {ds.slo_ttft_p99_s:g} s, availability ≥ {ds.slo_availability * 100:g} %"
    slo = Section(f"SLOs ({objectives})",
                  table=tuple(slo_rows) if len(slo_rows) > 1 else (), body="" if d.slo else "no requests")
    signal_rows = [("signal", "incidents", "max × baseline")] + [
        (name, str(n), fmt_number(ratio)) for name, n, ratio in d.top_signals]
    signals = Section("Top anomalous signals", table=tuple(signal_rows) if d.top_signals else (),
                      body="" if d.top_signals else "none")
    gpu_rows = [("node", "ECC corrected", "ECC uncorrected", "Xid", "throttled")] + [
        (g.node, f"{g.ecc_corrected:.0f}", f"{g.ecc_uncorrected:.0f}",
         ", ".join(f"{x}×{n:.0f}" for x, n in g.xid) or "-", f"{g.throttled_minutes:.0f} min")
        for g in d.gpu_health]
    gpus = Section("GPU health by node", table=tuple(gpu_rows) if d.gpu_health else (),
                   body="" if d.gpu_health else "no GPU series")
    return seed, incidents, slo, signals, gpus


def overview_link(d: Digest, settings: ReporterSettings) -> Link | None:
    """The Overview dashboard over the digest's day."""
    if not settings.grafana_url:
        return None
    return Link("Overview dashboard", dashboard_url(settings.grafana_url, OVERVIEW_UID, d.start, d.end))


def to_message(d: Digest, settings: ReporterSettings, png: bytes | None) -> Message:
    """The chat message (idempotency key ``digest:<date>``: one per day)."""
    worst = Severity.WARNING if "red" in (d.queue_colour,) or d.spread_colour == "yellow" else Severity.INFO
    link = overview_link(d, settings)
    tz = zone(settings.digest.timezone)
    start, end = d.start.astimezone(tz), d.end.astimezone(tz)
    return Message(f"Daily health digest {d.day.isoformat()}", worst, sections(d, settings),
                   (("Day", f"{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} {start:%Z}"),),
                   (link,) if link else (), image_png=png,
                   simulation=settings.simulated or bool(d.simulated_nodes),
                   idempotency_key=f"digest:{d.day.isoformat()}")


def to_markdown(message: Message, png_name: str | None = None) -> str:
    """A markdown file of the message (what ``--dry-run`` writes)."""
    lines = [f"# {message.heading}", ""]
    lines += [f"- **{k}**: {v}" for k, v in message.fields] + [""]
    for section in message.sections:
        lines += [f"## {section.title}", ""]
        if section.body:
            lines += [section.body, ""]
        if section.table:
            header, *rows = section.table
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
            lines.append("")
    for link in message.links:
        lines.append(f"[{link.label}]({link.url})")
    if png_name:
        lines += ["", f"![chart]({png_name})"]
    return "\n".join(lines).rstrip() + "\n"
