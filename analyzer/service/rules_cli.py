"""``oximeter rules build [--check]``: the signal recording rules, the adapters' plain translations,
the SLOs' rules and the alerting rules at the configured limits, with their PrometheusRule objects.

A command of the service stage: the alerting rules' limits are the configured catalogue's, read
from the detectors the analyzer runs (``analyzer/service/limits.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alert_rules import RULES_DIR, kubernetes
from analyzer.service.limits import configured_limits
from analyzer.signals.recording_rules import (
    ADAPTER_PARTS,
    SIGNALS_RULES,
    SLO_RULES,
    alert_templates,
    render,
    render_alerts,
    rendered_adapters,
)
from analyzer.signals.slo import SloSettings
from analyzer.signals.slo_rules import render_slos
from oximeter.config import load_section
from oximeter.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``build`` sub-command."""
    subparsers = parser.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    build = subparsers.add_parser("build", help="write the signal recording rules from the catalogue, "
                                  "the adapters' plain translations from their tables and the rules' "
                                  "PrometheusRule objects for Kubernetes")
    build.add_argument("--out", type=Path, default=SIGNALS_RULES,
                       help=f"output file (default: {SIGNALS_RULES})")
    build.add_argument("--slo-out", type=Path, default=SLO_RULES,
                       help="the SLOs' error ratios and burn-rate alerts, from the configuration's slos "
                            f"section (default: {SLO_RULES})")
    build.add_argument("--alerts-dir", type=Path, default=RULES_DIR,
                       help="where the alerting rules go, written from alert_rules/templates with the "
                            "configuration's limits (analyzer.signals, analyzer.alert_limits) "
                            f"(default: {RULES_DIR})")
    build.add_argument("--check", action="store_true",
                       help="write nothing; exit 1 when the file differs from the catalogue")
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    try:
        slos = load_section("slos", SloSettings, args.config)
        alerts = render_alerts(configured_limits(args.config), args.alerts_dir)
        shipped = (SIGNALS_RULES, SLO_RULES, *ADAPTER_PARTS, *(RULES_DIR / t.name for t in alert_templates()))
        wanted = {args.out: render(), args.slo_out: render_slos(slos), **rendered_adapters(), **alerts}
        # The PrometheusRule objects hold the rule files at their shipped paths: what this build
        # writes there, else what is there (a build written elsewhere leaves them as they are).
        wanted.update(kubernetes.rendered({p: t for p, t in wanted.items() if p in shipped}))
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"oximeter rules build: {exc}", file=sys.stderr)
        return 2
    stale = [path for path, text in wanted.items()
             if (path.read_text(encoding="utf-8") if path.exists() else None) != text]
    if args.check:
        for path in stale:
            print(f"stale: {path} (run: oximeter rules build)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path], encoding="utf-8")
        print(path)
    return 0
