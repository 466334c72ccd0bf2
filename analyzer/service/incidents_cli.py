"""``oximeter incidents list|show|stats``: the incident correlation queries on-call runs."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from analyzer.detection.events import iso_utc
from analyzer.diagnosis.rules import RULE_IDS
from analyzer.incidents.lifecycle import Incident, TimelineEntry
from analyzer.incidents.oncall import DEFAULT_SILENCE_S, MAX_SILENCE_S, OnCall
from analyzer.incidents.settings import IncidentSettings
from analyzer.incidents.store import QUERY_PARAMS, IncidentQuery, IncidentStore, QueryError, parse_duration
from oximeter.config import load_section
from oximeter.errors import OximeterError
from oximeter.inputs import InputValueError, format_duration, parse_duration_s, parse_label_value
from oximeter.store import connect
from oximeter.vocabulary import LAYERS, SEVERITIES


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``list``, ``show`` and ``stats``."""
    parser.add_argument("--store", default=None, help="store file (default: incidents.store_path)")
    sub = parser.add_subparsers(dest="incidents_command", metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="incidents, newest first (filters combine)")
    listing.add_argument("--since", default=None,
                         help="active at any time in this last duration (default 24h, unless --from/--to)")
    listing.add_argument("--from", dest="from_", metavar="TIME", help=QUERY_PARAMS["from"])
    listing.add_argument("--to", metavar="TIME", help=QUERY_PARAMS["to"])
    listing.add_argument("--severity", choices=SEVERITIES)
    listing.add_argument("--layer", choices=LAYERS)
    listing.add_argument("--state", choices=("open", "resolved"))
    listing.add_argument("--rule", choices=RULE_IDS)
    listing.add_argument("--service")
    listing.add_argument("--node")
    listing.add_argument("--gpu", help=QUERY_PARAMS["gpu"])
    listing.add_argument("--limit", help=QUERY_PARAMS["limit"] + " (default 500)")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.add_argument("--json", action="store_true", help="the same as --format json")
    listing.set_defaults(func=run_list)
    show = sub.add_parser("show", help="one incident: diagnosis, evidence, impact, timeline")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    for name, text in (("ack", "acknowledge: chat hears only a severity rise and the resolve from now on"),
                       ("silence", "send nothing to chat about this incident for a while"),
                       ("resolve", "resolve by hand (the analyzer applies it on its next cycle)")):
        action = sub.add_parser(name, help=text)
        action.add_argument("id")
        action.add_argument("--note", default="", help="why, for the timeline")
        action.add_argument("--by", default=None, help="who (default: your login name)")
        if name == "silence":
            default = format_duration(DEFAULT_SILENCE_S)
            longest = format_duration(MAX_SILENCE_S)
            action.add_argument("--for", dest="for_", default=default, metavar="DURATION",
                                help=f"how long (default {default}, at most {longest})")
        action.set_defaults(func=run_action)
    stats = sub.add_parser("stats", help="counts by layer and rule, MTTD and MTTR")
    stats.add_argument("--since", default="7d")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=run_stats)


def _store(args: argparse.Namespace) -> IncidentStore:
    path = args.store or load_section("incidents", IncidentSettings, args.config).store_path
    return IncidentStore(connect(path))


def _fail(message: str) -> int:
    print(f"oximeter incidents: {message}", file=sys.stderr)
    return 2


def list_params(args: argparse.Namespace) -> dict[str, str]:
    """The query parameters of ``list``'s options (the API's names); 24 h unless a range is given."""
    names = {"since": "since", "from_": "from", "to": "to", "severity": "severity", "layer": "layer",
             "state": "state", "rule": "rule", "service": "service", "node": "node", "gpu": "gpu",
             "limit": "limit"}
    params = {name: v for attr, name in names.items() if (v := getattr(args, attr)) is not None}
    if not {"since", "from", "to"} & params.keys():
        params["since"] = "24h"
    return params


