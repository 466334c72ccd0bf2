"""A damaged store is refused with a clear message and left as it was; a missing one is created, saying so."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
from pathlib import Path

import pytest

from oximeter.cli import main
from oximeter.store import StoreError, connect, migrate
from stack.procs import oximeter_argv

TABLE = ["CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);"]


def _filled(path: Path) -> Path:
    conn = connect(path)
    migrate(conn, "test", TABLE)
    with conn:
        conn.executemany("INSERT INTO notes (text) VALUES (?)", [(f"note {i} " * 20,) for i in range(3000)])
    conn.close()  # the last connection checkpoints the WAL into the main file
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def _truncated(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _garbage_in_the_middle(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(random.Random(7).randbytes(16 * 1024))


def _emptied(path: Path) -> None:
    path.write_bytes(b"")


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"incidents: []\n" * 100)


DAMAGE = [_truncated, _garbage_in_the_middle, _emptied, _not_a_database]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_a_damaged_store_is_refused_and_left_untouched(tmp_path: Path, damage: object) -> None:
    path = _filled(tmp_path / "oximeter.db")
    damage(path)  # type: ignore[operator]
    before = path.read_bytes()
    with pytest.raises(StoreError, match=str(path)):
        connect(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oximeter.db"]


@pytest.mark.usefixtures("logs_to_stderr")
@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
@pytest.mark.parametrize("command", [["incidents", "list"], ["analyze", "--once", "--replay", "none"],
                                     ["outbox", "list"], ["store", "check"]])
def test_commands_on_a_damaged_store_name_it_without_a_traceback(
        tmp_path: Path, damage: object, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = _filled(tmp_path / "oximeter.db")
    damage(path)  # type: ignore[operator]
    before = path.read_bytes()
    code = main([*command, "--store", str(path)] if command[0] in ("analyze", "outbox")
                else [command[0], "--store", str(path), *command[1:]])
    err = capsys.readouterr().err
    assert code in (1, 2)
    assert str(path) in err and "Traceback" not in err
    assert path.read_bytes() == before


def test_a_missing_store_is_created_and_the_user_told(tmp_path: Path) -> None:
    # A subprocess: the notice goes through the process's logger, which pytest's capture cannot see.
    path = tmp_path / "new" / "oximeter.db"
    first = subprocess.run(oximeter_argv("incidents", "--store", str(path), "list"),
                           capture_output=True, text=True, check=True)
    assert path.is_file()
    assert first.stdout.strip() == "no incidents"
    assert f"no store at {path}: created a new, empty one" in first.stderr
    again = subprocess.run(oximeter_argv("incidents", "--store", str(path), "list"),
                           capture_output=True, text=True, check=True)
    assert "created" not in again.stderr


def test_store_check_and_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _filled(tmp_path / "oximeter.db")
    assert main(["store", "--store", str(path), "check"]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: ok"
    copy = tmp_path / "backup.db"
    assert main(["store", "--store", str(path), "backup", str(copy)]) == 0
    assert sqlite3.connect(copy).execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 3000
    assert main(["store", "--store", str(path), "backup", str(copy)]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err
    os.replace(copy, path)  # a restore is putting the copy in place
    assert main(["store", "--store", str(path), "check"]) == 0
