"""The recording file: an SQLite database with a format version, and the rules for reading it.

Why SQLite: one file, crash-safe (a commit survives SIGKILL of the writer; WAL lets a reader
replay a recording that is still being written), readable without traintop (``sqlite3``,
pandas), and in Python's standard library.  The numbers people query (time, verdict) are
columns; whole snapshots are compressed frames decoded by ``traintop.store.frames``.

``FORMAT_VERSION`` changes only when tables change.  A newer traintop reads every older version
(``UPGRADES`` turns an old layout into today's with TEMP views, so the file itself is never
modified); an older traintop refuses a newer file with one line.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

FORMAT_VERSION = 1
APPLICATION_ID = 0x54545243  # "TTRC": `file` and `sqlite3` show what the file is
SUFFIX = ".ttrec"

TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE samples (
    id INTEGER PRIMARY KEY, t REAL NOT NULL, mono REAL NOT NULL,
    key_id INTEGER NOT NULL, frame BLOB NOT NULL);
CREATE TABLE verdicts (
    sample_id INTEGER PRIMARY KEY, bottleneck TEXT NOT NULL, severity TEXT NOT NULL,
    confidence REAL NOT NULL, summary TEXT NOT NULL);
CREATE TABLE segments (
    id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, name TEXT NOT NULL, pid INTEGER NOT NULL,
    rank INTEGER NOT NULL, local_rank INTEGER NOT NULL, world_size INTEGER NOT NULL,
    hostname TEXT NOT NULL, phases TEXT NOT NULL, data_phase INTEGER,
    created_realtime_ns INTEGER NOT NULL, created_monotonic_ns INTEGER NOT NULL);
CREATE TABLE steps (
    id INTEGER PRIMARY KEY, segment_id INTEGER NOT NULL, first_seq INTEGER NOT NULL,
    key_seq INTEGER NOT NULL, count INTEGER NOT NULL, lost INTEGER NOT NULL,
    t_first_ns INTEGER NOT NULL, t_last_ns INTEGER NOT NULL, records BLOB NOT NULL);
CREATE INDEX steps_by_segment ON steps(segment_id, first_seq);
"""
# No index on time: samples are written in time order (their id is their order), and a rank's
# steps are read in sequence order.

# UPGRADES[v] presents a version-v file as version v+1 (TEMP views over the old tables).
UPGRADES: dict[int, Callable[[sqlite3.Connection], None]] = {}


class StoreError(Exception):
    """A recording that cannot be written or read; the message is one line for the user."""


def create(conn: sqlite3.Connection, meta: dict[str, str]) -> None:
    """Lay out a new, empty recording."""
    conn.executescript(TABLES)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
    rows = {"format_version": str(FORMAT_VERSION), **meta}
    conn.executemany("INSERT INTO meta VALUES (?, ?)", rows.items())
    conn.commit()


def check(conn: sqlite3.Connection, name: str) -> int:
    """The file's format version, after refusing foreign and newer files in one line each."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise StoreError(f"{name}: not a traintop recording")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > FORMAT_VERSION:
        raise StoreError(
            f"{name}: recorded by a newer traintop (format {version}; this one reads up to "
            f"{FORMAT_VERSION}): upgrade traintop to open it"
        )
    for old in range(version, FORMAT_VERSION):
        UPGRADES[old](conn)
    return version
