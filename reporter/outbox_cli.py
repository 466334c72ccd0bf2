"""``oximeter outbox list|deliver``: inspect the chat outbox, or run its delivery loop."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from oximeter.config import load_section
from oximeter.errors import ConfigError
from oximeter.store import StoreError, connect, is_postgres_url
from reporter.outbox import Outbox, OutboxPolicy, OutboxRow, State
from reporter.settings import ReporterSettings

DEFAULT_STATES = (State.PENDING.value, State.DELIVERING.value, State.FAILED.value)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``outbox list`` and ``outbox deliver``."""
    sub = parser.add_subparsers(dest="outbox_command", metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="list pending or failed chat notifications")
    listing.add_argument("--state", choices=[s.value for s in State], action="append",
                         help="only rows in this state (repeatable; default: pending, delivering, failed)")
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    listing.add_argument("--store", default=None, help="store file (default: reporter.store_path)")
    listing.set_defaults(func=list_command)
    deliver = sub.add_parser("deliver", help="deliver due notifications until stopped")
    deliver.add_argument("--once", action="store_true", help="one delivery step, then exit")
    deliver.add_argument("--interval-s", type=float, default=None, help="poll interval (default from config)")
    deliver.add_argument("--store", default=None, help="store file (default: reporter.store_path)")
    deliver.set_defaults(func=deliver_command)


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(rows: list[OutboxRow]) -> str:
    header = ("ID", "STATE", "CHANNEL", "TRIES", "NEXT ATTEMPT", "KEY", "TITLE", "LAST ERROR")
    lines = [header] + [
        (str(r.id), r.state, r.channel, str(r.attempts),
         _when(r.next_attempt_at) if r.state == "pending" else "-",
         r.idempotency_key, r.title[:60], (r.last_error or "")[:80]) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def list_command(args: argparse.Namespace) -> int:
    """Print the outbox rows (no payloads and no webhook URLs: rows name their channel only)."""
    try:
        settings = load_section("reporter", ReporterSettings, args.config)
        store = args.store or settings.store_path
        if not is_postgres_url(store) and not Path(store).exists():  # listing must not create a store
            print(f"outbox: no store at {store}")
            return 0
        outbox = Outbox(connect(store))
    except (ConfigError, StoreError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    rows = outbox.rows(args.state or DEFAULT_STATES)
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], ensure_ascii=False, indent=2))
    elif rows:
        print(_table(rows))
    else:
        print("outbox: nothing " + "/".join(args.state or DEFAULT_STATES))
    return 0


def deliver_command(args: argparse.Namespace) -> int:
    """Run the delivery loop (SIGTERM/SIGINT stop it after the current step)."""
    from reporter.channels import build_channels
    from reporter.worker import DeliveryWorker

    try:
        settings = load_section("reporter", ReporterSettings, args.config)
        outbox = Outbox(connect(args.store or settings.store_path), build_channels(settings.channels),
                        OutboxPolicy.from_settings(settings))
    except (ConfigError, StoreError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if args.once:
        outbox.deliver_due(time.time())
        return 0
    worker = DeliveryWorker(outbox, args.interval_s or settings.deliver_interval_s)

    def stop(signum: int, frame: FrameType | None) -> None:
        worker.stop(timeout_s=0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker.run()
    return 0
