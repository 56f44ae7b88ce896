"""A team's own Debezium as the input (issue [6 of 7], acceptance 2).

The topics are written the way Debezium writes them: the snapshot as
``op: "r"`` rows with ``"transaction": null`` and ``source.snapshot``
first/true/last (no BEGIN/END), streamed changes with their transaction
blocks and ``<xid>:<lsn>`` ids, BEGIN/END on ``<prefix>.transaction``, half
the values in JsonConverter's ``{"schema", "payload"}`` envelope, a tombstone
after every delete, a heartbeat; a directory per topic holding one file per
transaction, in the order Debezium wrote them (the single-file layout is in
test_debezium_conformance.py). The values come from txjoin's capture of a
real PostgreSQL (same format, see tests/unit/test_conformance.py), the
snapshot rows from its snapshot files. Every Delta version must equal the
outputs' SQL on PostgreSQL at its cut.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow.parquet as pq
import pytest

from tests.support.capture import current_xid, execute, running_capture, wait_for_xids
from tests.support.oracle import Oracle, check_every_version
from txjoin.changelog.snapshots import read_manifest
from txjoin.join.planned import plan_outputs
from txjoin.pipeline import Pipeline
from txjoin.spec import build_spec

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE a (id int PRIMARY KEY, v int, note text);
CREATE TABLE b (id int PRIMARY KEY, a_id int, w numeric(8,2));
INSERT INTO a SELECT g, g * 10, 'n' || g FROM generate_series(1, 6) g;
INSERT INTO b SELECT g, 1 + g % 6, g * 1.5 FROM generate_series(1, 9) g;
"""
OUTPUTS = {
    "per_a": (
        ["id"],
        "SELECT a.id, a.v, count(b.id) AS k, sum(b.w) AS w FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id, a.v",
    ),
    "total": (["one"], "SELECT 1 AS one, sum(a.v) AS s, count(*) AS n FROM a"),
}
TRANSACTIONS = [
    # One transaction over two tables; an update under REPLICA IDENTITY DEFAULT (no before image).
    ["UPDATE a SET v = v + 1 WHERE id = 1", "INSERT INTO b VALUES (10, 1, 2.25)"],
    ["DELETE FROM b WHERE id = 2"],  # a delete, then Debezium's tombstone
    ["UPDATE b SET a_id = 3 WHERE id = 4", "UPDATE a SET note = NULL WHERE id = 3"],
    ["INSERT INTO a VALUES (7, 70, 'seven')", "INSERT INTO b VALUES (11, 7, 1.00), (12, 7, 3.50)"],
    ["UPDATE a SET id = 8 WHERE id = 7", "UPDATE b SET a_id = 8 WHERE a_id = 7"],  # a key move
    ["DELETE FROM a WHERE id = 6", "DELETE FROM b WHERE a_id = 6"],
]


def _wrapped(value: dict[str, Any]) -> dict[str, Any]:
    """JsonConverter with schemas.enable=true (the schema's content is not read)."""
    return {"schema": {"type": "struct", "optional": False, "name": "envelope"}, "payload": value}


