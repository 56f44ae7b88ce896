"""The assembly operator on Spark: ``applyInPandasWithState``, one group per source.

Grouping by transaction id would call Python once per transaction (about
2.3k events/s here); one group per source calls it once per micro-batch with
all of the source's rows, and :func:`~txjoin.assemble.buffer.assemble` works
on them vectorized. Commit order also needs one place that sees the whole
source. This module only converts between Spark's ``GroupState`` and
:class:`~txjoin.assemble.buffer.AssemblyState`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from txjoin.assemble.buffer import OUTPUT_COLUMNS, AssemblerConfig, AssemblyState, _empty, assemble
from txjoin.decode import EVENT_COLUMNS

__all__ = ["OUTPUT_SCHEMA", "STATE_SCHEMA", "assemble_stream", "state_function", "state_partitions"]

log = logging.getLogger(__name__)

_SPARK_TYPES = {"int64": "long", "object": "string"}
OUTPUT_SCHEMA = ", ".join(f"{c} {_SPARK_TYPES[t]}" for c, t in OUTPUT_COLUMNS.items())
STATE_SCHEMA = "meta string, frames binary"

#: Released frames' integer columns as pandas' nullable Int64 (the values are never null). PySpark
#: pads its output with an empty all-None frame: a plain int64 column becomes object there and goes
#: to Arrow one Python int at a time; an Int64 one keeps its dtype (bench/NOTES.md).
_OUTPUT_DTYPES = {c: "Int64" for c, t in OUTPUT_COLUMNS.items() if t == "int64"}


def state_function(
    cfg: AssemblerConfig,
) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The function ``applyInPandasWithState`` calls for each source and batch."""

    def run(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        source = str(key[0])
        if state.exists:
            meta, blob = state.get
            st = AssemblyState.restore(meta, blob)
        else:
            st = AssemblyState(source=source)
        released, report = assemble(st, _events(frames), cfg, time.time())
        state.update((st.meta_json(), st.frames_bytes()))
        if report.released_transactions:
            log.debug(
                "source %s: released %d transactions (%d events), %d events buffered",
                source,
                report.released_transactions,
                report.released_events,
                report.buffered_events,
            )
        for frame in released:
            yield frame.astype(_OUTPUT_DTYPES)

    return run


def _events(frames: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """Assembly's input columns of the Arrow chunks Spark passes, as one frame.

    Column by column: ``pd.concat`` tests every value of an all-None object column (a marker's
    ``value``, a change's ``dc_table``) for NA, which cost more than converting the chunks from
    Arrow (bench/NOTES.md)."""
    parts = [f for f in frames if not f.empty]
    if not parts:
        return _empty(EVENT_COLUMNS)
    return pd.DataFrame({c: np.concatenate([p[c].to_numpy() for p in parts]) for c in EVENT_COLUMNS})


def assemble_stream(events: Any, cfg: AssemblerConfig) -> Any:
    """Whole transactions, in commit order per source, from decoded events."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return events.groupBy("source").applyInPandasWithState(
        state_function(cfg),
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


@contextlib.contextmanager
def state_partitions(spark: Any, sources: int) -> Iterator[None]:
    """Start a streaming query inside this block to give its assembly at most one state partition per
    source: each source is one group, so further partitions only add an empty task and a state store
    commit to every micro-batch. Spark fixes the count in a new checkpoint (an existing one keeps its
    own); the session's setting, which the join stage's queries use, is restored on leaving."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    spark.conf.set(key, str(max(1, min(int(before), sources))))
    try:
        yield
    finally:
        spark.conf.set(key, before)
