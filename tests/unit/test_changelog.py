"""The segment changelog on real files: order, atomic visibility, recovery, kill -9."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.profiles import THOROUGH
from txjoin.changelog import (
    LOCK_FILE,
    ChangelogReader,
    SegmentChangelog,
    parse_segment_name,
    segment_name,
)
from txjoin.errors import ChangelogError, ConfigError


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _segment(d: Path, first: int, last: int, lines: list[bytes] | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / segment_name(first, last)
    if lines is None:
        lines = [json.dumps({"n": n}).encode() for n in range(first, last + 1)]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


# ----------------------------------------------------------------- round trip
def test_round_trip_over_topics_flushes_and_reopen(tmp_path: Path) -> None:
    root = tmp_path / "nested" / "changelog"  # created on open
    with SegmentChangelog(root) as w:
        assert w.append("s.public.a", b'{"n":0}') == 0
        assert w.append("s.public.a", b'{"n":1}') == 1
        assert w.append("s.transaction", b'{"status":"END"}') == 0
        assert w.pending_bytes() == 8 + 8 + 17
        w.flush()
        assert w.pending_bytes() == 0
        assert w.pending_age() == 0.0
        w.flush()  # nothing pending: no empty segment
        assert w.append("s.public.a", b'{"n":2}') == 2
        assert w.append("s.public.b", b'{"n":0}') == 0
        w.flush()
    with SegmentChangelog(root) as w:
        assert w.append("s.public.a", b'{"n":3}') == 3
        assert w.append("s.public.b", b'{"n":1}') == 1
        assert w.append("s.transaction", b'{"status":"BEGIN"}') == 1
        w.flush()

    r = ChangelogReader(root)
    assert r.topics() == ["s.public.a", "s.public.b", "s.transaction"]
    assert [(o, json.loads(v)["n"]) for o, v in r.read("s.public.a")] == [
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
    ]
    assert [(s.first, s.last, s.count) for s in r.segments("s.public.a")] == [
        (0, 1, 2),
        (2, 2, 1),
        (3, 3, 1),
    ]
    assert _files(root / "s.public.a") == [
        "00000000000000000000-00000000000000000001.jsonl",
        "00000000000000000002-00000000000000000002.jsonl",
        "00000000000000000003-00000000000000000003.jsonl",
    ]
    assert (root / "s.public.a" / segment_name(0, 1)).read_bytes() == b'{"n":0}\n{"n":1}\n'
    assert [v for _, v in r.read("s.transaction")] == [b'{"status":"END"}', b'{"status":"BEGIN"}']
    assert r.last("s.public.a") == (3, b'{"n":3}')
    assert r.end_offset("s.public.a") == 4
    assert r.end_offset("s.public.b") == 2
    assert [o for o, _ in r.read("s.public.a", start_offset=1)] == [1, 2, 3]
    assert list(r.read("s.public.a", start_offset=4)) == []


def test_pending_bytes_and_age_follow_unflushed_records(tmp_path: Path) -> None:
    with SegmentChangelog(tmp_path) as w:
        assert (w.pending_bytes(), w.pending_age()) == (0, 0.0)
        w.append("t", b"abc")
        time.sleep(0.05)
        w.append("u", b"de")
        assert w.pending_bytes() == 4 + 3
        assert 0.05 <= w.pending_age() < 5
        w.flush()
        assert (w.pending_bytes(), w.pending_age()) == (0, 0.0)


def test_unflushed_records_are_invisible_and_discarded_on_close(tmp_path: Path) -> None:
    w = SegmentChangelog(tmp_path)
    w.append("t", b"1")
    w.flush()
    w.append("t", b"2")
    assert [v for _, v in ChangelogReader(tmp_path).read("t")] == [b"1"]
    w.close()
    w.close()  # idempotent
    with SegmentChangelog(tmp_path) as w2:
        assert w2.append("t", b"x") == 1


def test_closed_writer_refuses_appends_and_flushes(tmp_path: Path) -> None:
    w = SegmentChangelog(tmp_path)
    w.close()
    with pytest.raises(ChangelogError, match="closed"):
        w.append("t", b"1")
    with pytest.raises(ChangelogError, match="closed"):
        w.flush()


# ---------------------------------------------------------------- flush order
def test_transaction_topics_are_renamed_after_data_topics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames: list[str] = []
    real = os.rename

    def record(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        assert Path(src).name.startswith(".")  # always from a hidden temp name
        renames.append(Path(dst).parent.name)
        real(src, dst)

    monkeypatch.setattr(os, "rename", record)
    with SegmentChangelog(tmp_path) as w:
        for topic in ["s.transaction", "s.public.z", "s.heartbeat", "a.transaction", "s.public.a"]:
            w.append(topic, b"{}")
        w.flush()
        assert set(renames[-2:]) == {"s.transaction", "a.transaction"}
        assert set(renames[:-2]) == {"s.public.a", "s.public.z", "s.heartbeat"}
        renames.clear()
        w.append("s.public.z", b"{}")
        w.flush()
        assert renames == ["s.public.z"]  # one segment per topic with pending records
    assert not list(tmp_path.glob("*/.*"))


def test_failed_flush_keeps_records_pending_and_offsets_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.rename
    fail = {"s.transaction"}

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).parent.name in fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with SegmentChangelog(tmp_path) as w:
        w.append("s.public.a", b"a0")
        w.append("s.transaction", b"t0")
        with pytest.raises(ChangelogError, match=r"s\.transaction.*No space left.*flush again"):
            w.flush()
        r = ChangelogReader(tmp_path)
        # The data segment is visible, the END is not; nothing partial remains.
        assert [v for _, v in r.read("s.public.a")] == [b"a0"]
        assert r.end_offset("s.transaction") == 0
        assert not list(tmp_path.glob("*/.*"))
        assert w.pending_bytes() == 3
        assert w.append("s.transaction", b"t1") == 1
        assert w.append("s.public.a", b"a1") == 1
        fail.clear()
        w.flush()
    r = ChangelogReader(tmp_path)
    assert list(r.read("s.public.a")) == [(0, b"a0"), (1, b"a1")]
    assert list(r.read("s.transaction")) == [(0, b"t0"), (1, b"t1")]


# ------------------------------------------------------------------ recovery
def test_leftover_temp_files_are_removed_on_open_and_not_counted(tmp_path: Path) -> None:
    with SegmentChangelog(tmp_path) as w:
        w.append("t", b"0")
        w.flush()
    temp = tmp_path / "t" / ".00000000000000000001.tmp"
    temp.write_bytes(b"1\n2\npart")  # a writer killed mid-flush
    other = tmp_path / "t" / ".editor.swp"
    other.write_bytes(b"not ours")
    r = ChangelogReader(tmp_path)
    assert r.end_offset("t") == 1  # readers ignore hidden files and leave them
    assert temp.exists()
    with SegmentChangelog(tmp_path) as w:
        assert not temp.exists()
        assert other.exists()  # hidden but not our temp name: not ours to delete
        assert w.append("t", b"1") == 1
        w.flush()
    assert list(ChangelogReader(tmp_path).read("t")) == [(0, b"0"), (1, b"1")]


@pytest.mark.parametrize(
    ("ranges", "bad", "what"),
    [
        ([(0, 1), (3, 4)], segment_name(3, 4), r"offsets 2\.\.2 are missing"),
        ([(0, 2), (2, 3)], segment_name(2, 3), "overlaps"),
        ([(0, 2), (3, 1)], segment_name(3, 1), "ends before it starts"),
    ],
)
def test_gaps_and_overlaps_are_reported_with_the_file(
    tmp_path: Path, ranges: list[tuple[int, int]], bad: str, what: str
) -> None:
    for first, last in ranges:
        _segment(tmp_path / "t", first, max(first, last))
        if last < first:
            (tmp_path / "t" / segment_name(first, first)).rename(tmp_path / "t" / bad)
    with pytest.raises(ChangelogError, match=rf"{bad} of topic t .*{what}.*damaged") as e:
        SegmentChangelog(tmp_path)
    assert e.value.details["topic"] == "t"
    assert e.value.details["path"].endswith(bad)
    with pytest.raises(ChangelogError, match=bad):
        ChangelogReader(tmp_path).segments("t")
    # The refused open released the lock: once repaired, the store opens.
    (tmp_path / "t" / bad).unlink()
    with SegmentChangelog(tmp_path) as w:
        assert w.append("t", b"{}") == ChangelogReader(tmp_path).end_offset("t")


def test_trimmed_topic_prefix_is_not_damage(tmp_path: Path) -> None:
    with SegmentChangelog(tmp_path) as w:
        for n in range(4):
            w.append("s.heartbeat", str(n).encode())
            w.flush()
    for seg in ChangelogReader(tmp_path).segments("s.heartbeat")[:2]:
        seg.path.unlink()  # capture trims old heartbeats
    r = ChangelogReader(tmp_path)
    assert list(r.read("s.heartbeat")) == [(2, b"2"), (3, b"3")]
    with SegmentChangelog(tmp_path) as w:
        assert w.append("s.heartbeat", b"4") == 4


def test_foreign_files_in_a_topic_are_refused(tmp_path: Path) -> None:
    _segment(tmp_path / "t", 0, 0)
    (tmp_path / "t" / "notes.txt").write_text("hello")
    with pytest.raises(ChangelogError, match=r"notes\.txt in topic t is not a changelog segment"):
        SegmentChangelog(tmp_path)
    with pytest.raises(ChangelogError, match=r"notes\.txt"):
        ChangelogReader(tmp_path).segments("t")
    (tmp_path / "t" / "notes.txt").unlink()
    (tmp_path / "t" / segment_name(1, 1)).mkdir()  # a directory with a segment's name
    with pytest.raises(ChangelogError, match="not a changelog segment"):
        SegmentChangelog(tmp_path)


def test_metadata_and_foreign_directories_are_not_topics(tmp_path: Path) -> None:
    (tmp_path / "_schemas").mkdir()
    (tmp_path / "_schemas" / "s.public.a.jsonl").write_text("{}\n")
    (tmp_path / "_capture").mkdir()
    (tmp_path / "lost+found").mkdir()
    (tmp_path / ".trash").mkdir()
    (tmp_path / "README").write_text("a file in the root is not a topic")
    with SegmentChangelog(tmp_path) as w:
        w.append("t", b"1")
        w.flush()
    assert ChangelogReader(tmp_path).topics() == ["t"]


def test_a_file_where_a_topic_directory_belongs_is_reported(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("x")
    with SegmentChangelog(tmp_path) as w:
        w.append("t", b"1")
        with pytest.raises(ChangelogError, match="cannot write segment"):
            w.flush()
    with pytest.raises(ChangelogError, match="is a file where topic t should be a directory"):
        ChangelogReader(tmp_path).segments("t")


# -------------------------------------------------------------- one writer
def test_second_writer_is_refused_while_the_first_is_open(tmp_path: Path) -> None:
    first = SegmentChangelog(tmp_path)
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    with pytest.raises(ChangelogError, match=rf"written by process {os.getpid()}.*one capture per"):
        SegmentChangelog(tmp_path)
    first.close()
    SegmentChangelog(tmp_path).close()


def test_the_lock_is_held_across_processes(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from txjoin.changelog import SegmentChangelog; "
            "w = SegmentChangelog(sys.argv[1]); print('open', flush=True); sys.stdin.read()",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "open\n"
        with pytest.raises(ChangelogError, match=f"process {child.pid}"):
            SegmentChangelog(tmp_path)
    finally:
        child.kill()  # kill -9: the kernel releases the lock with the process
        child.communicate()
    SegmentChangelog(tmp_path).close()


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "topic",
    ["", ".hidden", "_meta", "a/b", "..", "x" * 250, "sp ace", "a$b", "é", "a\nb", "a:b"],
)
def test_invalid_topic_names(tmp_path: Path, topic: str) -> None:
    with SegmentChangelog(tmp_path) as w, pytest.raises(ConfigError, match="topic name"):
        w.append(topic, b"1")
    with pytest.raises(ConfigError):
        ChangelogReader(tmp_path).segments(topic)


@pytest.mark.parametrize("topic", ["t", "x" * 249, "-x", "a.b_c-D9", "s.transaction"])
def test_valid_topic_names(tmp_path: Path, topic: str) -> None:
    with SegmentChangelog(tmp_path) as w:
        w.append(topic, b"1")
        w.flush()
    assert ChangelogReader(tmp_path).topics() == [topic]


@pytest.mark.parametrize("value", [b"", b'{"a":\n1}', b"{}\n", b'{"a":"\r"}'])
def test_records_must_be_one_non_empty_line(tmp_path: Path, value: bytes) -> None:
    with SegmentChangelog(tmp_path) as w:
        with pytest.raises(ConfigError, match="one JSON value on one line"):
            w.append("t", value)
        assert w.pending_bytes() == 0
        w.flush()
        assert not (tmp_path / "t").exists()  # no empty segment either
        assert w.append("t", b"{}") == 0  # the refused record took no offset


def test_segment_names() -> None:
    assert parse_segment_name("00000000000000000005-00000000000000000009.jsonl") == (5, 9)
    assert parse_segment_name(segment_name(12, 3456)) == (12, 3456)
    assert parse_segment_name(".00000000000000000005.tmp") is None
    assert parse_segment_name("5-9.jsonl") is None
    assert parse_segment_name("00000000000000000005-00000000000000000009.json") is None
    assert parse_segment_name("x00000000000000000005-00000000000000000009.jsonl") is None


# ------------------------------------------------------------------- reading
def test_last_on_empty_and_missing_topics(tmp_path: Path) -> None:
    r = ChangelogReader(tmp_path / "missing")
    assert r.topics() == []
    assert r.last("t") is None
    assert r.end_offset("t") == 0
    (tmp_path / "t").mkdir()
    r = ChangelogReader(tmp_path)
    assert r.last("t") is None
    assert r.segments("t") == []
    assert list(r.read("t")) == []


@pytest.mark.parametrize("size", [1, 100, (1 << 14) - 1, 1 << 14, 300_000])
def test_last_reads_long_records_from_the_end(tmp_path: Path, size: int) -> None:
    records = [b"a" * size, b"b" * (size + 1), b"c" * size]
    with SegmentChangelog(tmp_path) as w:
        for v in records:
            w.append("t", v)
        w.flush()
        w.append("u", b"only")
        w.flush()
    r = ChangelogReader(tmp_path)
    assert r.last("t") == (2, records[-1])
    assert r.last("u") == (0, b"only")
    assert list(r.read("t")) == list(enumerate(records))


def test_damaged_segment_contents_are_reported(tmp_path: Path) -> None:
    _segment(tmp_path / "t", 0, 2, [b"0", b"1"])  # name says 3 records
    with pytest.raises(ChangelogError, match=r"holds 2 records but its name says 3") as e:
        list(ChangelogReader(tmp_path).read("t"))
    assert e.value.details["offset"] == 0
    path = _segment(tmp_path / "u", 0, 1)
    path.write_bytes(path.read_bytes()[:-3])  # cut mid-record
    with pytest.raises(ChangelogError, match="does not end with a newline"):
        list(ChangelogReader(tmp_path).read("u"))
    with pytest.raises(ChangelogError, match="does not end with a newline"):
        ChangelogReader(tmp_path).last("u")
    _segment(tmp_path / "v", 0, 0, []).write_bytes(b"")
    with pytest.raises(ChangelogError, match="is empty"):
        ChangelogReader(tmp_path).last("v")


# ------------------------------------------------------ processes and crashes
_WRITER = """
import json, random, sys
from txjoin.changelog import ChangelogReader, SegmentChangelog

