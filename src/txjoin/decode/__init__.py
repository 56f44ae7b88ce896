"""Read a changelog as a Spark stream and decode Debezium envelopes into rows.

Three inputs, one decoder:

- ``files``: the embedded changelog, every topic of the sources read by
  offset (:mod:`txjoin.changelog.stream`; queries whose checkpoint began
  with Spark's file source keep it: ``<root>/<source>.*/*.jsonl``). Each
  record carries its segment's range, so assembly can see gaps in the
  transaction topic.
- ``debezium``: topics a team's own Debezium wrote, as Kafka Connect's
  FileStreamSink or a kcat dump leaves them: one JSON value per line, one
  file (``<topic>``, ``<topic>.jsonl``) or directory per topic. Each file is
  read once, when it appears: a topic grows by new files, not by appending.
- ``kafka``: the same topics in Kafka (value = the same JSON). Needs Spark's
  Kafka package on the classpath, which this repository's tests cannot load;
  the decoder below is shared and tested with the file input.

Values may be plain or wrapped as ``{"schema": ..., "payload": ...}``
(JsonConverter with schemas.enable=true). Tombstones (``null``) are skipped.
A record that does not parse becomes a ``bad`` row, which assembly turns into
an error naming the file: bad input is loud, never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from txjoin.changelog import SEGMENT_FILE_PATTERN, SEGMENT_GLOB, topic_glob
from txjoin.changelog.stream import read_stream
from txjoin.debezium.topics import DEBEZIUM_HEARTBEAT_PREFIX, HEARTBEAT_TOPIC_RE, TRANSACTION_SUFFIX
from txjoin.decode.columns import EVENT_COLUMNS, EVENT_SCHEMA
from txjoin.errors import ConfigError, MissingDependency
from txjoin.spec import PipelineSpec, memory

__all__ = [
    "EVENT_COLUMNS",
    "ChangelogInput",
    "ReaderKind",
    "changelog_input",
    "decode",
    "raw_stream",
    "read_decoded",
    "read_events",
]

#: How the embedded changelog is read (:class:`ChangelogInput`).
ReaderKind = Literal["offsets", "files"]

#: A record's path: its topic directory, then its segment's first and last offsets.
_SEGMENT_RE = r"/([^/]+)/" + SEGMENT_FILE_PATTERN + "$"


@dataclass(frozen=True)
class ChangelogInput:
    """Where the pipeline reads change events from."""

    kind: Literal["files", "kafka", "debezium"] = "files"
    #: Root of the embedded changelog (kind='files').
    path: Path | None = None
    #: Kafka consumer options, e.g. {"kafka.bootstrap.servers": "host:9092"}.
    kafka_options: dict[str, str] = field(default_factory=dict)
    #: Most bytes of changelog files one micro-batch reads (0: no limit).
    max_batch_bytes: int = 0
    #: kind='files': read by offset (``offsets``), or with Spark's file source (``files``),
    #: whose queries start 0.4 s sooner but list every segment at each trigger.
    reader: ReaderKind = "offsets"
    #: kind='files' read by offset: decode in the reader with Arrow (:mod:`.arrow`) instead of
    #: Spark's ``from_json``. Off by default since bench.size's 2,000,000-row transaction peaked at
    #: 5.59-6.91 GiB with it; without it, runs have since peaked at 4.57-6.75 GiB, so the JVM's heap
    #: growth decides the peak, not the decoder (bench/NOTES.md). Not yet measured on in a full run.
    arrow_decoder: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("files", "kafka", "debezium"):
            raise ConfigError(
                f"changelog kind {self.kind!r} is invalid: valid values are 'files', 'kafka', 'debezium'"
            )
        if self.kind in ("files", "debezium") and self.path is None:
            raise ConfigError(f"changelog kind {self.kind!r} needs a path")
        if self.reader not in get_args(ReaderKind):
            valid = ", ".join(repr(k) for k in get_args(ReaderKind))
            raise ConfigError(f"changelog reader {self.reader!r} is invalid: valid values are {valid}")
        if self.kind == "kafka" and "kafka.bootstrap.servers" not in self.kafka_options:
            raise ConfigError("changelog kind 'kafka' needs kafka_options['kafka.bootstrap.servers']")

    def trigger(self, configured: str = "") -> str:
        """The trigger interval: ``configured`` ([options] trigger_interval), else this input's.
        An idle trigger on txjoin's changelog reads an index (about 1 ms), so 100 ms costs no
        measurable CPU and shortens a quiet source's wait (bench/NOTES.md); Spark's file source
        lists Debezium's topic files at every trigger, so they keep 250 ms. Busy pipelines run
        their batches back to back anyway."""
        if configured:
            return configured
        return "100 milliseconds" if self.kind == "files" else "250 milliseconds"


def changelog_input(spec: PipelineSpec, reader: ReaderKind = "offsets") -> ChangelogInput:
    """Where ``spec``'s pipeline reads: txjoin's changelog (by ``reader``), or the sources'
    Debezium topics."""
    limit = memory(spec.options).batch_bytes
    first = next(iter(spec.sources.values()))
    if first.format == "debezium":
        return ChangelogInput("debezium", first.topics, max_batch_bytes=limit)
    return ChangelogInput("files", spec.changelog, max_batch_bytes=limit, reader=reader)


def _envelope_schema() -> Any:
    from pyspark.sql import types as T

    source = T.StructType(
        [
            T.StructField("name", T.StringType()),
            T.StructField("snapshot", T.StringType()),
            T.StructField("sequence", T.StringType()),
            T.StructField("schema", T.StringType()),
            T.StructField("table", T.StringType()),
            T.StructField("txId", T.LongType()),
            T.StructField("lsn", T.LongType()),
            T.StructField("ts_ms", T.LongType()),
        ]
    )
    tx = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("total_order", T.LongType()),
            T.StructField("data_collection_order", T.LongType()),
        ]
    )
    fields = [
        # No before/after: the join stage reads the row images from ``value``; declaring them
        # would make the parser re-serialize both objects of every record (about 9% of decode).
        T.StructField("op", T.StringType()),
        T.StructField("ts_ms", T.LongType()),
        T.StructField("source", source),
        T.StructField("transaction", tx),
        T.StructField("status", T.StringType()),
        T.StructField("id", T.StringType()),
        T.StructField("event_count", T.LongType()),
        T.StructField("data_collections", T.StringType()),
        T.StructField("snapshot_manifest", T.StringType()),
    ]
    inner = T.StructType(fields)
    outer = T.StructType([*fields, T.StructField("payload", inner), T.StructField("schema", T.StringType())])
    return inner, outer


def raw_stream(spark: Any, inp: ChangelogInput, sources: list[str], checkpoint: Path | None = None) -> Any:
    """A streaming frame of (topic, value, seg_first, seg_last, path) for ``sources``.

    The embedded changelog is read by offset (:mod:`txjoin.changelog.stream`)
    unless ``inp.reader`` is 'files'; a ``checkpoint`` that Spark's file source
    started keeps that source, since a query's checkpoint cannot change its
    source.
    """
    from pyspark.sql import functions as F

    if not sources:
        raise ConfigError("no sources to read")
    if inp.kind == "files":
        assert inp.path is not None
        root = Path(inp.path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        if inp.reader == "offsets" and not _file_source_checkpoint(checkpoint):
            return read_stream(spark, root, sources, max_bytes=inp.max_batch_bytes)
        glob = topic_glob(root, sources)
        reader = spark.readStream.format("text").option("pathGlobFilter", SEGMENT_GLOB)
        if inp.max_batch_bytes > 0:
            reader = reader.option("maxBytesPerTrigger", str(inp.max_batch_bytes))
        df = reader.load(glob)
        path = F.col("_metadata.file_path")
        return df.select(
            F.regexp_extract(path, _SEGMENT_RE, 1).alias("topic"),
            F.col("value"),
            F.regexp_extract(path, _SEGMENT_RE, 2).cast("long").alias("seg_first"),
            F.regexp_extract(path, _SEGMENT_RE, 3).cast("long").alias("seg_last"),
            path.alias("path"),
        )
    if inp.kind == "debezium":
        # Debezium's topics as a sink or kcat wrote them: a file (any name after the topic's)
        # or a directory of files per topic; no segment ranges.
        assert inp.path is not None
        root = Path(inp.path).absolute()
        reader = spark.readStream.format("text")
        if inp.max_batch_bytes > 0:
            reader = reader.option("maxBytesPerTrigger", str(inp.max_batch_bytes))
        df = reader.load(topic_glob(root, sources))
        path = F.col("_metadata.file_path")
        first = F.regexp_extract(path, re.escape(str(root)) + r"/([^/]+)", 1)
        return df.select(
            F.regexp_replace(first, r"\.(jsonl|json|txt)$", "").alias("topic"),
            F.col("value"),
            F.lit(-1).cast("long").alias("seg_first"),
            F.lit(-1).cast("long").alias("seg_last"),
            path.alias("path"),
        )
    pattern = "|".join(f"{s}\\..*" for s in sources)
    try:
        reader = spark.readStream.format("kafka").option("subscribePattern", pattern)
        for k, v in inp.kafka_options.items():
            reader = reader.option(k, v)
        df = reader.option("startingOffsets", "earliest").load()
    except Exception as e:  # the Kafka source is a separate Spark package
        if "kafka" in str(e).lower() and "not find" in str(e).lower():
            raise MissingDependency(
                "Spark's Kafka source is not on the classpath: start Spark with "
                "--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>, or use "
                "the embedded changelog (kind 'files')",
                package="spark-sql-kafka-0-10",
            ) from None
        raise
    return df.select(
        F.col("topic"),
        F.col("value").cast("string").alias("value"),
        F.col("offset").alias("seg_first"),
        F.col("offset").alias("seg_last"),
        F.concat(F.col("topic"), F.lit("@"), F.col("partition"), F.lit(":"), F.col("offset")).alias("path"),
    )


def decode(raw: Any) -> Any:
    """Decode (topic, value, seg_first, seg_last, path) rows into assembly input rows."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    inner, outer = _envelope_schema()
    j = F.from_json(F.col("value"), outer)
    parsed = raw.withColumn("j", j)
    plain = F.struct(*[F.col("j")[f.name].alias(f.name) for f in inner.fields])
    e = F.when(F.col("j.payload").isNotNull(), F.col("j.payload")).otherwise(plain)
    parsed = parsed.withColumn("e", e)
    value_trim = F.trim(F.col("value"))
    is_tombstone = F.col("value").isNull() | (value_trim == "null")
    topic = F.col("topic")
    kind = (
        F.when(is_tombstone, F.lit(None))
        .when(F.col("j").isNull(), F.lit("bad"))
        .when(F.col("e.op").isNotNull() & (F.col("e.op") != "m"), F.lit("change"))
        .when(F.col("e.op") == "m", F.lit(None))
        .when(F.col("e.status") == "BEGIN", F.lit("begin"))
        .when(F.col("e.status") == "END", F.lit("end"))
        .when(
            # <prefix>.heartbeat exactly: a table named heartbeat is <prefix>.<schema>.heartbeat.
            topic.rlike(HEARTBEAT_TOPIC_RE) | topic.startswith(DEBEZIUM_HEARTBEAT_PREFIX),
            F.lit("heartbeat"),
        )
        .otherwise(F.lit("bad"))
    )
    id_parts = F.split(F.col("e.id"), ":")
    seq = F.from_json(F.col("e.source.sequence"), "array<string>")
    dc = F.from_json(F.col("e.data_collections"), "array<struct<data_collection:string,event_count:long>>")
    is_change = F.col("kind") == "change"
    is_marker = F.col("kind").isin("begin", "end")
    source_name = F.when(
        topic.startswith(DEBEZIUM_HEARTBEAT_PREFIX),
        F.substring(topic, len(DEBEZIUM_HEARTBEAT_PREFIX) + 1, 1 << 30),
    ).otherwise(F.regexp_extract(topic, r"^([^.]+)\.", 1))

    def long_or(c: Any) -> Any:
        return F.coalesce(c.cast("long"), F.lit(-1).cast("long"))

    # No filter on kind here: Spark would push it below the projections and
    # parse every record once more per field the filter reads. Assembly
    # ignores rows without a kind (tombstones, logical messages).
    out = parsed.withColumn("kind", kind)
    is_tx_topic = topic.endswith(TRANSACTION_SUFFIX)
    # END rows are exploded per data_collections entry so that counts reach
    # Python as scalar columns (list columns are slow to convert to pandas).
    dc_item = T.StructType(
        [T.StructField("data_collection", T.StringType()), T.StructField("event_count", T.LongType())]
    )
    items = F.when((F.col("kind") == "end") & (F.size(dc) > 0), dc).otherwise(
        F.array(F.lit(None).cast(dc_item))
    )
    out = out.withColumn("dc", F.explode(items))
    cols = {
        "source": source_name,
        "kind": F.col("kind"),
        "seg_first": F.when(is_tx_topic, long_or(F.col("seg_first"))).otherwise(F.lit(-1).cast("long")),
        "seg_last": F.when(is_tx_topic, long_or(F.col("seg_last"))).otherwise(F.lit(-1).cast("long")),
        "xid": long_or(F.when(is_change, F.col("e.source.txId")).when(is_marker, id_parts[0])),
        "lsn": long_or(F.when(is_change, F.col("e.source.lsn")).when(is_marker, id_parts[1])),
        "seq_prev": long_or(F.when(is_change, seq[0])),
        "total_order": long_or(F.col("e.transaction.total_order")),
        "dc_order": long_or(F.col("e.transaction.data_collection_order")),
        "op": F.col("e.op"),
        "snapshot": F.coalesce(F.lower(F.col("e.source.snapshot")), F.lit("false")),
        "table": F.when(F.col("kind") == "bad", F.col("path")).otherwise(
            F.concat_ws(".", F.col("e.source.schema"), F.col("e.source.table"))
        ),
        "ts_ms": long_or(F.coalesce(F.col("e.source.ts_ms"), F.col("e.ts_ms"))),
        "event_count": long_or(F.col("e.event_count")),
        "dc_table": F.col("dc.data_collection"),
        "dc_count": long_or(F.col("dc.event_count")),
        # The whole record for changes (the join stage reads before/after from
        # it); a bad row carries the start of the offending record for the error.
        # A columnar snapshot's END: the path of its manifest.
        "value": F.when(F.col("kind") == "bad", F.substring(F.col("value"), 1, 200))
        .when(is_change, F.col("value"))
        .when(F.col("kind") == "end", F.col("e.snapshot_manifest")),
    }
    assert list(cols)[1:] == list(EVENT_COLUMNS), "decode must produce assembly's columns in order"
    return out.select(*[c.alias(name) for name, c in cols.items()])


