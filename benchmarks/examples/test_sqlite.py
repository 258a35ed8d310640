"""SQLite through Python's sqlite3 on each backend against plain: inserts in transactions, then a
query on a cold cache, with the write-ahead log (``journal_mode=WAL``) and with the rollback
journal (``DELETE``). ``synchronous=FULL``: each commit reaches the disk, as a database that
keeps its data does.

    pytest benchmarks/examples/test_sqlite.py --encperf-backends=fscrypt,gocryptfs

ENCPERF_EXAMPLE_SCALE (default 1) scales the row count (the project's own tests run it at 0.02).
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_encperf.runner import Runner

SCALE = float(os.environ.get("ENCPERF_EXAMPLE_SCALE", "1"))
ROWS = max(200, int(20_000 * SCALE))
BATCH = 100  # rows per transaction (one commit, one sync)
JOURNALS = ["wal", "delete"]


def rows(start: int, count: int) -> Iterator[tuple[str, float, bytes]]:
    generator = random.Random(start)
    for number in range(start, start + count):
        yield f"item-{number % 997:03d}-{number}", generator.random() * 1000, generator.randbytes(200)


def create(database: Path, journal: str) -> sqlite3.Connection:
    connection = sqlite3.connect(database)
    connection.execute(f"PRAGMA journal_mode={journal}")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT, value REAL, payload BLOB)"
    )
    return connection


def insert_all(database: Path, journal: str) -> None:
    connection = create(database, journal)
    try:
        for start in range(0, ROWS, BATCH):
            with connection:  # one transaction
                connection.executemany(
                    "INSERT INTO items (name, value, payload) VALUES (?, ?, ?)", rows(start, BATCH)
                )
    finally:
        connection.close()


@pytest.mark.parametrize("journal", JOURNALS)
def test_sqlite_inserts(encperf: Runner, journal: str) -> None:
    result = encperf.time(lambda path: insert_all(path / "bench.db", journal))
    assert result.rounds


@pytest.mark.parametrize("journal", JOURNALS)
def test_sqlite_query(encperf: Runner, journal: str) -> None:
    def setup(path: Path) -> None:  # untimed: the database the query reads
        insert_all(path / "bench.db", journal)
        # closed, not only committed: an open database keeps the volume busy at its unmount
        with contextlib.closing(sqlite3.connect(path / "bench.db")) as connection, connection:
            connection.execute("CREATE INDEX by_value ON items (value)")

    def query(path: Path) -> None:  # timed, from a cold cache
        connection = sqlite3.connect(path / "bench.db")
        try:
            groups = connection.execute(
                "SELECT substr(name, 1, 8), count(*), avg(value), sum(length(payload)) FROM items "
                "WHERE value > ? GROUP BY substr(name, 1, 8)",
                (250.0,),
            ).fetchall()
            assert groups
            for low in range(0, 1000, 50):  # range scans through the index
                connection.execute(
                    "SELECT count(*) FROM items WHERE value BETWEEN ? AND ?", (low, low + 5)
                ).fetchone()
        finally:
            connection.close()

    result = encperf.time(query, setup=setup)
    assert result.rounds