def _snapshot_rows(changelog: Path) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Debezium snapshot rows per topic from txjoin's snapshot, and the snapshot's xid."""
    ref = next((changelog / "_snapshots" / "s").glob("*/manifest.json")).relative_to(changelog)
    m = read_manifest(changelog, str(ref))
    ordered = [(t, r) for t in sorted(m.files) for f in m.files[t] for r in pq.read_table(f).to_pylist()]
    out: dict[str, list[dict[str, Any]]] = {}
    for i, (table, row) in enumerate(ordered):
        schema, name = table.split(".")
        flag = "last" if i == len(ordered) - 1 else "first" if i == 0 else "true"
        out.setdefault(f"s.{table}", []).append(
            {
                "before": None, "after": row, "op": "r", "ts_ms": m.ts_us // 1000, "transaction": None,
                "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "s",
                           "ts_ms": m.ts_us // 1000, "snapshot": flag, "db": "db", "sequence": None,
                           "schema": schema, "table": name, "txId": m.xid, "lsn": m.lsn, "xmin": None},
            }
        )  # fmt: skip
    return out, m.xid


def _debezium_topics(changelog: Path, target: Path) -> int:
    """Write txjoin's changelog as Debezium writes its topics, one file per topic and transaction
    (in commit order, by modification time); the snapshot's xid."""
    snapshot, snapshot_xid = _snapshot_rows(changelog)
    by_tx: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for topic_dir in sorted(changelog.glob("s.public.*")):
        for seg in sorted(topic_dir.glob("*.jsonl")):
            for line in seg.read_text().splitlines():
                v = json.loads(line)
                by_tx.setdefault(v["source"]["txId"], {}).setdefault(topic_dir.name, []).append(v)
    files: list[tuple[str, list[str]]] = []

    def values(vs: list[dict[str, Any]]) -> list[str]:
        lines = []
        for i, v in enumerate(vs):
            lines.append(json.dumps(_wrapped(v) if i % 2 else v))
            if v.get("op") == "d":
                lines.append("null")  # tombstone
        return lines

    for topic, vs in sorted(snapshot.items()):
        files.append((topic, values(vs)))
    markers: list[dict[str, Any]] = []
    for seg in sorted((changelog / "s.transaction").glob("*.jsonl")):
        markers += [json.loads(x) for x in seg.read_text().splitlines()]
    for m in markers:
        xid = int(m["id"].split(":")[0])
        if xid == snapshot_xid:
            continue  # txjoin frames its snapshot; Debezium does not
        if m["status"] == "BEGIN":
            for topic, vs in sorted(by_tx.get(xid, {}).items()):
                files.append((topic, values(vs)))
        files.append(("s.transaction", [json.dumps(m)]))
    for i, (topic, lines) in enumerate(files):
        path = target / topic / f"part-{i:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the order Debezium wrote them in
    (target / "__debezium-heartbeat.s").write_text('{"ts_ms": 1700000000000}\n')
    return snapshot_xid


def test_debezium_topics_yield_outputs_equal_to_postgresql_at_every_version(
    spark: Any, pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, SCHEMA)
    oracle = Oracle(pg_db, {n: sql for n, (_, sql) in OUTPUTS.items()})
    capture_spec = build_spec(
        {
            "name": "cap",
            "state_dir": str(tmp_path / "cap"),
            "sources": {"s": {"dsn": pg_db, "tables": ["public.a", "public.b"]}},
            "outputs": {n: {"key": k, "sql": sql} for n, (k, sql) in OUTPUTS.items()},
        },
        tmp_path,
        "capture",
    )
    config = capture_spec.sources["s"].capture_config(capture_spec.changelog, roll_interval=0.02)
    xids = set()
    with running_capture(config) as ct:
        # The snapshot's cut: the rows before any transaction below.
        manifest = next((capture_spec.changelog / "_snapshots" / "s").glob("*/manifest.json"))
        oracle.record(int(json.loads(manifest.read_text())["xid"]))
        conn = psycopg2.connect(pg_db)
        for statements in TRANSACTIONS:
            with conn.cursor() as cur:
                xid = current_xid(cur)
                for sql in statements:
                    cur.execute(sql)
            conn.commit()
            oracle.record(xid)
            xids.add(xid)
        conn.close()
        wait_for_xids(capture_spec.changelog, "s", xids, ct)
    topics = tmp_path / "topics"
    snapshot_xid = _debezium_topics(capture_spec.changelog, topics)
    spec = build_spec(
        {
            "name": "dbz",
            "state_dir": str(tmp_path / "state"),
            "sources": {
                "s": {
                    "dsn": pg_db,
                    "tables": ["public.a", "public.b"],
                    "format": "debezium",
                    "topics": str(topics),
                }
            },
            "outputs": {n: {"key": k, "sql": sql} for n, (k, sql) in OUTPUTS.items()},
            "options": {"max_batch_bytes": 1},  # a file per micro-batch: a version per transaction
        },
        tmp_path,
        "debezium spec",
    )
    pipeline = Pipeline(spec, spark)
    try:
        pipeline.run_available()
    finally:
        pipeline.close()
    plans = plan_outputs(spec).plans
    for name in OUTPUTS:
        n = check_every_version(plans[name], spec.outputs[name].path, "s", oracle.results[name])
        assert n >= len(TRANSACTIONS) // 2, f"{name}: {n} versions"
    assert snapshot_xid not in xids
