"""``oximeter ARGS`` through the console script's ``main()`` in the test's own process.

A command run as a process of its own pays a second and a half of imports on this kind of machine;
tests that call a command many times call it here, and keep one call as a real process where the
installed entry point itself is what they check.
"""

from __future__ import annotations

import contextlib
import io
import subprocess

from oximeter.cli import main


def run_main(*args: str) -> subprocess.CompletedProcess[str]:
    """Exit status, stdout and stderr of ``oximeter ARGS``, as ``subprocess.run`` would report them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
