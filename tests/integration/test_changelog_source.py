"""The changelog read by offset through a real Spark streaming query
(txjoin.changelog.stream): every record once across restarts and read limits,
a checkpoint that stays one number per topic however many segments it has
read, and a checkpoint that Spark's file source began keeps that source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from txjoin import errors
from txjoin.changelog import SegmentChangelog, segment_name
from txjoin.changelog.stream import DRIVER_READ_BYTES, read_stream
from txjoin.decode import EVENTS_FORMAT, ChangelogInput, ReaderKind, decode, raw_stream, read_events
from txjoin.errors import ChangelogError, ConfigError

pytestmark = pytest.mark.spark


def _append(root: Path, start: int, count: int, per_segment: int) -> None:
    with SegmentChangelog(root) as w:
        for i in range(start, start + count):
            w.append("s.public.a", json.dumps({"i": i, "t": "é€"}).encode())
            if (i + 1) % per_segment == 0:
                w.append("s.transaction", json.dumps({"end": i}).encode())
                w.flush()


def _drain(
    spark: Any,
    root: Path,
    ck: Path,
    max_bytes: int = 0,
    reader: ReaderKind = "offsets",
    frame: Any = None,
) -> tuple[list[dict[str, Any]], int]:
    """Run the reader (or ``frame``) over ``ck`` with Trigger.AvailableNow; (records read, batches
    with data)."""
    rows: list[dict[str, Any]] = []
    batches = [0]

    def sink(df: Any, _: int) -> None:
        got = [r.asDict() for r in df.collect()]
        rows.extend(got)
        batches[0] += bool(got)

    df = frame
    if df is None:
        inp = ChangelogInput("files", root, max_batch_bytes=max_bytes, reader=reader)
        df = raw_stream(spark, inp, ["s"], ck)
    q = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    return rows, batches[0]


def _data(rows: list[dict[str, Any]]) -> list[int]:
    return [json.loads(r["value"])["i"] for r in rows if r["topic"] == "s.public.a"]


def test_offsets_read_every_record_once_across_restarts_and_limits(spark: Any, tmp_path: Path) -> None:
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"
    _append(root, 0, 300, 3)
    rows, batches = _drain(spark, root, ck, max_bytes=2_000)
    assert sorted(_data(rows)) == list(range(300))
    assert batches > 3  # the byte limit split the backlog
    assert {json.loads(r["value"])["t"] for r in rows if r["topic"] == "s.public.a"} == {"é€"}
    for r in rows:  # each record carries its segment's range, which holds its offset
        if r["topic"] == "s.public.a":
            assert r["seg_first"] <= json.loads(r["value"])["i"] <= r["seg_last"]
    assert not (ck / "sources").exists()  # no file list: Spark's file source was not used
    _append(root, 300, 30, 3)
    rows, _ = _drain(spark, root, ck)
    assert sorted(_data(rows)) == list(range(300, 330))
    # The checkpoint's offsets are one number per topic, not a list of files.
    last = max((ck / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {
        "topics": {"s.transaction": 110, "s.public.a": 330}
    }


def test_a_checkpoint_moves_between_spark_s_decoder_and_the_reader_s(spark: Any, tmp_path: Path) -> None:
    # Pipelines started before the reader decoded with Arrow restart on their checkpoints: both
    # read the same offsets, so every change is decoded once across the switch, and back.
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"

    def changes(start: int, count: int) -> None:
        with SegmentChangelog(root) as w:
            for i in range(start, start + count):
                event = {"op": "c", "after": {"i": i}, "source": {"txId": i, "lsn": 40 * i}}
                w.append("s.public.a", json.dumps(event).encode())
                if i % 4 == 3:
                    w.flush()

    inp = ChangelogInput("files", root)
    arrow = ChangelogInput("files", root, arrow_decoder=True)
    seen: list[int] = []

    def spark_s() -> Any:
        return decode(raw_stream(spark, inp, ["s"], ck))

    def the_reader_s() -> Any:
        return read_events(spark, arrow, ["s"], ck)

    for start, reader in [(0, spark_s), (20, the_reader_s), (40, spark_s)]:
        changes(start, 20)
        rows, _ = _drain(spark, root, ck, frame=reader())
        assert {r["kind"] for r in rows} == {"change"}
        assert [r["xid"] for r in rows] == [json.loads(r["value"])["after"]["i"] for r in rows]
        seen += sorted(r["xid"] for r in rows)
    assert seen == list(range(60))
    # The reader that decodes with Arrow is the one asked for; the pipeline's default is Spark's.
    fresh: Any = read_events(spark, arrow, ["s"], tmp_path / "fresh")
    assert EVENTS_FORMAT in str(fresh._jdf.queryExecution().analyzed().toString())
    default: Any = read_events(spark, inp, ["s"], tmp_path / "default")
    assert EVENTS_FORMAT not in str(default._jdf.queryExecution().analyzed().toString())


def test_a_checkpoint_begun_by_the_file_source_keeps_it(spark: Any, tmp_path: Path) -> None:
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"
    (ck / "sources" / "0").mkdir(parents=True)  # as a query of the file-source reader leaves it
    _append(root, 0, 30, 3)
    rows, _ = _drain(spark, root, ck)
    assert sorted(_data(rows)) == list(range(30))
    logged = "".join(p.read_text() for p in (ck / "sources" / "0").iterdir() if not p.name.startswith("."))
    assert "00000000000000000000-00000000000000000002.jsonl" in logged  # the file source's log
    _append(root, 30, 30, 3)
    rows, _ = _drain(spark, root, ck)
    assert sorted(_data(rows)) == list(range(30, 60))


def test_the_file_source_on_request_and_its_checkpoint_keeps_it(spark: Any, tmp_path: Path) -> None:
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"
    _append(root, 0, 9, 3)
    rows, _ = _drain(spark, root, ck, reader="files")  # as txjoin check reads
    assert sorted(_data(rows)) == list(range(9))
    assert (ck / "sources" / "0").is_dir()
    _append(root, 9, 9, 3)
    rows, _ = _drain(spark, root, ck)  # asked for offsets, but the checkpoint decides
    assert sorted(_data(rows)) == list(range(9, 18))
    with pytest.raises(ConfigError, match="changelog reader 'kafka' is invalid"):
        ChangelogInput("files", root, reader="kafka")  # type: ignore[arg-type]


def test_a_run_to_the_end_refuses_a_gap_instead_of_stopping_before_it(spark: Any, tmp_path: Path) -> None:
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"
    topic = root / "s.public.a"
    topic.mkdir(parents=True)
    for first, last in [(0, 1), (4, 5)]:  # offsets 2..3 missing
        (topic / segment_name(first, last)).write_text("{}\n" * (last - first + 1))
    df = raw_stream(spark, ChangelogInput("files", root), ["s"], ck)
    q = df.writeStream.format("noop").option("checkpointLocation", str(ck)).trigger(availableNow=True).start()
    with pytest.raises(Exception, match=r"offsets from 2 of topic s\.public\.a are missing"):
        q.awaitTermination()


def _who_read(spark: Any, root: Path, ck: Path) -> list[dict[str, Any]]:
    """Drain ``root`` with a decoder that tags each record (``who``) with the command line of the
    Python process that read it."""

    def tagged(topic: str, first: int, last: int, path: str, data: bytes, ends: Any, values: Any) -> Any:
        import os

        import pyarrow as pa

        with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
            who = f.read().replace(b"\0", b" ").decode()
        n = len(values)
        return pa.RecordBatch.from_arrays(
            [pa.array([topic] * n), values, pa.array([who] * n)], names=["topic", "value", "who"]
        )

    schema = "topic string, value string, who string"
    frame = read_stream(spark, root, ["s"], decoded=("txjoin_test_who", schema, tagged))
    return _drain(spark, root, ck, frame=frame)[0]


def test_a_small_batch_is_read_by_the_driver_and_a_backlog_by_tasks(spark: Any, tmp_path: Path) -> None:
    # A task's Python worker costs a one-transaction batch about 55 ms (bench/NOTES.md), so the
    # driver's source process reads small batches itself; a backlog spreads over the executors.
    root, ck = tmp_path / "changelog", tmp_path / "checkpoint"
    _append(root, 0, 30, 3)
    small = _who_read(spark, root, ck)
    assert len(small) == 40  # 30 changes, 10 ENDs
    assert {r["who"].split(" -m ")[-1].strip() for r in small} == {
        "pyspark.sql.streaming.python_streaming_source_runner"
    }
    with SegmentChangelog(root) as w:  # about 4 MB: past DRIVER_READ_BYTES
        for _ in range(4):
            for i in range(3_000):
                w.append("s.public.a", json.dumps({"i": i, "pad": "x" * 300}).encode())
            w.flush()
    large = _who_read(spark, root, ck)
    assert len(large) == 12_000
    assert all("pyspark.daemon" in r["who"] for r in large)


def test_a_damaged_segment_is_named_whichever_process_reads_it(spark: Any, tmp_path: Path) -> None:
    for count, name in [(3, "small"), (20_000, "large")]:
        root = tmp_path / name / "changelog"
        topic = root / "s.public.a"
        topic.mkdir(parents=True)
        seg = topic / segment_name(0, count)  # one line short; "large" is past DRIVER_READ_BYTES
        seg.write_text('{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}\n' * count)
        assert (seg.stat().st_size > DRIVER_READ_BYTES) == (name == "large")
        df = raw_stream(spark, ChangelogInput("files", root), ["s"], tmp_path / name / "checkpoint")
        q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / name / "ck"))
        query = q.trigger(availableNow=True).start()
        with pytest.raises(Exception) as failed:
            query.awaitTermination()
        err = errors.from_text(str(failed.value))
        assert isinstance(err, ChangelogError), (name, str(failed.value)[-2000:])
        assert f"holds {count} complete lines but its name says {count + 1}" in str(err), name


def test_python_workers_import_pyspark_from_site_packages_not_spark_s_zip(spark: Any) -> None:
    # From the zip, Python compiles PySpark afresh in each worker process: 0.7 s a query start.
    def where(frames: Any) -> Any:
        import pandas as pd
        import pyspark

        for _ in frames:
            yield pd.DataFrame({"path": [pyspark.__file__]})

    (path,) = [r.path for r in spark.range(1).mapInPandas(where, "path string").collect()]
    assert ".zip" not in path
    assert path.endswith("pyspark/__init__.py")
