"""The digest as a chat message (tables per section, chart attached) and as a markdown file."""

from __future__ import annotations

from datetime import date, datetime, tzinfo
from urllib.parse import urlencode

from analyzer.detection.events import iso_utc
from oximeter.vocabulary import Severity
from reporter.chart_link import chart_url
from reporter.digest import Digest, zone
from reporter.digest_capacity import Peak
from reporter.message import Link, Message, Section
from reporter.render import OVERVIEW_UID, dashboard_url, fmt_number
from reporter.settings import ReporterSettings

# Dates past this (the year 9999) are not printed: a growth so slow it never fills.
MAX_EPOCH_S = 253402300799.0
MARK = {"red": "🔴 RED", "yellow": "🟡 YELLOW", "green": "🟢 ok", "none": "⚪ no data"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.3f} %"


def _dur(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def _peak(peak: Peak | None, tz: tzinfo) -> str:
    if peak is None:
        return "-"
    mark = "🔴 " if peak.ratio >= 1.0 else ""  # no headroom left at the peak
    return f"{mark}{peak.ratio * 100:.0f} % ({peak.node} {datetime.fromtimestamp(peak.at, tz):%H:%M})"


def capacity_sections(d: Digest, tz: tzinfo) -> tuple[Section, Section]:
    """Headroom per service, and the N-1 verdict for the fleet at the day's peak."""
    rows: list[tuple[str, ...]] = [("service", "concurrency", "queue", "KV cache", "GPU")]
    rows += [(h.service, *(_peak(p, tz) for p in (h.concurrency, h.queue, h.kv_cache, h.gpu)))
             for h in d.headroom]
    headroom = Section("Headroom at the peak (highest use of each limit: node, time)",
                       table=tuple(rows) if d.headroom else (),
                       body="" if d.headroom else "no gateway series")
    failing = [n.service for n in d.n_minus_one if not n.holds]
    if not d.n_minus_one:
        verdict = "no gateway series: N-1 unknown"
    elif failing:
        verdict = ("**N-1 does not hold**: the fleet could not carry the day's peak with one node down "
                   f"({', '.join(failing)})")
    else:
        verdict = "**N-1 holds**: the fleet could carry the day's peak with its largest node down"
    n1_rows: list[tuple[str, ...]] = [("service", "nodes", "peak demand (in flight + queued)", "at",
                                       "concurrency limit", "without largest node", "N-1")]
    n1_rows += [(n.service, str(n.nodes), f"{n.peak_demand:.0f}", f"{datetime.fromtimestamp(n.at, tz):%H:%M}",
                 f"{n.capacity:.0f}", f"{n.without_largest:.0f} (without {n.largest_node})",
                 "🟢 holds" if n.holds else "🔴 does not hold") for n in d.n_minus_one]
    return headroom, Section("N-1 at the day's peak", verdict, tuple(n1_rows) if d.n_minus_one else ())


def growth_section(d: Digest, tz: tzinfo) -> Section:
    """Steady rises over the whole day toward a capacity, with the date each would be full; those
    beyond the trend alert's horizon open no incident and are said here alone."""
    rows: list[tuple[str, ...]] = [("signal", "series", "now", "growth", "full on", "alert")]
    rows += [(g.signal, g.series, f"{g.level / g.capacity * 100:.1f} % of capacity",
              f"+{g.per_day / g.capacity * 100:.2f} % per day",
              f"{datetime.fromtimestamp(g.full_at, tz):%Y-%m-%d}" if g.full_at < MAX_EPOCH_S else "-",
              "incident (full within the horizon)" if g.alerted else "none: beyond the alert horizon")
             for g in d.growth]
    return Section("Steady growth over the day (leaks), soonest full first",
                   table=tuple(rows) if d.growth else (), body="" if d.growth else "none")


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
    service_rows: list[tuple[str, ...]] = [("service", "requests", "TTFT p99")]
    service_rows += [(r.service, f"{r.requests:.0f}",
                      "-" if r.ttft_p99_s is None else f"{fmt_number(r.ttft_p99_s)} s") for r in d.services]
    services = Section("Requests by service", table=tuple(service_rows) if d.services else (),
                       body="" if d.services else "no requests")
    signal_rows = [("signal", "layer", "minutes anomalous", "most events at once", "incidents",
                    "max × baseline")] + [
        (s.signal, s.layer, f"{s.anomalous_minutes:.0f}", f"{s.peak_events:.0f}", str(s.incidents),
         fmt_number(s.max_ratio)) for s in d.noisy_signals]
    signals = Section("Noisiest signals", table=tuple(signal_rows) if d.noisy_signals else (),
                      body="" if d.noisy_signals else "none")
    gpu_rows = [("node", "ECC corrected", "ECC uncorrected", "Xid", "throttled")] + [
        (g.node, f"{g.ecc_corrected:.0f}", f"{g.ecc_uncorrected:.0f}",
         ", ".join(f"{x}×{n:.0f}" for x, n in g.xid) or "-", f"{g.throttled_minutes:.0f} min")
        for g in d.gpu_health]
    gpus = Section("GPU health by node", table=tuple(gpu_rows) if d.gpu_health else (),
                   body="" if d.gpu_health else "no GPU series")
    learning = Section("Still learning (judged against their last hour alone until a day of history)",
                       ", ".join(f"{signal} ({count:.0f} series)" for signal, count in d.learning) or "none")
    return (seed, *capacity_sections(d, zone(ds.timezone)), incidents, services, budget_section(d),
            growth_section(d, zone(ds.timezone)), signals,
            learning, gpus)


def _times(burn: float | None) -> str:
    return "-" if burn is None else f"{burn:.2f} ×"


def budget_section(d: Digest) -> Section:
    """Each SLO's burn over the day and the budget its window has left, per service."""
    rows: list[tuple[str, ...]] = [("objective", "indicator", "service", "target", "requests", "bad",
                                    "burn over the day", "budget left")]
    rows += [(b.slo, b.sli, b.service, f"{b.target * 100:g} %", f"{b.requests:.0f}", f"{b.bad:.0f}",
              ("🔴 " if (b.day_burn or 0) >= 1 else "") + _times(b.day_burn),
              f"{_pct(b.budget_left)} of {b.window_days:g} d") for b in d.budgets]
    return Section("Error budgets (burn 1 × spends the budget exactly over its window)",
                   table=tuple(rows) if d.budgets else (), body="" if d.budgets else "no requests")


def overview_link(d: Digest, settings: ReporterSettings) -> Link | None:
    """The Overview dashboard over the digest's day."""
    if not settings.grafana_url:
        return None
    return Link("Overview dashboard", dashboard_url(settings.grafana_url, OVERVIEW_UID, d.start, d.end))


def to_message(d: Digest, settings: ReporterSettings, png: bytes | None) -> Message:
    """The chat message (idempotency key ``digest:<date>``: one per day)."""
    at_risk = (d.queue_colour == "red" or d.spread_colour == "yellow"
               or any(not n.holds for n in d.n_minus_one))
    worst: Severity = "warning" if at_risk else "info"
    link = overview_link(d, settings)
    # The day's incidents on the analyzer's page (its filter form takes the same range).
    day = urlencode({"from": iso_utc(d.start), "to": iso_utc(d.end)})
    incidents = Link("Incidents", f"{settings.api_url.rstrip('/')}/incidents?{day}")
    tz = zone(settings.digest.timezone)
    start, end = d.start.astimezone(tz), d.end.astimezone(tz)
    return Message(f"Daily health digest {d.day.isoformat()}", worst, sections(d, settings),
                   (("Day", f"{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} {start:%Z}"),),
                   (*((link,) if link else ()), incidents), image_png=png,
                   image_url=chart_url(settings.api_url, png) if png else None,
                   simulation=settings.simulated or bool(d.simulated_nodes),
                   idempotency_key=digest_key(d.day))


def digest_key(day: date) -> str:
    """``day``'s digest in the store: every channel's message's idempotency key (a channel that has
    it queued has the day's digest) and the claim on building it (one analyzer builds it)."""
    return f"digest:{day.isoformat()}"


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
