"""A tuning database that is not what it should be (not SQLite, truncated, another
application's, another schema version, locked) gives an error naming the file and the
problem, and is left byte for byte as it was."""

import os
import sqlite3

import pytest

from nimble._C import tuning

NIMBLE_ID = 0x6E696D62  # PRAGMA application_id of nimble's files ('nimb')


def good_database(path) -> bytes:
    db = tuning.TuningDatabase(str(path))
    assert db.count() == 0
    del db
    return path.read_bytes()


def refused(path, match):
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match=match) as error:
        tuning.TuningDatabase(str(path))
    assert str(path) in str(error.value)
    assert path.read_bytes() == before
    assert not os.path.exists(str(path) + "-wal") or os.path.getsize(str(path) + "-wal") == 0


def test_a_new_database_is_created_and_reopened(tmp_path):
    path = tmp_path / "t.db"
    good_database(path)
    assert tuning.TuningDatabase(str(path)).count() == 0
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == NIMBLE_ID


def test_not_sqlite(tmp_path):
    path = tmp_path / "t.db"
    path.write_bytes(os.urandom(8192))
    refused(path, "not a database")
    path.write_text('{"run": "a json-lines export, not a database"}\n' * 50)
    refused(path, "not a database")


def test_truncated(tmp_path):
    path = tmp_path / "t.db"
    good = good_database(path)
    path.write_bytes(good[: len(good) // 2])
    refused(path, "malformed|not a database")


def test_another_applications_database(tmp_path):
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE customers (name TEXT)")
    refused(path, "not a nimble tuning database.*customers")


def test_another_schema_version(tmp_path):
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA application_id={NIMBLE_ID}")
        c.execute("PRAGMA user_version=2")
        c.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, blob BLOB)")
    refused(path, "schema version 2")


def test_the_measurements_table_with_other_columns(tmp_path):
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA application_id={NIMBLE_ID}")
        c.execute("PRAGMA user_version=1")
        c.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, blob BLOB)")
    refused(path, "other columns")


def test_locked_by_another_process(tmp_path):
    path = tmp_path / "t.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE customers (name TEXT)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(RuntimeError, match="locked.*another process"):
            tuning.TuningDatabase(str(path))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_folder_that_is_not_there(tmp_path):
    with pytest.raises(RuntimeError, match="cannot open"):
        tuning.TuningDatabase(str(tmp_path / "missing" / "t.db"))
    assert not (tmp_path / "missing").exists()


def test_a_new_file_another_process_is_making_the_schema_of_is_read_when_it_is_done(tmp_path):
    """Two processes opening one new file (a driver and a test polling it, two tuners): the
    second saw no tables, then waits on the first's lock; once the first commits, it reads
    the schema the first made instead of making it again."""
    import subprocess
    import sys

    template = tmp_path / "template.db"
    good_database(template)
    with sqlite3.connect(template) as c:
        schema = [sql for (sql,) in c.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")]
    path = tmp_path / "t.db"
    first = subprocess.Popen([sys.executable, "-c", f"""
import sqlite3, sys, time
c = sqlite3.connect({str(path)!r}, isolation_level=None)
c.execute("BEGIN IMMEDIATE")
c.execute("PRAGMA application_id={NIMBLE_ID}")
c.execute("PRAGMA user_version=1")
for sql in {schema!r}:
    c.execute(sql)
print("ready", flush=True)
time.sleep(1.0)
c.execute("COMMIT")
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "ready\n"
        assert tuning.TuningDatabase(str(path)).count() == 0
    finally:
        assert first.wait(timeout=30) == 0