def run_list(args: argparse.Namespace) -> int:
    """Print matching incidents."""
    now = datetime.now(UTC)
    try:
        query = IncidentQuery.from_params(list_params(args), now)
        found = _store(args).query(query, now)
    except (QueryError, OximeterError) as exc:
        return _fail(str(exc))
    if args.json or args.format == "json":
        print(json.dumps([i.to_dict() for i in found], indent=2, sort_keys=True))
        return 0
    if not found:
        print("no incidents")
        return 0
    rows = [(i.id, i.state, i.severity, i.layer, i.rule, i.root_cause.entity, _hm(i.first_onset))
            for i in found]
    header = ("ID", "STATE", "SEVERITY", "LAYER", "RULE", "ROOT CAUSE", "ONSET")
    widths = [max(len(str(r[c])) for r in (header, *rows)) for c in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _hm(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def render(inc: Incident, timeline: Sequence[TimelineEntry] | None = None) -> str:
    """The human form of ``show``; ``timeline``: the incident's with what on-call did
    (:meth:`analyzer.incidents.oncall.OnCall.timeline`), else its own."""
    lines = [f"{inc.id}  {inc.title}",
             f"state {inc.state} · severity {inc.severity} · layer {inc.layer} · rule {inc.rule}",
             f"root cause: {inc.root_cause.signal} on {inc.root_cause.entity}",
             f"diagnosis: {inc.sentence}", f"runbook: {inc.runbook}",
             f"onset {_hm(inc.first_onset)} · opened {_hm(inc.opened_at)} · resolved {_hm(inc.resolved_at)}",
             f"impact: {', '.join(inc.impact_signals) or '-'}; services: {', '.join(inc.services) or '-'}",
             "evidence:"]
    for e in inc.evidence:
        entity = ",".join(f"{k}={v}" for k, v in e.labels)
        base = "n/a" if e.baseline is None else f"{e.baseline:.4g}"
        full = "" if e.time_to_full_s is None else f", full in {e.time_to_full_s / 3600:.1f} h"
        lines.append(f"  [{e.role}] {e.signal} {entity}: {e.value:.4g} vs baseline {base}{full}, "
                     f"onset {_hm(e.onset)}, cleared {_hm(e.cleared_at)}")
    if inc.changes:
        lines.append("changes in the window:")
        lines += [f"  {_hm(c.at)} {c.kind}: {c.description}" for c in inc.changes]
    if inc.not_judged:
        lines.append("not judged on these inputs:")
        lines += [f"  {line}" for line in inc.not_judged]
    lines.append("timeline:")
    lines += [f"  {_hm(t.at)} {t.kind}: {t.text}" for t in (inc.timeline if timeline is None else timeline)]
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    """Print one incident."""
    try:
        store = _store(args)
        inc = store.get(args.id)
    except OximeterError as exc:
        return _fail(str(exc))
    if inc is None:
        return _fail(f"no incident {args.id!r}")
    oncall = OnCall(store.conn)
    if args.json:
        print(json.dumps(oncall.document(store, inc), indent=2, sort_keys=True))
    else:
        print(render(inc, oncall.timeline(inc)))
    return 0


def who(args: argparse.Namespace) -> str:
    """``--by``, else the login name: who did it, for the timeline."""
    if args.by is not None:
        return str(args.by)
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment (a bare container)
        return "oximeter-cli"


def run_action(args: argparse.Namespace) -> int:
    """``ack``, ``silence`` or ``resolve`` one incident."""
    now, verb = datetime.now(UTC), args.incidents_command
    try:
        by = parse_label_value(who(args), "by")
        note = parse_label_value(args.note, "note", max_len=500)
        store = _store(args)
        if verb == "ack":
            done = store.ack(args.id, by, note, now)
            said = f"acknowledged {args.id}: chat hears only a severity rise and the resolve from now on"
        elif verb == "silence":
            until = now + timedelta(seconds=parse_duration_s(args.for_, "for", maximum_s=MAX_SILENCE_S,
                                                             allow_number=False))
            done = store.silence(args.id, until, by, note, now)
            said = f"silenced {args.id} until {iso_utc(until)}: nothing goes to chat about it until then"
        else:
            outcome = OnCall(store.conn).request_resolve(args.id, by, note, now)
            if outcome == "resolved":
                return _fail(f"{args.id} is resolved already")
            done = outcome == "requested"
            said = f"resolve of {args.id} requested: the analyzer resolves it on its next cycle"
    except (InputValueError, OximeterError) as exc:
        return _fail(str(exc))
    if not done:
        return _fail(f"no incident {args.id!r}")
    print(said)
    return 0


def run_stats(args: argparse.Namespace) -> int:
    """Print counts, MTTD and MTTR."""
    try:
        stats = _store(args).stats(parse_duration(args.since), datetime.now(UTC))
    except (QueryError, OximeterError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0

    def minutes(s: float | None) -> str:
        return "n/a" if s is None else f"{s / 60:.1f} min"

    print(f"incidents since {args.since}: {stats['total']} ({stats['open']} open)")
    print(f"MTTD {minutes(stats['mttd_s'])} (onset → opened) · "
          f"MTTR {minutes(stats['mttr_s'])} (onset → resolved)")
    for title, counts in (("by layer", stats["by_layer"]), ("by rule", stats["by_rule"])):
        print(f"{title}:")
        for name, count in counts.items():
            print(f"  {name:<24} {count}")
    return 0
