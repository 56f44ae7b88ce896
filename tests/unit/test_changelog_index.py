"""The per-topic segment index (txjoin.changelog.index): kept by the writer, repaired when a
writer opens, used by the offset reader only while fresh, and never a reason to miss a
segment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from txjoin.changelog import ChangelogReader, SegmentChangelog, segment_name
from txjoin.changelog import index as idx
from txjoin.changelog.stream import plan_end

TOPIC = "s.public.a"


def _write(root: Path, sizes: list[int], topic: str = TOPIC) -> None:
    with SegmentChangelog(root) as w:
        for n in sizes:
            for _ in range(n):
                w.append(topic, b"{}")
            w.flush()


def _listing(root: Path, topic: str = TOPIC) -> list[tuple[int, int]]:
    return [(s.first, s.last) for s in ChangelogReader(root).segments(topic)]


def _age_index(root: Path, seconds: float, topic: str = TOPIC) -> None:
    """Make the index's last write ``seconds`` older than the topic directory's last change."""
    t = os.stat(root / topic).st_mtime_ns - int(seconds * 1e9)
    os.utime(root / idx.INDEX_DIR / topic, ns=(t, t))


def test_the_writer_keeps_the_index_and_lookups_find_offsets(tmp_path: Path) -> None:
    _write(tmp_path, [2, 1, 3])
    _write(tmp_path, [1])  # a second writer appends to the same index
    assert (tmp_path / idx.INDEX_DIR / TOPIC).read_bytes() == b"".join(
        f"{a:020d}-{b:020d}\n".encode() for a, b in [(0, 1), (2, 2), (3, 5), (6, 6)]
    )
    assert idx.lookup(tmp_path, TOPIC, 0) == [(0, 1), (2, 2), (3, 5), (6, 6)]
    assert idx.lookup(tmp_path, TOPIC, 3) == [(3, 5), (6, 6)]
    assert idx.lookup(tmp_path, TOPIC, 7) == []
    assert idx.lookup(tmp_path, "s.public.none", 0) is None


def test_the_reader_uses_a_fresh_index_and_lists_a_stale_one(tmp_path: Path) -> None:
    _write(tmp_path, [2, 2])
    # A segment renamed into place whose index record was never written (a writer killed
    # between the two): the index is behind the directory.
    (tmp_path / TOPIC / segment_name(4, 4)).write_bytes(b"{}\n")
    _age_index(tmp_path, 0)
    assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 4}  # from the index: not listed
    _age_index(tmp_path, 3)
    assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 5}  # stale: listed
    _write(tmp_path, [1])  # the next writer repairs the index
    assert idx.lookup(tmp_path, TOPIC, 0) == [(0, 1), (2, 3), (4, 4), (5, 5)]


@pytest.mark.parametrize("damage", ["torn", "foreign", "ahead"])
def test_a_damaged_index_is_never_believed(tmp_path: Path, damage: str) -> None:
    _write(tmp_path, [2, 2, 2])
    path = tmp_path / idx.INDEX_DIR / TOPIC
    data = path.read_bytes()
    if damage == "torn":
        path.write_bytes(data[:-10])  # the last record half written
        assert idx.lookup(tmp_path, TOPIC, 0) == [(0, 1), (2, 3)]
        assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 4}  # held back, not lost
    elif damage == "foreign":
        path.write_bytes(b"x" * len(data))
        assert idx.lookup(tmp_path, TOPIC, 0) is None
        assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 6}
    else:  # names a segment that is not there: a gap, so the directory is listed
        path.write_bytes(data + f"{7:020d}-{8:020d}\n".encode())
        assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 6}
    _write(tmp_path, [])
    assert idx.lookup(tmp_path, TOPIC, 0) == [(0, 1), (2, 3), (4, 5)]


def test_trimming_rewrites_the_index(tmp_path: Path) -> None:
    _write(tmp_path, [1, 1, 1, 1], topic="s.heartbeat")
    with SegmentChangelog(tmp_path) as w:
        w.trim("s.heartbeat", 2)
    assert idx.lookup(tmp_path, "s.heartbeat", 0) == [(2, 2), (3, 3)]
    assert plan_end(tmp_path, ["s"], {"s.heartbeat": 1})[0] == {"s.heartbeat": 4}


@settings(max_examples=examples(ci=40, thorough=400), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(1, 4), max_size=4), st.sampled_from(["none", "drop", "tear", "stale"])
        ),
        min_size=1,
        max_size=6,
    ),
    st.data(),
)
def test_reads_from_the_index_equal_reads_from_the_listing(
    tmp_path_factory: pytest.TempPathFactory, rounds: list[tuple[list[int], str]], data: st.DataObject
) -> None:
    """Writers come and go; between them the index loses its last record, is torn, or goes
    stale. From any offset reached, the reader sees what a listing sees, or stops short of it
    (never past it, never a different segment); after the next writer opens, all of it."""
    root = tmp_path_factory.mktemp("cl")
    for sizes, damage in rounds:
        _write(root, sizes)
        segs = _listing(root)
        path = root / idx.INDEX_DIR / TOPIC
        if segs and damage in ("drop", "tear"):
            path.write_bytes(path.read_bytes()[: -idx.RECORD if damage == "drop" else -5])
        if segs and damage == "stale":
            _age_index(root, 3)
        starts = [a for a, _ in segs] + [segs[-1][1] + 1 if segs else 0]
        start = data.draw(st.sampled_from(starts))
        end = plan_end(root, ["s"], {TOPIC: start})[0][TOPIC]
        listed_end = segs[-1][1] + 1 if segs else 0
        assert start <= end <= listed_end
        if damage in ("none", "stale"):
            assert end == listed_end
    _write(root, [])
    segs = _listing(root)
    assert idx.lookup(root, TOPIC, 0) == (segs or None)  # None: the topic never got a record
    assert plan_end(root, ["s"], {})[0].get(TOPIC, 0) == (segs[-1][1] + 1 if segs else 0)


def test_an_index_that_cannot_be_written_slows_reading_but_never_fails_a_flush(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / idx.INDEX_DIR).write_text("not a directory")  # every index write fails
    with caplog.at_level("WARNING", logger="txjoin.changelog.segments"):
        _write(tmp_path, [1, 2, 3])
    assert _listing(tmp_path) == [(0, 0), (1, 2), (3, 5)]  # every flush landed
    warnings = [r.getMessage() for r in caplog.records if "segment index" in r.getMessage()]
    assert len(warnings) == 1  # once per topic and writer, not once per flush
    assert "topic s.public.a" in warnings[0]
    assert idx.lookup(tmp_path, TOPIC, 0) is None
    assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 6}  # read by listing


def test_a_failed_append_never_hides_the_segment_it_was_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The index's last good write is fresh, so only its removal makes readers list.
    with SegmentChangelog(tmp_path) as w:
        w.append(TOPIC, b"{}")
        w.flush()
        real = idx.append

        def full(root: Path, topic: str, first: int, last: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(idx, "append", full)
        w.append(TOPIC, b"{}")
        w.flush()
        monkeypatch.setattr(idx, "append", real)
        assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 2}
        w.append(TOPIC, b"{}")  # no append to an index that lacks a segment
        w.flush()
        assert idx.lookup(tmp_path, TOPIC, 0) is None
        assert plan_end(tmp_path, ["s"], {})[0] == {TOPIC: 3}
    with SegmentChangelog(tmp_path):  # a writer's open repairs it
        assert idx.lookup(tmp_path, TOPIC, 0) == [(0, 0), (1, 1), (2, 2)]
