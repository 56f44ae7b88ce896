"""The segment changelog on real files: order, atomic visibility, recovery."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from txjoin.changelog import ChangelogReader, SegmentChangelog, parse_segment_name
from txjoin.errors import ChangelogError, ConfigError


def test_round_trip_over_topics_and_reopen(tmp_path: Path) -> None:
    with SegmentChangelog(tmp_path) as w:
        assert w.append("s.public.a", b'{"n":0}') == 0
        assert w.append("s.public.a", b'{"n":1}') == 1
        assert w.append("s.transaction", b'{"status":"END"}') == 0
        assert w.pending_bytes() > 0
        w.flush()
        assert w.pending_bytes() == 0
        assert w.pending_age() == 0.0
        w.append("s.public.a", b'{"n":2}')
        w.flush()
    with SegmentChangelog(tmp_path) as w:
        assert w.append("s.public.a", b'{"n":3}') == 3
        w.flush()
    r = ChangelogReader(tmp_path)
    assert r.topics() == ["s.public.a", "s.transaction"]
    assert [(o, json.loads(v)["n"]) for o, v in r.read("s.public.a")] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [s.first for s in r.segments("s.public.a")] == [0, 2, 3]
    assert r.last("s.public.a") == (3, b'{"n":3}')
    assert r.end_offset("s.public.a") == 4
    assert next(iter(r.read("s.public.a", start_offset=2)))[0] == 2
    assert r.last("missing") is None


def test_unflushed_records_are_not_visible_and_lost_on_close(tmp_path: Path) -> None:
    w = SegmentChangelog(tmp_path)
    w.append("t", b"1")
    assert list(ChangelogReader(tmp_path).read("t")) == []
    w.close()
    with SegmentChangelog(tmp_path) as w2:
        assert w2.append("t", b"x") == 0


def test_transaction_topic_is_renamed_after_data_topics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames: list[str] = []
    real = os.rename

    def record(src: str, dst: str) -> None:
        renames.append(Path(dst).parent.name)
        real(src, dst)

    monkeypatch.setattr(os, "rename", record)
    with SegmentChangelog(tmp_path) as w:
        w.append("s.transaction", b"{}")
        w.append("s.public.z", b"{}")
        w.append("s.heartbeat", b"{}")
        w.append("s.public.a", b"{}")
        w.flush()
    assert renames[-1] == "s.transaction"
    assert set(renames[:-1]) == {"s.public.a", "s.public.z", "s.heartbeat"}


def test_leftover_temp_files_are_removed_on_open(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / ".00000000000000000000.tmp").write_text("partial")
    with SegmentChangelog(tmp_path) as w:
        assert w.append("t", b"1") == 0
    assert not (tmp_path / "t" / ".00000000000000000000.tmp").exists()


def _segment(d: Path, first: int, last: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{first:020d}-{last:020d}.jsonl").write_text("{}\n" * (last - first + 1))


@pytest.mark.parametrize(
    ("ranges", "bad"),
    [([(0, 1), (3, 4)], "00000000000000000003"), ([(0, 2), (2, 3)], "00000000000000000002")],
)
def test_gaps_and_overlaps_are_reported_with_the_file(
    tmp_path: Path, ranges: list[tuple[int, int]], bad: str
) -> None:
    for first, last in ranges:
        _segment(tmp_path / "t", first, last)
    with pytest.raises(ChangelogError, match=bad):
        SegmentChangelog(tmp_path)
    with pytest.raises(ChangelogError, match="damaged"):
        ChangelogReader(tmp_path).segments("t")


def test_foreign_files_in_a_topic_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("hello")
    with pytest.raises(ChangelogError, match=r"notes\.txt"):
        SegmentChangelog(tmp_path)


def test_metadata_directories_are_not_topics(tmp_path: Path) -> None:
    (tmp_path / "_schemas").mkdir()
    (tmp_path / "_schemas" / "x.jsonl").write_text("{}\n")
    with SegmentChangelog(tmp_path) as w:
        w.append("t", b"1")
        w.flush()
    assert ChangelogReader(tmp_path).topics() == ["t"]


def test_second_writer_is_refused_while_the_first_is_open(tmp_path: Path) -> None:
    first = SegmentChangelog(tmp_path)
    with pytest.raises(ChangelogError, match=f"pid {os.getpid()}"):
        SegmentChangelog(tmp_path)
    first.close()
    SegmentChangelog(tmp_path).close()


@pytest.mark.parametrize("topic", ["", ".hidden", "_meta", "a/b", "x" * 250, "sp ace"])
def test_invalid_topic_names(tmp_path: Path, topic: str) -> None:
    with SegmentChangelog(tmp_path) as w, pytest.raises(ConfigError):
        w.append(topic, b"1")


def test_segment_names() -> None:
    assert parse_segment_name("00000000000000000005-00000000000000000009.jsonl") == (5, 9)
    assert parse_segment_name(".00000000000000000005.tmp") is None
    assert parse_segment_name("5-9.jsonl") is None


_WRITER = """
import sys, random
from txjoin.changelog import SegmentChangelog
w = SegmentChangelog(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
n = {}
while True:
    for _ in range(rng.randint(1, 200)):
        t = rng.choice(["a", "b", "s.transaction"])
        n[t] = n.get(t, 0)
        w.append(t, ('{"t":"%s","n":%d,"pad":"%s"}' % (t, n[t], "x" * rng.randint(0, 300))).encode())
        n[t] += 1
    w.flush()
    print(" ".join(f"{t}={v}" for t, v in n.items()), flush=True)
"""


def test_kill_9_leaves_every_flushed_record_and_no_partial_segment(tmp_path: Path) -> None:
    rng = random.Random(42)
    topics = ["a", "b", "s.transaction"]
    reported_any = False
    for i in range(5):
        reader = ChangelogReader(tmp_path)
        before = {t: reader.end_offset(t) for t in topics}
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(i)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.3 + rng.random() * 0.5)
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        complete = [ln for ln in out.split("\n")[:-1] if ln]  # the last line may be cut
        reported = (
            dict((p.split("=")[0], int(p.split("=")[1])) for p in complete[-1].split()) if complete else {}
        )
        reported_any = reported_any or bool(reported)
        reader = ChangelogReader(tmp_path)
        for t in topics:
            records = list(reader.read(t))
            assert [o for o, _ in records] == list(range(len(records))), "offsets not contiguous"
            mine = [json.loads(v) for o, v in records if o >= before[t]]
            # Every record this child reported flushed is there, in order,
            # and nothing partial: each line parses.
            assert len(mine) >= reported.get(t, 0)
            assert [v["n"] for v in mine] == list(range(len(mine)))
            assert all(v["t"] == t for v in mine)
    assert reported_any, "no child finished a flush before being killed"
    with SegmentChangelog(tmp_path) as w:
        for t in topics:
            assert w.append(t, b"{}") == ChangelogReader(tmp_path).end_offset(t)