root, seed = sys.argv[1], int(sys.argv[2])
w = SegmentChangelog(root)
rng = random.Random(seed)
reader = ChangelogReader(root)
data = ["a", "b"]
n = {t: reader.end_offset(t) for t in data + ["s.transaction"]}

def put(topic, value):
    value["n"] = n[topic]  # each record names its own offset
    assert w.append(topic, json.dumps(value, separators=(",", ":")).encode()) == n[topic]
    n[topic] += 1

while True:
    for _ in range(rng.randint(1, 50)):
        for _ in range(rng.randint(0, 40)):
            t = rng.choice(data)
            put(t, {"t": t, "pad": "x" * ((n[t] * 7919) % 3001)})
        # Like an END marker: counts what its topics hold once it is written.
        put("s.transaction", {"t": "s.transaction", "a": n["a"], "b": n["b"]})
    w.flush()
    print(" ".join(f"{t}={v}" for t, v in n.items()), flush=True)
"""


def _check_store(root: Path, topics: list[str]) -> dict[str, list[dict[str, object]]]:
    """Every visible segment parses line by line, every record sits at its own offset."""
    reader = ChangelogReader(root)
    out: dict[str, list[dict[str, object]]] = {}
    for t in topics:
        for seg in reader.segments(t):
            lines = seg.path.read_bytes().split(b"\n")
            assert lines[-1] == b"", f"{seg.path} is not newline-terminated"
            assert len(lines) - 1 == seg.count, f"{seg.path} holds a partial segment"
            for line in lines[:-1]:
                json.loads(line)
        values = [(o, json.loads(v)) for o, v in reader.read(t)]
        assert [o for o, _ in values] == list(range(len(values))), f"{t}: offsets not contiguous"
        for o, v in values:
            assert v["n"] == o, f"{t}: record at offset {o} says {v['n']}"
            assert v["t"] == t
            if t != "s.transaction":
                assert v["pad"] == "x" * ((o * 7919) % 3001), f"{t}: record {o} is not intact"
        out[t] = [v for _, v in values]
    return out


def test_kill_9_leaves_every_flushed_record_and_no_partial_segment(tmp_path: Path) -> None:
    rng = random.Random(42)
    topics = ["a", "b", "s.transaction"]
    for i in range(25 if THOROUGH else 5):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # at least one flush reported
            assert first, "the writer died before its first flush"
            time.sleep(rng.random() * 0.3)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        complete = [ln for ln in (first + out).split("\n")[:-1] if ln]  # the last may be cut
        reported = {p.split("=")[0]: int(p.split("=")[1]) for p in complete[-1].split()}

        values = _check_store(tmp_path, topics)
        for t in topics:
            assert len(values[t]) >= reported[t], f"{t}: flushed records are missing"
        # Once a marker is visible, the records it counts are too.
        for marker in values["s.transaction"]:
            assert len(values["a"]) >= int(str(marker["a"]))
            assert len(values["b"]) >= int(str(marker["b"]))

    with SegmentChangelog(tmp_path) as w:
        assert not list(tmp_path.glob("*/.*.tmp")), "leftover temp files survived an open"
        for t in topics:
            assert w.append(t, b"{}") == ChangelogReader(tmp_path).end_offset(t)


def test_readers_racing_a_writer_see_contiguous_prefixes(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), "7"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        deadline = time.monotonic() + 1.0
        seen = {"a": 0, "s.transaction": 0}
        while time.monotonic() < deadline:
            r = ChangelogReader(tmp_path)
            for t in seen:
                # Reading checks each segment whole: a partial one fails its line count.
                new = [(o, json.loads(v)) for o, v in r.read(t, start_offset=seen[t])]
                assert [o for o, _ in new] == list(range(seen[t], seen[t] + len(new)))
                assert all(v["n"] == o for o, v in new)
                end = r.end_offset(t)
                assert end >= seen[t] + len(new), f"{t} went backwards"
                seen[t] = end
            last = r.last("s.transaction")
            assert last is not None
            # The marker's data is visible to a reader that lists after it.
            assert r.end_offset("a") >= json.loads(last[1])["a"]
    finally:
        proc.kill()
        proc.communicate()
    assert seen["a"] > 0


def test_writers_of_different_sources_share_a_directory(tmp_path: Path) -> None:
    a = SegmentChangelog(tmp_path, source="a")
    b = SegmentChangelog(tmp_path, source="b")
    a.append("a.public.t", b'{"x":1}')
    b.append("b.public.t", b'{"y":1}')
    a.flush()
    b.flush()
    assert [v for _, v in ChangelogReader(tmp_path).read("a.public.t")] == [b'{"x":1}']
    assert [v for _, v in ChangelogReader(tmp_path).read("b.public.t")] == [b'{"y":1}']
    # A writer owns its own source's topics only, and one writer per source.
    with pytest.raises(ChangelogError, match="owns the topics of source 'a'"):
        a.append("b.public.t", b'{"z":1}')
    with pytest.raises(ChangelogError, match="already being written"):
        SegmentChangelog(tmp_path, source="a")
    a.close()
    b.close()
