"""The assembly contract through a real Spark streaming query with a checkpoint
(issue [2 of 5], acceptance 2): Debezium JSON segment files appear in a
shuffled order, micro-batch by micro-batch; the query is stopped and
restarted from its checkpoint mid-stream; the released sequence is exactly
the committed transactions, whole, once each, in commit order."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.strategies import Segment, assign_offsets, changelogs, histories, render
from tests.support.profiles import examples
from txjoin.assemble.buffer import AssemblerConfig
from txjoin.assemble.spark import assemble_stream
from txjoin.decode import ChangelogInput, read_events

pytestmark = pytest.mark.spark


def _write(root: Path, seg: Segment, ident: tuple[str, int, int]) -> None:
    topic, first, last = ident
    d = root / f"s.{topic}"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{first}.tmp"
    tmp.write_text("".join(render(r) + "\n" for r in seg.rows))
    os.rename(tmp, d / f"{first:020d}-{last:020d}.jsonl")


class Query:
    def __init__(self, spark: Any, root: Path, checkpoint: Path, sink: dict[int, pd.DataFrame]) -> None:
        events = read_events(spark, ChangelogInput("files", root), ["s"])
        released = assemble_stream(events, AssemblerConfig(incomplete_timeout=1e9))

        def write(df: Any, batch_id: int) -> None:
            sink[batch_id] = df.toPandas()

        self.q = (
            released.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint)).start()
        )

    def drain(self) -> None:
        self.q.processAllAvailable()
        if self.q.exception() is not None:
            raise AssertionError(str(self.q.exception()))

    def stop(self) -> None:
        self.q.stop()


@pytest.mark.slow(105)
@settings(max_examples=examples(ci=15, thorough=200))
@given(st.data())
def test_spark_query_releases_whole_transactions_once_in_commit_order(
    spark: Any, data: st.DataObject
) -> None:
    history = data.draw(histories(max_tx=8))
    segments = data.draw(changelogs(history))
    idents = assign_offsets(segments)
    order = data.draw(st.permutations(segments))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(order))), max_size=4))))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True) if order[a:b]]
    restart_after = data.draw(st.integers(0, max(0, len(batches) - 1)))

    work = Path(tempfile.mkdtemp(prefix="txjoin-spark-prop-"))
    sink: dict[int, pd.DataFrame] = {}
    try:
        root, checkpoint = work / "changelog", work / "checkpoint"
        root.mkdir()
        query = Query(spark, root, checkpoint, sink)
        try:
            for i, batch in enumerate(batches):
                for seg in batch:
                    _write(root, seg, idents[id(seg)])
                query.drain()
                if i == restart_after:
                    query.stop()
                    query = Query(spark, root, checkpoint, sink)
            query.drain()
        finally:
            query.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    frames = [sink[b] for b in sorted(sink) if not sink[b].empty]
    released = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    expected = [
        (seq, tx.xid, tx.end_lsn, e["total_order"], e["op"], e["table"])
        for seq, tx in enumerate(history, start=1)
        for e in tx.events
    ]
    got = (
        list(
            released[["tx_seq", "xid", "commit_lsn", "total_order", "op", "table"]].itertuples(
                index=False, name=None
            )
        )
        if not released.empty
        else []
    )
    assert got == expected