#: The offset-reading source with each segment decoded in the reader (:mod:`.arrow`).
EVENTS_FORMAT = "txjoin_events"


def read_events(spark: Any, inp: ChangelogInput, sources: list[str], checkpoint: Path | None = None) -> Any:
    """Decoded change events and markers of ``sources`` as a streaming frame (``checkpoint``:
    the query's, which decides the changelog's source; see :func:`raw_stream`).

    With ``inp.arrow_decoder``, txjoin's changelog read by offset is decoded in the reader by Arrow
    (:mod:`.arrow`, about a seventh of Spark's cost a record); otherwise, and for Spark's file
    source, Debezium's topics and Kafka, :func:`decode` does it. Both read the same offsets, so a
    checkpoint moves between them."""
    arrow = inp.kind == "files" and inp.reader == "offsets" and inp.arrow_decoder
    if arrow and not _file_source_checkpoint(checkpoint):
        assert inp.path is not None
        root = Path(inp.path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        return read_decoded(spark, root, sources, max_bytes=inp.max_batch_bytes)
    return decode(raw_stream(spark, inp, sources, checkpoint))


def read_decoded(
    spark: Any, root: Path, sources: list[str], *, max_bytes: int = 0, max_files: int = 0
) -> Any:
    """The segments of ``sources`` under ``root`` by offset, decoded in the reader."""
    from txjoin.decode.arrow import decode_segment

    if not sources:
        raise ConfigError("no sources to read")
    return read_stream(
        spark,
        root,
        sources,
        max_bytes=max_bytes,
        max_files=max_files,
        decoded=(EVENTS_FORMAT, EVENT_SCHEMA, decode_segment),
    )


def _file_source_checkpoint(checkpoint: Path | None) -> bool:
    """Whether ``checkpoint`` belongs to a query that read with Spark's file source (which keeps
    its metadata log in ``sources/0``; the offset-reading source keeps none)."""
    return checkpoint is not None and (Path(checkpoint) / "sources" / "0").is_dir()
