"""Assembly end to end (issue [2 of 5], acceptances 3 and 4): a live
PostgreSQL workload through capture and the Spark query releases every
transaction whole, once, in commit order; a transaction over the buffer
limit stops the query with an error naming it and the setting."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg2
import pytest

from tests.support.capture import current_xid, execute, make_config, running_capture, wait_for
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream
from txjoin.changelog import ChangelogReader
from txjoin.decode import ChangelogInput, read_events
from txjoin.verify.replay import read_transactions

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE transfers (id bigserial PRIMARY KEY, src int, dst int, amount bigint);
INSERT INTO accounts SELECT g, 1000 FROM generate_series(1, 20) g;
"""


def _transfers(dsn: str, stop: threading.Event, committed: list[int], seed: int) -> None:
    rng = random.Random(seed)
    conn = psycopg2.connect(dsn)
    while not stop.is_set():
        a, b = rng.sample(range(1, 21), 2)
        amount = rng.randint(1, 50)
        try:
            with conn.cursor() as cur:
                xid = current_xid(cur)
                cur.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a))
                cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b))
                cur.execute("INSERT INTO transfers (src, dst, amount) VALUES (%s, %s, %s)", (a, b, amount))
            conn.commit()
            committed.append(xid)
        except psycopg2.errors.DeadlockDetected:
            conn.rollback()
    conn.close()


class Collector:
    def __init__(self) -> None:
        self.batches: dict[int, pd.DataFrame] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches[batch_id] = df.toPandas()

    def released(self) -> pd.DataFrame:
        frames = [self.batches[b] for b in sorted(self.batches) if not self.batches[b].empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _start_query(spark: Any, changelog: Path, checkpoint: Path, sink: Collector, cfg: AssemblerConfig) -> Any:
    events = read_events(spark, ChangelogInput("files", changelog), ["bank"])
    return (
        assemble_stream(events, cfg)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_live_workload_is_released_whole_once_in_commit_order(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, SCHEMA)
    changelog = tmp_path / "changelog"
    sink = Collector()
    committed: list[int] = []
    stop = threading.Event()
    with running_capture(
        make_config(pg_db, changelog, ["public.accounts", "public.transfers"], prefix="bank")
    ) as ct:
        query = _start_query(spark, changelog, tmp_path / "ck", sink, AssemblerConfig())
        try:
            workers = [
                threading.Thread(target=_transfers, args=(pg_db, stop, committed, s), daemon=True)
                for s in (1, 2, 3)
            ]
            for w in workers:
                w.start()
            time.sleep(6)
            stop.set()
            for w in workers:
                w.join(30)
            wanted = set(committed)

            def all_released() -> bool:
                ct.check()
                if query.exception() is not None:
                    raise AssertionError(str(query.exception()))
                got = sink.released()
                return not got.empty and wanted <= set(got["xid"])

            wait_for(all_released, 120, f"{len(wanted)} transactions to be released")
        finally:
            query.stop()
    released = sink.released()
    ends = read_transactions(ChangelogReader(changelog), "bank")
    assert len(committed) > 100
    # Commit order: the transaction topic's order, snapshot first.
    order = [e.xid for e in ends]
    seqs = released.groupby("tx_seq", sort=True)
    assert [int(g["xid"].iloc[0]) for _, g in seqs] == order
    assert list(released["commit_lsn"]) == sorted(released["commit_lsn"])
    for end in ends:
        tx = released[released["xid"] == end.xid]
        if end.manifest is not None:  # the columnar snapshot: one row naming its manifest
            assert tx["op"].tolist() == ["L"]
            assert tx["value"].tolist() == [end.manifest]
            continue
        # Whole: exactly END's counts; once: distinct positions; one batch.
        assert len(tx) == end.event_count
        assert tx["total_order"].tolist() == list(range(1, end.event_count + 1))
        counts = tx["table"].value_counts().to_dict()
        assert counts == end.counts
        assert set(tx["commit_lsn"]) == {end.end_lsn}
    batch_of = {b: set(df["xid"]) for b, df in sink.batches.items() if not df.empty}
    for xid in set(released["xid"]):
        assert sum(xid in s for s in batch_of.values()) == 1, f"transaction {xid} split across batches"


def test_transaction_over_the_limit_stops_the_query_naming_it(spark: Any, pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    changelog = tmp_path / "changelog"
    sink = Collector()
    cfg = AssemblerConfig(max_transaction_events=1000)
    with running_capture(make_config(pg_db, changelog, ["public.t"], prefix="big")):
        conn = psycopg2.connect(pg_db)
        with conn.cursor() as cur:
            xid_ok = current_xid(cur)
            cur.execute("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 1000) g")  # at the limit: passes
        conn.commit()
        with conn.cursor() as cur:
            xid_big = current_xid(cur)
            cur.execute("INSERT INTO t SELECT g, 'y' FROM generate_series(1001, 2001) g")  # one over
        conn.commit()
        conn.close()
        wait_for(
            lambda: len(read_transactions(ChangelogReader(changelog), "big")) == 3, 30, "both transactions"
        )
    events = read_events(spark, ChangelogInput("files", changelog), ["big"])
    query = (
        assemble_stream(events, cfg)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(Exception, match="max_transaction_events=1000") as err:
        query.processAllAvailable()
    query.stop()
    assert f"transaction {xid_big}" in str(err.value)
    released = sink.released()
    # Nothing of the big transaction, and nothing after it, was released.
    assert xid_big not in set(released["xid"]) if not released.empty else True
    # The transaction at the limit goes through once the limit allows it.
    ok_sink = Collector()
    ok_query = (
        assemble_stream(
            read_events(spark, ChangelogInput("files", changelog), ["big"]),
            AssemblerConfig(max_transaction_events=1001),
        )
        .writeStream.foreachBatch(ok_sink)
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .start()
    )
    ok_query.processAllAvailable()
    ok_query.stop()
    got = ok_sink.released()
    assert got[got["xid"] == xid_ok].shape[0] == 1000
    assert got[got["xid"] == xid_big].shape[0] == 1001
