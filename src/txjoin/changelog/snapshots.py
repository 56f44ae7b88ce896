"""The changelog's columnar snapshots: a source's initial rows as Parquet files.

Capture reads the tables under the slot's exported snapshot and writes them
here instead of as op 'r' events (a 10M-row table is 5.7 GB of JSON, written
and parsed row by row; as Parquet it is written and bulk-loaded column by
column)::

    <root>/_snapshots/<source>/<xid>-<lsn>/<topic>/part-00000.parquet
    <root>/_snapshots/<source>/<xid>-<lsn>/manifest.json     written last

The manifest lists each table's files and row count; the snapshot's END
marker on the transaction topic carries the manifest's path (relative to the
root) in ``snapshot_manifest``. Columns hold Debezium values
(:mod:`txjoin.debezium.arrow`). A snapshot directory without a manifest is
the leftover of an interrupted attempt and is removed by the next one.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.errors import ChangelogError

__all__ = [
    "COMMITTED",
    "RESYNC",
    "SNAPSHOTS_DIR",
    "Manifest",
    "part_path",
    "publish",
    "read_manifest",
    "resync_manifests",
]

SNAPSHOTS_DIR = "_snapshots"
MANIFEST = "manifest.json"
#: Resyncs of single tables (``txjoin resync``) go to ``_snapshots/<source>/resync/<id>/``.
RESYNC = "resync"
#: Written in a resync's directory once its marker transaction committed on the source.
COMMITTED = "COMMITTED"


def _dir(root: Path, source: str, snapshot: str) -> Path:
    return Path(root) / SNAPSHOTS_DIR / source / snapshot


def part_path(root: Path, source: str, snapshot: str, topic: str, part: int) -> Path:
    """Where part ``part`` of ``topic`` goes (its directory is created)."""
    d = _dir(root, source, snapshot) / topic
    d.mkdir(parents=True, exist_ok=True)
    return d / f"part-{part:05d}.parquet"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(root: Path, source: str, snapshot: str, manifest: dict[str, Any]) -> str:
    """Make the snapshot's files durable, write its manifest last; return the manifest's path."""
    d = _dir(root, source, snapshot)
    d.mkdir(parents=True, exist_ok=True)
    for sub in d.iterdir():
        if sub.is_dir():
            for part in sub.iterdir():
                with open(part, "rb") as fh:
                    os.fsync(fh.fileno())
            _fsync_dir(sub)
    tmp = d / ("." + MANIFEST + ".tmp")
    with open(tmp, "w") as out:
        json.dump(manifest, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp, d / MANIFEST)
    _fsync_dir(d)
    for other in d.parent.iterdir():  # leftovers of interrupted attempts
        if other != d and other.is_dir() and not (other / MANIFEST).exists():
            shutil.rmtree(other, ignore_errors=True)
    return str((d / MANIFEST).relative_to(Path(root)))


@dataclass(frozen=True)
class Manifest:
    """A published snapshot: per table ("schema.table"), its row count and Parquet files."""

    xid: int
    lsn: int
    ts_us: int
    rows: dict[str, int]
    files: dict[str, list[Path]]
    #: A resync's table ("schema.table") and its columns now (:func:`txjoin.join.evolve.column_to_json`).
    resync: dict[str, Any] | None = None


def read_manifest(root: str | os.PathLike[str], ref: str) -> Manifest:
    """The manifest an END marker's ``snapshot_manifest`` names (files as absolute paths)."""
    path = Path(root) / ref
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise ChangelogError(
            f"the snapshot manifest {path} named by the changelog's transaction topic is missing: the "
            "changelog was copied without its _snapshots directory, or damaged. Restore it, or capture "
            "again into an empty changelog",
            path=str(path),
        ) from None
    base = path.parent
    tables = m["tables"]
    return Manifest(
        xid=int(m["xid"]),
        lsn=int(m["lsn"]),
        ts_us=int(m["ts_us"]),
        rows={t: int(v["rows"]) for t, v in tables.items()},
        files={t: [base / f for f in v["files"]] for t, v in tables.items()},
        resync=m.get("resync"),
    )


def resync_manifests(
    root: str | os.PathLike[str], source: str, known: dict[Path, tuple[str, str, int]] | None = None
) -> list[tuple[str, str, int]]:
    """The published resyncs of ``source``: (manifest reference, "schema.table", LSN).

    ``known`` caches resyncs already read (a committed resync never changes), so a
    caller asking every micro-batch reads each manifest once.
    """
    d = Path(root) / SNAPSHOTS_DIR / source / RESYNC
    known = {} if known is None else known
    out = []
    for sub in sorted(d.iterdir()) if d.is_dir() else []:
        if sub not in known:
            path = sub / MANIFEST
            if not path.exists() or not (sub / COMMITTED).exists():
                continue  # interrupted, or not committed on the source (yet)
            m = json.loads(path.read_text())
            known[sub] = (str(path.relative_to(Path(root))), str(m["resync"]["table"]), int(m["lsn"]))
        out.append(known[sub])
    return out


class ResyncDir:
    """A source's resync copies: ``_snapshots/<source>/resync/<copy>/`` (see
    :mod:`txjoin.capture.resync`)."""

    def __init__(self, root: str | os.PathLike[str], source: str) -> None:
        self.root = Path(root)
        self.source = f"{source}/{RESYNC}"

    def part(self, copy: str, topic: str, part: int) -> Path:
        return part_path(self.root, self.source, copy, topic, part)

    def publish(self, copy: str, manifest: dict[str, Any]) -> str:
        return publish(self.root, self.source, copy, manifest)

    def committed(self, ref: str) -> None:
        d = (self.root / ref).parent
        with open(d / COMMITTED, "w") as f:
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(d)
