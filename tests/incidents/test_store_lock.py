"""One store, one analyzer: a second ``oximeter analyze`` on a held store is refused, naming the holder;
the lock goes with its holder, however that process ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oximeter.cli import main
from oximeter.errors import OximeterError
from oximeter.store_lock import hold_store

HOLDER = ("import sys, time\nfrom oximeter.store_lock import hold_store\n"
          "lock = hold_store(sys.argv[1], 'oximeter analyze')\nprint('held', flush=True)\ntime.sleep(600)\n")


@pytest.mark.usefixtures("logs_to_stderr")
def test_a_second_analyzer_on_a_held_store_is_refused_naming_the_holder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "oximeter.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code = main(["analyze", "--once", "--replay", str(tmp_path / "none"), "--store", str(store)])
        err = capsys.readouterr().err
        assert code == 2
        assert f"{store}: the store is in use by oximeter analyze (pid {holder.pid} on " in err
        assert "Traceback" not in err
        with pytest.raises(OximeterError, match=f"pid {holder.pid}"):
            hold_store(store, "oximeter analyze")
    finally:
        holder.kill()
        holder.wait(30)
    # The kernel dropped the killed holder's lock: the next analyzer gets the store.
    lock = hold_store(store, "oximeter analyze")
    lock.release()


def test_the_lock_is_free_again_once_released(tmp_path: Path) -> None:
    store = tmp_path / "oximeter.db"
    first = hold_store(store, "oximeter analyze")
    with pytest.raises(OximeterError, match=rf"pid {os.getpid()} on .*one analyzer per store"):
        hold_store(store, "oximeter analyze")
    first.release()
    hold_store(store, "oximeter analyze").release()
