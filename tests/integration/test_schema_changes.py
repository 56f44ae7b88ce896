"""Source schema changes under a running pipeline (issue [5 of 7]).

Changes to columns no output reads are absorbed without a pause; a change to
a column an output reads stops the pipeline before anything past the last
good cut is committed, with one line naming table, column, old -> new and
the resync command; ``txjoin resync`` copies the table again and the next
run rebuilds the outputs that read it, at one cut with the others. A spec
that starts reading a column the replica does not hold is refused with the
same command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import commit, execute, query, running_capture, wait_for_xids
from tests.support.specs import write_spec
from txjoin.cli import main
from txjoin.errors import SchemaChangeError
from txjoin.pipeline import Pipeline
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import load_spec
from txjoin.verify.compare import compare_rows

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE a (id int PRIMARY KEY, v numeric(10,2), name varchar(10), junk int);
CREATE TABLE b (id int PRIMARY KEY, a_id int, w int, junk text);
INSERT INTO a VALUES (1, 1.50, 'one', 0), (2, 2.25, 'two', 0), (3, NULL, 'three', 0);
INSERT INTO b VALUES (1, 1, 10, 'x'), (2, 1, 20, 'y'), (3, 2, 5, 'z');
"""
PER_A = (
    "SELECT a.id, a.v, a.name, count(b.id) AS k, sum(b.w) AS w "
    "FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id, a.v, a.name"
)
BS = "SELECT b.id, b.a_id, b.w FROM b"
EXTRA = "SELECT a.id, a.extra FROM a"


def _write_spec(path: Path, dsn: str, state: Path, outputs: dict[str, tuple[list[str], str]]) -> Path:
    return write_spec(
        path, name="evolve", state_dir=state, source="s", dsn=dsn, tables=["public.a", "public.b"],
        outputs=outputs,
    )  # fmt: skip


def _equal(spec: Any, name: str, sql: str, key: tuple[str, ...]) -> None:
    got = DeltaRsStore().read(spec.outputs[name].path).to_pylist()
    expected = query(spec.sources["s"].dsn, sql)
    assert not (d := compare_rows(got, expected, key)), f"{name}: {d.describe()}"


def test_schema_changes_are_absorbed_refused_and_resynced(
    spark: Any, pg_db: str, tmp_path: Path, capsys: Any
) -> None:
    execute(pg_db, SCHEMA)
    state = tmp_path / "state"
    first = _write_spec(
        tmp_path / "evolve.toml", pg_db, state, {"per_a": (["id"], PER_A), "bs": (["id"], BS)}
    )
    spec = load_spec(first)
    delta = DeltaRsStore()
    paths = {n: spec.outputs[n].path for n in ("per_a", "bs")}

    def run(s: Any) -> None:
        pipeline = Pipeline(s, spark)
        try:
            pipeline.run_available()
        finally:
            pipeline.close()

    config = spec.sources["s"].capture_config(spec.changelog, roll_interval=0.02)
    with running_capture(config) as ct:
        run(spec)
        # Unread columns added, dropped and retyped; a read varchar widened: no pause.
        xids = {
            commit(
                pg_db,
                "ALTER TABLE a ADD COLUMN extra int DEFAULT 7",
                "UPDATE a SET name = 'uno' WHERE id = 1",
            ),
            commit(pg_db, "ALTER TABLE b DROP COLUMN junk", "INSERT INTO b VALUES (4, 3, 1)"),
            commit(
                pg_db, "ALTER TABLE a ALTER COLUMN junk TYPE text", "UPDATE a SET junk = 'j' WHERE id = 2"
            ),
            commit(
                pg_db,
                "ALTER TABLE a ALTER COLUMN name TYPE varchar(40)",
                "UPDATE a SET name = 'trois' WHERE id = 3",
            ),
        }
        wait_for_xids(spec.changelog, "s", xids, ct)
        run(spec)
        _equal(spec, "per_a", PER_A, ("id",))
        _equal(spec, "bs", BS, ("id",))

        # A spec that reads the column added since: refused, naming the resync.
        second = _write_spec(
            tmp_path / "evolve2.toml",
            pg_db,
            state,
            {"per_a": (["id"], PER_A), "bs": (["id"], BS), "extra": (["id"], EXTRA)},
        )
        with pytest.raises(SchemaChangeError) as refused:
            Pipeline(load_spec(second), spark)
        assert f"txjoin resync {second} --table public.a" in str(refused.value)
        assert "public.a.extra" in str(refused.value)

        # A read column's type changes: the batch is refused, nothing is committed.
        versions = {n: len(delta.history(p)) for n, p in paths.items()}
        xids = {
            commit(
                pg_db,
                "ALTER TABLE a ALTER COLUMN v TYPE numeric(12,3)",
                "UPDATE a SET v = 1.125 WHERE id = 1",
            ),
            commit(pg_db, "INSERT INTO b VALUES (5, 1, 2)"),
        }
        wait_for_xids(spec.changelog, "s", xids, ct)
        with pytest.raises(SchemaChangeError) as stopped:
            run(spec)
        line = str(stopped.value)
        assert "public.a: column v changed type numeric(10,2) -> numeric(12,3)" in line
        assert f"txjoin resync {first} --table public.a" in line
        assert "\n" not in line
        assert {n: len(delta.history(p)) for n, p in paths.items()} == versions
        with pytest.raises(SchemaChangeError):
            run(spec)  # a restart stops again: still nothing committed
        assert {n: len(delta.history(p)) for n, p in paths.items()} == versions

        # The resync, then one more change; the next run rebuilds per_a and builds extra.
        assert main(["resync", str(second), "--table", "public.a"]) == 0
        assert "resync of public.a (source s): 3 rows copied" in capsys.readouterr().out
        after = commit(pg_db, "UPDATE a SET v = 9.999 WHERE id = 2", "INSERT INTO b VALUES (6, 2, 3)")
        wait_for_xids(spec.changelog, "s", {after}, ct)
        spec2 = load_spec(second)
        run(spec2)
    for name, sql in (("per_a", PER_A), ("bs", BS), ("extra", EXTRA)):
        _equal(spec2, name, sql, ("id",))
    last = {n: delta.history(spec2.outputs[n].path)[-1].cut["s"] for n in ("per_a", "bs", "extra")}
    assert last["per_a"].xid == last["bs"].xid == last["extra"].xid == after
    schema = delta.read(paths["per_a"]).schema
    assert str(schema.field("v").type) == "decimal128(12, 3)"
    # No per_a version sits between the refused change and the resync: it waited, then was rebuilt.
    cuts = [v.cut["s"].xid for v in delta.history(paths["per_a"])]
    assert not set(cuts) & xids, cuts
