"""The changelog's offset-reading Spark source, its pure planning and reading (no Spark):
txjoin.changelog.stream. The Spark query around it runs in the assembly and pipeline suites."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.changelog import SegmentChangelog, segment_name, stream
from txjoin.changelog.stream import plan_end, plan_partitions, read_segments, source_topics
from txjoin.debezium.topics import is_heartbeat_topic
from txjoin.errors import ChangelogError


def _seg(root: Path, topic: str, first: int, last: int, mtime: int | None = None) -> Path:
    d = root / topic
    d.mkdir(parents=True, exist_ok=True)
    p = d / segment_name(first, last)
    p.write_bytes(b"".join(b'{"o": %d}\n' % o for o in range(first, last + 1)))
    if mtime is not None:
        os.utime(p, ns=(mtime, mtime))
    return p


Row = tuple[str, str, int, int, str]


def _values(root: Path, start: dict[str, int], end: dict[str, int], parallelism: int = 2) -> list[Row]:
    rows: list[Row] = []
    for part in plan_partitions(root, ["s"], start, end, parallelism):
        for batch in read_segments(part):
            rows.extend(zip(*[c.to_pylist() for c in batch.columns], strict=True))
    return sorted(rows, key=lambda r: (r[0], r[2]))  # stable: a segment's records keep their order


def test_reads_every_topic_of_the_sources_once_from_the_offset_reached(tmp_path: Path) -> None:
    with SegmentChangelog(tmp_path) as w:
        for i in range(3):
            w.append("s.public.a", b'{"a": %d}' % i)
            w.append("s.transaction", b'{"t": %d}' % i)
            w.append("other.public.b", b"{}")
            w.flush()
    assert source_topics(tmp_path, ["s"]) == ["s.transaction", "s.public.a"]
    end, gaps = plan_end(tmp_path, ["s"], {})
    assert (end, gaps) == ({"s.transaction": 3, "s.public.a": 3}, [])
    rows = _values(tmp_path, {}, end)
    assert [(r[0], r[1]) for r in rows] == [
        *[("s.public.a", f'{{"a": {i}}}') for i in range(3)],
        *[("s.transaction", f'{{"t": {i}}}') for i in range(3)],
    ]
    assert all(r[2] == r[3] for r in rows)  # one record per segment here
    # Nothing new: the same offsets, nothing to read.
    assert plan_end(tmp_path, ["s"], end) == (end, [])
    assert plan_partitions(tmp_path, ["s"], end, end, 2) == []
    with SegmentChangelog(tmp_path) as w:
        w.append("s.public.a", b'{"a": 3}')
        w.flush()
    end2, _ = plan_end(tmp_path, ["s"], end)
    assert end2 == {"s.transaction": 3, "s.public.a": 4}
    assert [r[1] for r in _values(tmp_path, end, end2)] == ['{"a": 3}']


def test_a_gap_stops_the_topic_short_and_is_reported(tmp_path: Path) -> None:
    _seg(tmp_path, "s.public.a", 0, 1)
    late = _seg(tmp_path, "s.public.a", 5, 6)
    end, gaps = plan_end(tmp_path, ["s"], {})
    assert end == {"s.public.a": 2}
    assert [(g.topic, g.expected, g.after) for g in gaps] == [("s.public.a", 2, str(late))]
    assert "offsets from 2 of topic s.public.a have not appeared after 61 s" in str(gaps[0].error(61.0))
    assert "offsets from 2 of topic s.public.a are missing while" in str(gaps[0].error(None))
    assert stream.visible_end(tmp_path, ["s"]) == ({"s.public.a": 2}, gaps)
    # A new topic starts at 0: a first segment past 0 is a gap, not a start.
    _seg(tmp_path, "s.public.b", 3, 3)
    end, gaps = plan_end(tmp_path, ["s"], {})
    assert "s.public.b" not in end
    assert {g.topic for g in gaps} == {"s.public.a", "s.public.b"}
    _seg(tmp_path, "s.public.a", 2, 4)
    end, gaps = plan_end(tmp_path, ["s"], {"s.public.a": 2})
    assert end["s.public.a"] == 7
    assert [g.topic for g in gaps] == ["s.public.b"]


def test_a_trimmed_heartbeat_topic_moves_on_to_its_first_kept_segment(tmp_path: Path) -> None:
    _seg(tmp_path, "s.heartbeat", 40, 40)
    end, gaps = plan_end(tmp_path, ["s"], {"s.heartbeat": 3})
    assert (end, gaps) == ({"s.heartbeat": 41}, [])


def test_limits_admit_oldest_segments_first_as_contiguous_prefixes(tmp_path: Path) -> None:
    t0 = 1_700_000_000 * 10**9
    _seg(tmp_path, "s.public.a", 0, 0, t0 + 1)
    _seg(tmp_path, "s.transaction", 0, 0, t0 + 2)
    _seg(tmp_path, "s.public.a", 1, 1, t0 + 3)
    _seg(tmp_path, "s.transaction", 1, 1, t0 + 4)
    assert plan_end(tmp_path, ["s"], {}, max_files=3)[0] == {"s.public.a": 2, "s.transaction": 1}
    assert plan_end(tmp_path, ["s"], {}, max_files=1)[0] == {"s.public.a": 1, "s.transaction": 0}
    # At least one segment even if it is over the byte limit.
    assert plan_end(tmp_path, ["s"], {}, max_bytes=1)[0] == {"s.public.a": 1, "s.transaction": 0}
    assert plan_end(tmp_path, ["s"], {}, max_bytes=10**6)[0] == {"s.public.a": 2, "s.transaction": 2}
    # A segment older than its predecessor in the topic (a clock step) never jumps the queue.
    _seg(tmp_path, "s.public.a", 2, 2, t0)
    assert plan_end(tmp_path, ["s"], {}, max_files=1)[0] == {"s.public.a": 1, "s.transaction": 0}
    # Trigger.AvailableNow's cap.
    assert plan_end(tmp_path, ["s"], {}, cap={"s.public.a": 2})[0] == {"s.public.a": 2}


def test_partitions_cover_the_range_once_within_the_parallelism(tmp_path: Path) -> None:
    for i in range(0, 30, 3):
        _seg(tmp_path, "s.public.a", i, i + 2)
    for i in range(5):
        _seg(tmp_path, "s.transaction", i, i)
    start = {"s.public.a": 6, "s.transaction": 1}
    end, _ = plan_end(tmp_path, ["s"], start)
    want = sorted([("s.public.a", i) for i in range(6, 30, 3)] + [("s.transaction", i) for i in range(1, 5)])
    small = plan_partitions(tmp_path, ["s"], start, end, 3)
    assert len(small) == 1  # a few kilobytes: one task
    assert sorted((p[0], p[1]) for b in small for p in b) == want
    for b in small:
        for p in b:  # past MIN_PARTITION_BYTES in all: as many tasks as cores
            Path(p[3]).write_bytes(Path(p[3]).read_bytes() * 100_000)
    bins = plan_partitions(tmp_path, ["s"], start, end, 3)
    assert len(bins) == 3
    assert sorted((p[0], p[1]) for b in bins for p in b) == want


def test_damaged_segments_are_refused_naming_the_file(tmp_path: Path) -> None:
    p = _seg(tmp_path, "s.public.a", 0, 2)
    p.write_bytes(b'{"o": 0}\n{"o": 1}\n')
    with pytest.raises(ChangelogError, match=r"holds 2 complete lines but its name says 3"):
        list(read_segments([("s.public.a", 0, 2, str(p))]))
    p.write_bytes(b'{"o": 0}\n{"o": 1}\n{"o": "\xff"}\n')
    with pytest.raises(ChangelogError, match=r"is not UTF-8 text"):
        list(read_segments([("s.public.a", 0, 2, str(p))]))
    p.unlink()
    with pytest.raises(ChangelogError, match=r"was deleted before Spark read it"):
        list(read_segments([("s.public.a", 0, 2, str(p))]))
    assert list(read_segments([("s.heartbeat", 0, 2, str(p))])) == []  # trimmed on purpose
    (tmp_path / "s.public.a" / "notes.txt").write_text("x")
    with pytest.raises(ChangelogError, match=r"notes.txt in topic s.public.a is not a changelog segment"):
        plan_end(tmp_path, ["s"], {})


_record = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r"), min_size=1, max_size=40
)


@settings(max_examples=examples(ci=50, thorough=500), deadline=None)
@given(st.lists(st.lists(_record, min_size=1, max_size=6), min_size=1, max_size=6))
def test_records_come_back_exactly_as_written(
    tmp_path_factory: pytest.TempPathFactory, segments: list[list[str]]
) -> None:
    root = tmp_path_factory.mktemp("cl")
    with SegmentChangelog(root) as w:
        for seg in segments:
            for r in seg:
                w.append("s.public.a", r.encode())
            w.flush()
    end, gaps = plan_end(root, ["s"], {})
    assert gaps == []
    assert end == {"s.public.a": sum(map(len, segments))}
    rows = _values(root, {}, end, parallelism=2)
    assert [r[1] for r in rows] == [r for seg in segments for r in seg]
    firsts = [0]
    for seg in segments:
        firsts.append(firsts[-1] + len(seg))
    assert {r[0] for r in rows} == {"s.public.a"}
    assert all(r[4] == str(root / "s.public.a" / segment_name(r[2], r[3])) for r in rows)
    assert [(r[2], r[3]) for r in rows] == [
        (firsts[i], firsts[i + 1] - 1) for i, seg in enumerate(segments) for _ in seg
    ]


@pytest.mark.parametrize("indexed", [True, False])
def test_a_backlog_is_read_a_bounded_number_of_segments_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed: bool
) -> None:
    monkeypatch.setattr(stream, "MAX_SEGMENTS", 4)
    if indexed:
        with SegmentChangelog(tmp_path) as w:
            for _ in range(10):
                w.append("s.public.a", b"{}")
                w.flush()
    else:
        for i in range(10):
            _seg(tmp_path, "s.public.a", i, i)
    start: dict[str, int] = {}
    ends: list[dict[str, int]] = []
    while not ends or ends[-1] != start:
        ends.append(start)
        start = plan_end(tmp_path, ["s"], start)[0]
    assert [e.get("s.public.a") for e in ends] == [None, 4, 8, 10]
    assert start == {"s.public.a": 10}
    # Trigger.AvailableNow's target is everything visible, not one batch's worth.
    assert stream.visible_end(tmp_path, ["s"]) == ({"s.public.a": 10}, [])


def test_the_driver_reads_one_small_partition_and_leaves_the_rest_to_tasks(tmp_path: Path) -> None:
    small = [("s.public.a", 0, 9, str(_seg(tmp_path, "s.public.a", 0, 9)))]
    size = os.stat(small[0][3]).st_size
    assert stream.read_on_driver([small], limit=size)
    assert not stream.read_on_driver([small], limit=size - 1)
    assert not stream.read_on_driver([small, small], limit=10 * size)  # a backlog planned as tasks
    assert not stream.read_on_driver([], limit=size)  # nothing to read
    gone = ("s.heartbeat", 0, 0, str(tmp_path / "trimmed"))  # read_segments decides about it
    assert stream.read_on_driver([[gone, *small]], limit=size)


def test_a_planned_range_whose_segments_are_gone_is_refused_not_skipped(tmp_path: Path) -> None:
    # Planned while visible; then damage, or a trim under a replayed batch, removes a segment.
    for first in (0, 2, 4):
        _seg(tmp_path, "s.public.a", first, first + 1)
    end, _ = plan_end(tmp_path, ["s"], {})
    assert end == {"s.public.a": 6}
    middle = tmp_path / "s.public.a" / segment_name(2, 3)
    middle.unlink()
    with pytest.raises(ChangelogError, match=r"offsets from 2 of topic s\.public\.a are missing"):
        plan_partitions(tmp_path, ["s"], {}, end, 2)
    _seg(tmp_path, "s.public.a", 2, 3)
    (tmp_path / "s.public.a" / segment_name(4, 5)).unlink()  # the last one: no later segment
    with pytest.raises(ChangelogError, match=r"offsets 4\.\.5 of topic s.public.a were planned"):
        plan_partitions(tmp_path, ["s"], {}, end, 2)
    # A heartbeat topic trimmed on purpose still reads what is left.
    _seg(tmp_path, "s.heartbeat", 7, 7)
    bins = plan_partitions(tmp_path, ["s"], {"s.heartbeat": 3}, {"s.heartbeat": 8}, 2)
    assert [p[1] for b in bins for p in b] == [7]


def test_a_table_named_heartbeat_is_not_the_heartbeat_topic(tmp_path: Path) -> None:
    assert is_heartbeat_topic("s.heartbeat")
    assert is_heartbeat_topic("__debezium-heartbeat.s")
    assert not is_heartbeat_topic("s.public.heartbeat")
    for topic in ("s.public.heartbeat", "s.public.orders"):
        _seg(tmp_path, topic, 0, 1)
        later = _seg(tmp_path, topic, 4, 5)
        end, gaps = plan_end(tmp_path, ["s"], {topic: 2})
        assert end[topic] == 2
        assert [(g.topic, g.expected) for g in gaps if g.topic == topic] == [(topic, 2)]
        later.unlink()
        with pytest.raises(ChangelogError, match=f"topic {topic} was deleted"):
            list(read_segments([(topic, 4, 5, str(later))]))


def test_a_run_to_the_end_starts_where_the_checkpoint_is(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with SegmentChangelog(tmp_path) as w:
        for i in range(4):
            w.append("s.public.a", b'{"i": %d}' % i)
            w.append("s.transaction", b'{"t": %d}' % i)
            w.flush()
    for topic in ("s.public.a", "s.transaction"):  # read before, then removed to free the disk
        for o in (0, 1):
            (tmp_path / topic / segment_name(o, o)).unlink()
        os.utime(tmp_path / "_index" / topic, ns=(0, 0))  # stale: readers list what is left

    def reader() -> Any:
        r = stream._source_class()({"path": str(tmp_path), "sources": "s"}).streamReader(None)
        r.prepareForTriggerAvailableNow()
        return r

    checkpoint = {"topics": {"s.transaction": 2, "s.public.a": 2}}
    assert reader().latestOffset(checkpoint, ReadAllAvailable()) == {
        "topics": {"s.transaction": 4, "s.public.a": 4}
    }
    # From the start of the changelog those offsets are missing: refused, not skipped.
    with pytest.raises(ChangelogError, match=r"offsets from 0 of topic s\.transaction are missing"):
        reader().latestOffset({"topics": {}}, ReadAllAvailable())
