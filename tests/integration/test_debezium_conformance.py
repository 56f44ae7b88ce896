"""Debezium's own events through txjoin's reader and assembly (issue [6 of 7], acceptance 2).

Built from the captured and documented events in tests/fixtures/debezium/
(the Debezium 2.1.4 create event and the 3.x END marker as templates): a
snapshot (``"transaction": null``, ``source.snapshot`` first/true/last, no
BEGIN/END), a transaction spanning two tables with its BEGIN/END, an update
under REPLICA IDENTITY DEFAULT (``"before": null``), a delete followed by its
tombstone, and a heartbeat; values plain and in JsonConverter's
``{"schema", "payload"}`` envelope; topics as a single file (with and without
an extension) and as a directory. Each must come out of assembly as whole
transactions in commit order, and nothing else.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream
from txjoin.decode import ChangelogInput, read_events
from txjoin.errors import ProtocolError

pytestmark = [pytest.mark.spark]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "debezium" / "real-captures"
CREATE = FIXTURES / "debezium-examples_kafka-ssl_README_pg-create-event_2.1.4.json.txt"
END = FIXTURES / "streaming-examples_TransactionEvent_javadoc_END.json.txt"


def _template() -> dict[str, Any]:
    text = re.sub(r'"schema": \{\s*<omitted>\s*\},', "", CREATE.read_text())  # elided upstream
    payload: dict[str, Any] = json.loads(text)["payload"]
    return payload


def _event(op: str, table: str, xid: int, lsn: int, before: Any, after: Any, **source: Any) -> dict[str, Any]:
    e = copy.deepcopy(_template())
    e.update(op=op, before=before, after=after, transaction=None)
    e["source"].update(table=table, txId=xid, lsn=lsn, **source)
    return e


def _in_tx(e: dict[str, Any], total: int, per_table: int) -> dict[str, Any]:
    xid, lsn = e["source"]["txId"], e["source"]["lsn"]
    e["transaction"] = {"id": f"{xid}:{lsn}", "total_order": total, "data_collection_order": per_table}
    return e


def _end(xid: int, lsn: int, counts: dict[str, int]) -> dict[str, Any]:
    end: dict[str, Any] = json.loads(END.read_text())
    end.update(
        id=f"{xid}:{lsn}",
        event_count=sum(counts.values()),
        data_collections=[{"data_collection": t, "event_count": n} for t, n in counts.items()],
    )
    return end


def _wrapped(v: dict[str, Any]) -> dict[str, Any]:
    return {"schema": {"type": "struct", "name": "dbserver1.inventory.customers.Envelope"}, "payload": v}


def _write(path: Path, values: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("null" if v is None else json.dumps(v) for v in values) + "\n")


def _topics(root: Path) -> None:
    snap = {"snapshot": "true", "sequence": None}
    customers = [
        _event(
            "r",
            "customers",
            700,
            1000,
            None,
            {"id": 1001, "first_name": "Sally"},
            **{**snap, "snapshot": "first"},
        ),
        _event("r", "customers", 700, 1000, None, {"id": 1002, "first_name": "George"}, **snap),
    ]
    orders = [
        _event(
            "r", "orders", 700, 1000, None, {"id": 1, "customer_id": 1001}, **{**snap, "snapshot": "last"}
        ),
    ]
    # Transaction 767 spans both tables; its update has no before image (REPLICA IDENTITY DEFAULT).
    seq = {"snapshot": "false", "sequence": '["1000","2000"]'}
    customers.append(
        _in_tx(_event("u", "customers", 767, 2000, None, {"id": 1001, "first_name": "Sal"}, **seq), 1, 1)
    )
    orders.append(_in_tx(_event("c", "orders", 767, 2010, None, {"id": 2, "customer_id": 1001}, **seq), 2, 1))
    # Transaction 768 deletes a customer; Debezium follows the delete with a tombstone (null value).
    seq = {"snapshot": "false", "sequence": '["2100","2200"]'}
    delete = _in_tx(_event("d", "customers", 768, 2200, {"id": 1002}, None, **seq), 1, 1)
    _write(
        root / "dbserver1.inventory.customers.jsonl",
        [customers[0], _wrapped(customers[1]), customers[2], delete, None],
    )
    _write(root / "dbserver1.inventory.orders", [orders[0], _wrapped(orders[1])])
    markers = [
        {"status": "BEGIN", "id": "767:1990", "ts_ms": 1, "event_count": None, "data_collections": None},
        _end(767, 2100, {"inventory.customers": 1, "inventory.orders": 1}),
        {"status": "BEGIN", "id": "768:2190", "ts_ms": 2, "event_count": None, "data_collections": None},
        _wrapped(_end(768, 2300, {"inventory.customers": 1})),
    ]
    _write(root / "dbserver1.transaction" / "part-0.json", markers)
    _write(root / "__debezium-heartbeat.dbserver1", [{"ts_ms": 1733906400000}])


def _released(spark: Any, root: Path, tmp: Path) -> pd.DataFrame:
    got: list[pd.DataFrame] = []
    events = read_events(spark, ChangelogInput("debezium", root), ["dbserver1"])
    released = assemble_stream(events, AssemblerConfig(check_segments=False, debezium_snapshots=True))
    query = (
        released.writeStream.foreachBatch(lambda df, _: got.append(df.toPandas()))
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return pd.concat(got, ignore_index=True) if got else pd.DataFrame()


def test_debezium_events_come_out_as_whole_transactions(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "topics"
    _topics(root)
    out = _released(spark, root, tmp_path)
    by_tx = {int(str(s)): g for s, g in out.groupby("tx_seq")}
    assert sorted(by_tx) == [1, 2, 3]
    snapshot = by_tx[1]
    assert set(snapshot["xid"]) == {700}
    assert sorted(snapshot["op"]) == ["r", "r", "r"]
    assert set(snapshot["table"]) == {"inventory.customers", "inventory.orders"}
    two_tables = by_tx[2].sort_values("total_order")
    assert list(two_tables["op"]) == ["u", "c"]
    assert list(two_tables["table"]) == ["inventory.customers", "inventory.orders"]
    assert set(two_tables["commit_lsn"]) == {2100}
    update = json.loads(two_tables["value"].iloc[0])
    assert update.get("before", "absent") is None
    deleted = by_tx[3]
    assert list(deleted["op"]) == ["d"]
    assert set(deleted["commit_lsn"]) == {2300}
    assert len(out) == 6, "no row for the tombstone or the heartbeat"


def test_streamed_events_without_transaction_metadata_are_refused(spark: Any, tmp_path: Path) -> None:
    """Debezium without provide.transaction.metadata: refused by name, never half-assembled."""
    root = tmp_path / "topics"
    _write(root / "dbserver1.inventory.customers.jsonl", [_template()])  # the 2.1.4 capture as is
    with pytest.raises(Exception, match=r"provide\.transaction\.metadata=true") as err:
        _released(spark, root, tmp_path)
    assert isinstance(err.value, ProtocolError) or "ProtocolError" in str(err.value)
