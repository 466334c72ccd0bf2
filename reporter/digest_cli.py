"""``oximeter report``: send (or, with ``--dry-run``, preview) the daily health digest."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from oximeter.config import read_config, section
from oximeter.errors import ConfigError, OximeterError
from oximeter.store import StoreError, connect, is_postgres_url
from reporter.settings import ReporterSettings


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oximeter report``."""
    parser.add_argument("--date", default=None, help="day to report, YYYY-MM-DD (default: yesterday)")
    parser.add_argument("--dry-run", action="store_true",
                        help="render to the terminal and write markdown + PNG to --out; send nothing")
    parser.add_argument("--channel", action="append", default=None, metavar="NAME",
                        help="send only to this channel (repeatable; default: digest.channels or all)")
    parser.add_argument("--out", default="digest-preview", help="folder for --dry-run files")
    parser.add_argument("--prometheus", default=None, help="Prometheus URL (default: reporter.digest)")
    parser.add_argument("--store", default=None, help="store file (default: incidents.store_path)")
    parser.set_defaults(func=run)


def _day(text: str | None, tz_name: str | None) -> date:
    from reporter.digest import zone

    if text is None:
        return datetime.now(zone(tz_name)).date() - timedelta(days=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError([f"--date: expected YYYY-MM-DD, got {text[:20]!r}"]) from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def run(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter report``."""
    from analyzer.incidents.settings import IncidentSettings
    from analyzer.incidents.store import IncidentStore
    from reporter.digest_schedule import build, send
    from reporter.prom import digest_client

    try:
        sections, where = read_config(args.config)
        settings = section(sections, "reporter", ReporterSettings, where)
        day = _day(args.date, settings.digest.timezone)
        prom = digest_client(settings.digest, args.prometheus)
        store_path = args.store or section(sections, "incidents", IncidentSettings, where).store_path
        # A preview must not create an empty store as a side effect.
        there = is_postgres_url(store_path) or Path(store_path).exists()
        store = IncidentStore(connect(store_path)) if there or not args.dry_run else None
        if args.dry_run:
            return _preview(build(prom, store, day, settings), Path(args.out))
        return _send(prom, store, day, settings, args.channel, send)
    except (OximeterError, StoreError) as exc:
        print(f"oximeter report: {exc}", file=sys.stderr)
        return 1


def _preview(built: Any, out: Path) -> int:
    from rich.console import Console
    from rich.markdown import Markdown

    from reporter.digest_render import to_markdown

    digest, message = built
    out.mkdir(parents=True, exist_ok=True)
    stem = f"digest-{digest.day.isoformat()}"
    png = out / f"{stem}.png"
    png.write_bytes(message.image_png or b"")
    text = to_markdown(message, png.name)
    (out / f"{stem}.md").write_text(text, encoding="utf-8")
    numbers = {k: v for k, v in asdict(digest).items() if k != "chart"}
    (out / f"{stem}.json").write_text(json.dumps(_jsonable(numbers), indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    Console(width=140).print(Markdown(text))
    print(f"wrote {out / stem}.md, .png and .json")
    return 0


def _send(prom: Any, store: Any, day: date, settings: Any, channels: list[str] | None, send: Any) -> int:
    from reporter.channels import build_channels
    from reporter.outbox import Outbox, OutboxPolicy

    if not settings.channels:
        print("oximeter report: no channels configured (reporter.channels); try --dry-run", file=sys.stderr)
        return 2
    unknown = sorted(set(channels or ()) - set(settings.channels))
    if unknown:
        print(f"oximeter report: unknown channel(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    outbox = Outbox(store.conn, build_channels(settings.channels), OutboxPolicy.from_settings(settings))
    message = send(prom, store, outbox, day, settings, channels)
    outbox.deliver_due(time.time())
    rows = [r for r in outbox.rows() if r.idempotency_key == message.idempotency_key]
    for row in rows:
        print(f"{row.channel}: {row.state}" + (f" ({row.last_error})" if row.last_error else ""))
    return 0 if all(r.state == "sent" for r in rows) else 1
