"""``oximeter maintenance add|list|end``: planned work during which chat is told nothing of what it breaks."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta

from analyzer.incidents.maintenance import MaintenanceStore, MaintenanceWindow
from analyzer.incidents.settings import IncidentSettings
from analyzer.incidents.store import IncidentStore
from analyzer.service.incidents_cli import who
from oximeter.config import load_section
from oximeter.errors import OximeterError
from oximeter.inputs import InputValueError, parse_duration_s, parse_int, parse_label_value, parse_moment
from oximeter.store import connect


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``add``, ``list`` and ``end``."""
    parser.add_argument("--store", default=None, help="store file (default: incidents.store_path)")
    sub = parser.add_subparsers(dest="maintenance_command", metavar="SUBCOMMAND")
    add = sub.add_parser("add", help="declare a window: detection goes on, chat hears nothing it covers")
    add.add_argument("--node", help="the node under maintenance")
    add.add_argument("--gpu", help="one GPU index of the node (default: the whole node)")
    add.add_argument("--service", help="the service under maintenance (alone, or on the node)")
    add.add_argument("--from", dest="from_", default="now", metavar="TIME",
                     help="start: ISO-8601 (2026-12-05T22:00:00Z; no offset means UTC) or now (default)")
    end = add.add_mutually_exclusive_group(required=True)
    end.add_argument("--to", metavar="TIME", help="end: ISO-8601")
    end.add_argument("--for", dest="for_", metavar="DURATION", help="end this long after the start (2h)")
    add.add_argument("--reason", required=True, help="what the work is, for the incident timeline")
    add.add_argument("--by", default=None, help="who (default: your login name)")
    add.set_defaults(func=run_add)
    listing = sub.add_parser("list", help="windows going on or to come (with --all, past ones too)")
    listing.add_argument("--all", action="store_true")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=run_list)
    stop = sub.add_parser("end", help="end a window now (one not begun is dropped)")
    stop.add_argument("id")
    stop.set_defaults(func=run_end)


def _store(args: argparse.Namespace) -> MaintenanceStore:
    path = args.store or load_section("incidents", IncidentSettings, args.config).store_path
    return MaintenanceStore(IncidentStore(connect(path)).conn)


def _fail(message: str) -> int:
    print(f"oximeter maintenance: {message}", file=sys.stderr)
    return 2


def run_add(args: argparse.Namespace) -> int:
    """Store one window."""
    now = datetime.now(UTC)
    try:
        start = parse_moment(args.from_, "from", now)
        if args.to is not None:
            end = parse_moment(args.to, "to", now)
        else:
            end = start + timedelta(seconds=parse_duration_s(args.for_, "for", allow_number=False))
        node, gpu, service = (None if (v := getattr(args, k)) is None else parse_label_value(v, k)
                              for k in ("node", "gpu", "service"))
        window = MaintenanceWindow(start, end, node, gpu, service, args.reason, who(args))
        if window.end <= now:
            raise InputValueError(f"window: it ended already ({window.end:%Y-%m-%dT%H:%M:%SZ})")
        stored = _store(args).add(window, now)
    except (InputValueError, OximeterError) as exc:
        return _fail(str(exc))
    except OverflowError:  # a start near the year 9999 plus the duration
        return _fail("for: the window ends past the year 9999")
    print(f"maintenance {stored.id}: {stored.describe()} (from {stored.start:%Y-%m-%dT%H:%M:%SZ})")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print the windows."""
    now = datetime.now(UTC)
    try:
        windows = _store(args).overlapping(datetime.min.replace(tzinfo=UTC) if args.all else now,
                                           datetime.max.replace(tzinfo=UTC))
    except OximeterError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps([w.to_dict() for w in windows], indent=2, sort_keys=True))
        return 0
    if not windows:
        print("no maintenance windows")
    for w in windows:
        state = "on" if w.active(now) else "to come" if w.start > now else "over"
        print(f"{w.id}  {state:<7}  {w.start:%Y-%m-%dT%H:%M:%SZ} → {w.end:%Y-%m-%dT%H:%M:%SZ}  {w.scope}  "
              f"{w.reason} (by {w.by})")
    return 0


def run_end(args: argparse.Namespace) -> int:
    """End one window now."""
    try:
        window_id = parse_int(args.id, "id", 1, 2**62)
        ended = _store(args).end_now(window_id, datetime.now(UTC))
    except (InputValueError, OximeterError) as exc:
        return _fail(str(exc))
    if not ended:
        return _fail(f"no maintenance window {args.id} going on or to come")
    print(f"maintenance {window_id} ended")
    return 0
