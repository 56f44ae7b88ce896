"""The pipeline spec: what users write to define sources and output tables.

A TOML file::

    name = "pizzeria"
    state_dir = ".txjoin/pizzeria"      # changelog, checkpoint, replicas, Delta outputs

    [sources.shop]
    dsn_env = "SHOP_DSN"                # or: dsn = "host=... dbname=..."
    tables = ["public.orders", "public.clients"]

    [outputs.orders_enriched]
    key = ["order_id"]
    sql = \"\"\"
    SELECT orders.id AS order_id, clients.name AS client_name
    FROM orders JOIN clients ON orders.client_id = clients.id
    \"\"\"

Relative paths are relative to the spec file. Every setting is checked when
the spec loads, with errors that name the setting and the file.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from txjoin.capture.config import CaptureConfig
from txjoin.debezium.topics import validate_prefix
from txjoin.errors import ConfigError
from txjoin.pg.names import QualifiedName, parse_table_name

__all__ = [
    "Memory",
    "Options",
    "OutputSpec",
    "PipelineSpec",
    "SourceSpec",
    "SparkSettings",
    "load_spec",
    "machine_memory",
    "memory",
]


@dataclass(frozen=True)
class SourceSpec:
    """One source database."""

    name: str
    #: libpq DSN (given directly or through ``dsn_env``); never logged.
    dsn: str
    tables: tuple[QualifiedName, ...]
    slot: str = ""
    publication: str = ""
    #: Connections reading the initial snapshot in parallel, and the size of a chunk each reads.
    snapshot_workers: int = 2
    snapshot_chunk_mb: int = 64
    #: 'txjoin': txjoin's capture writes the changelog; 'debezium': a team's own Debezium wrote
    #: the topics in ``topics`` (the DSN then only serves the catalog and verification).
    format: str = "txjoin"
    #: Directory of Debezium's topics (format 'debezium'): one file or directory per topic.
    topics: Path | None = None

    def capture_config(self, changelog: Path, **overrides: Any) -> CaptureConfig:
        settings: dict[str, Any] = {
            "snapshot_workers": self.snapshot_workers,
            "snapshot_chunk_mb": self.snapshot_chunk_mb,
            **overrides,
        }
        return CaptureConfig(
            dsn=self.dsn, tables=self.tables, changelog=changelog, prefix=self.name,
            slot=self.slot, publication=self.publication, **settings,
        )  # fmt: skip


@dataclass(frozen=True)
class OutputSpec:
    """One output Delta table: a PostgreSQL-dialect SELECT and its key."""

    name: str
    sql: str
    key: tuple[str, ...]
    path: Path


@dataclass(frozen=True)
class Options:
    """Tuning knobs, with defaults that suit a laptop."""

    #: Spark micro-batch trigger, e.g. "100 milliseconds"; "" picks one by input
    #: (:meth:`txjoin.decode.ChangelogInput.trigger`).
    trigger_interval: str = ""
    #: A safety valve: a transaction of more events stops the pipeline, naming this setting.
    max_transaction_events: int = 50_000_000
    #: A transaction of more events than this is staged in the replica store as it arrives and
    #: applied whole once complete, so no transaction has to fit in memory.
    stage_transaction_events: int = 100_000
    #: Most rows a staged transaction is applied in per step; a step also holds at most about
    #: ``max_batch_bytes`` of event values, so wide rows take smaller steps (memory per step).
    stage_chunk_rows: int = 250_000
    #: Seconds before an incomplete transaction is reported.
    incomplete_timeout: float = 60.0
    #: 'warn' or 'fail' when a transaction stays incomplete.
    on_incomplete: str = "warn"
    #: Follow before-images when finding affected output rows. Turning it off
    #: is wrong; it exists so the regression suite can show it catches that.
    propagate_before_images: bool = True
    #: Seconds between commits that only move an unchanged output to a newer
    #: cut (so readers see its freshness and a quiet source converges).
    idle_commit_interval: float = 2.0
    #: Target size of output Delta files: a batch rewrites only the files
    #: holding changed partitions, so smaller files mean cheaper commits.
    output_file_bytes: int = 2 << 20
    #: Compact an output's small files once there are this many.
    compact_after_files: int = 32
    #: How long an output's Delta log keeps old versions (time travel), e.g. "10 minutes", "6 hours",
    #: "30 days" (Delta's ``delta.logRetentionDuration``). Every commit to a table on a local disk lists
    #: its whole log, so each version kept costs every later commit about 9 us (bench/NOTES.md).
    output_log_retention: str = "10 minutes"
    #: Spark local cores.
    spark_cores: int = 2
    #: Memory of Spark's driver (in local mode: all of Spark), e.g. "3g"; "" derives it from the
    #: machine: 10% of its memory, between 1g and 4g. G1 may grow the heap to this limit even when
    #: the work needs less, and the JVM holds about 0.7 GiB more (bench/NOTES.md).
    driver_memory: str = ""
    #: Memory the replica store (DuckDB) may use before it spills to disk; "" derives it: 5% of the
    #: machine, between 256MB and 2GB.
    replica_memory: str = ""
    #: Most changelog bytes one micro-batch reads; 0 derives it: 1/400 of the machine's memory,
    #: between 16 MB and 64 MB. A transaction larger than this is staged, not held.
    max_batch_bytes: int = 0
    #: Recomputing every partition of an output over at least this many replica rows runs as one
    #: Spark job over Parquet exports (writing the output's files in parallel), not through the driver.
    distributed_rows: int = 100_000
    #: Seconds the streaming query may go without finishing a micro-batch while one runs or
    #: changelog data waits; then ``txjoin run`` stops with "no progress" (the watchdog).
    stall_timeout: float = 1800.0


_INTERVAL = re.compile(r"(?:interval\s+)?(\d+)\s*(second|minute|hour|day|week)s?", re.IGNORECASE)


def log_retention(options: Options, where: str = "[options]") -> str:
    """``output_log_retention`` in Delta's form ("10 minutes" -> "interval 10 minutes")."""
    m = _INTERVAL.fullmatch(str(options.output_log_retention).strip())
    if m is None or int(m.group(1)) == 0:
        raise ConfigError(
            f"{where}: output_log_retention={options.output_log_retention!r} is invalid: give a count and "
            "a unit of seconds, minutes, hours, days or weeks, e.g. '10 minutes'"
        )
    return f"interval {int(m.group(1))} {m.group(2).lower()}s"


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return int(total)


def _clamp(value: float, lo: int, hi: int) -> int:
    return int(min(max(value, lo), hi))


@dataclass(frozen=True)
class Memory:
    """The memory settings in force: the spec's, or derived from the machine."""

    driver: str
    replica: str
    batch_bytes: int


def memory(options: Options) -> Memory:
    ram = machine_memory()
    mb = 1 << 20
    driver = options.driver_memory or f"{_clamp(ram * 0.10 / mb, 1024, 4096)}m"
    replica = options.replica_memory or f"{_clamp(ram * 0.05 / mb, 256, 2048)}MB"
    batch = options.max_batch_bytes or _clamp(ram / 400, 16 * mb, 64 * mb)
    return Memory(driver, replica, batch)


@dataclass(frozen=True)
class SparkSettings:
    """Where Spark runs (``[spark]`` in the spec; ``--master``/``--conf`` override it)."""

    #: ``local[N]`` (default: ``local[<spark_cores>]``), ``spark://host:port``, ``yarn``, ``k8s://...``.
    master: str = ""
    #: Memory of each executor (``spark.executor.memory``), e.g. "2g"; "" leaves Spark's default.
    executor_memory: str = ""
    #: Any other ``spark.*`` setting.
    conf: dict[str, str] = field(default_factory=dict)

    def merged(self, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSettings:
        """These settings with the command line's on top."""
        return SparkSettings(master or self.master, self.executor_memory, {**self.conf, **(conf or {})})


def spark_settings(raw: dict[str, Any], where: str) -> SparkSettings:
    _check_keys(raw, {"master", "executor_memory", "conf"}, where)
    conf = raw.get("conf", {})
    if not isinstance(conf, dict):
        raise ConfigError(f"{where}: conf must be a table of spark.* settings")
    for k in conf:
        if not str(k).startswith("spark."):
            raise ConfigError(f"{where}: conf key {k!r} is not a Spark setting (they start with 'spark.')")
    return SparkSettings(
        str(raw.get("master", "")),
        str(raw.get("executor_memory", "")),
        {str(k): str(v) for k, v in conf.items()},
    )


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    path: Path | None
    state_dir: Path
    sources: dict[str, SourceSpec]
    outputs: dict[str, OutputSpec]
    options: Options = field(default_factory=Options)
    spark: SparkSettings = field(default_factory=SparkSettings)

    @property
    def changelog(self) -> Path:
        return self.state_dir / "changelog"

    @property
    def checkpoint(self) -> Path:
        return self.state_dir / "checkpoint"

    @property
    def replicas(self) -> Path:
        return self.state_dir / "replicas.duckdb"

    def source_of(self, table: QualifiedName) -> SourceSpec:
        for s in self.sources.values():
            if table in s.tables:
                return s
        raise ConfigError(f"no source of pipeline {self.name!r} captures table {table}")


def _req(d: dict[str, Any], key: str, where: str, kind: type) -> Any:
    if key not in d:
        raise ConfigError(f"{where}: missing setting {key!r}")
    v = d[key]
    if not isinstance(v, kind):
        raise ConfigError(f"{where}: {key!r} must be a {kind.__name__}, not {type(v).__name__}")
    return v


def _check_keys(d: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(d) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; valid: {sorted(allowed)}")


def local_path(value: str, where: str) -> Path:
    """A location given as a path or a ``file://`` URI; other schemes are refused."""
    if value.startswith("file://"):
        parsed = urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"{where}: {value!r} names host {parsed.netloc!r}; file:// URIs are local")
        return Path(unquote(parsed.path))
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme:
        raise ConfigError(
            f"{where}: {value!r}: {scheme}:// locations are not supported yet (the replica store and the "
            "changelog need a filesystem every process sees); use a path or a file:// URI on shared storage"
        )
    return Path(value)


def build_spec(raw: dict[str, Any], base: Path, origin: str, spec_path: Path | None = None) -> PipelineSpec:
    _check_keys(raw, {"name", "state_dir", "sources", "outputs", "options", "spark"}, origin)
    name = str(raw.get("name") or (spec_path.stem if spec_path else "pipeline"))
    state_dir = local_path(str(raw.get("state_dir", f".txjoin/{name}")), f"{origin}: state_dir")
    state_dir = state_dir if state_dir.is_absolute() else (base / state_dir)
    sources: dict[str, SourceSpec] = {}
    raw_sources = _req(raw, "sources", origin, dict)
    if not raw_sources:
        raise ConfigError(f"{origin}: no sources: add a [sources.NAME] table")
    for sname, s in raw_sources.items():
        where = f"{origin}: [sources.{sname}]"
        validate_prefix(sname)
        allowed = {
            "dsn", "dsn_env", "tables", "slot", "publication", "snapshot_workers", "snapshot_chunk_mb",
            "format", "topics",
        }  # fmt: skip
        _check_keys(s, allowed, where)
        if "dsn" in s:
            dsn = str(s["dsn"])
        elif "dsn_env" in s:
            env = str(s["dsn_env"])
            dsn = os.environ.get(env, "")
            if not dsn:
                raise ConfigError(f"{where}: environment variable {env} (dsn_env) is not set")
        else:
            raise ConfigError(f"{where}: set dsn or dsn_env")
        tables = tuple(parse_table_name(t) for t in _req(s, "tables", where, list))
        if not tables:
            raise ConfigError(f"{where}: tables is empty")
        sizes = {k: s[k] for k in ("snapshot_workers", "snapshot_chunk_mb") if k in s}
        for k, v in sizes.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{where}: {k} must be a positive integer, not {v!r}")
        fmt = str(s.get("format", "txjoin"))
        if fmt not in ("txjoin", "debezium"):
            raise ConfigError(f"{where}: format {fmt!r} is invalid: valid values are 'txjoin', 'debezium'")
        if fmt == "debezium" and "topics" not in s:
            raise ConfigError(f"{where}: format 'debezium' needs topics = DIR (one per topic)")
        topics = None if "topics" not in s else local_path(str(s["topics"]), f"{where}: topics")
        if topics is not None and not topics.is_absolute():
            topics = base / topics
        sources[sname] = SourceSpec(
            sname, dsn, tables, str(s.get("slot", "")), str(s.get("publication", "")), **sizes,
            format=fmt, topics=topics,
        )  # fmt: skip
    formats = {s.format for s in sources.values()}
    if len(formats) > 1 or len({s.topics for s in sources.values()}) > 1:
        raise ConfigError(
            f"{origin}: sources must all be captured by txjoin, or all be Debezium topics in one "
            "directory; mixing them in one pipeline is not supported yet"
        )
    seen: dict[QualifiedName, str] = {}
    for s in sources.values():
        for t in s.tables:
            if t in seen:
                raise ConfigError(
                    f"{origin}: table {t} is listed by sources {seen[t]!r} and {s.name!r}; "
                    "name each table once (one database per source)"
                )
            seen[t] = s.name
    outputs: dict[str, OutputSpec] = {}
    for oname, o in _req(raw, "outputs", origin, dict).items():
        where = f"{origin}: [outputs.{oname}]"
        _check_keys(o, {"sql", "key", "path"}, where)
        if not oname.replace("_", "").isalnum():
            raise ConfigError(f"{where}: output names use letters, digits and '_'")
        key = tuple(str(k) for k in _req(o, "key", where, list))
        path = local_path(str(o.get("path", state_dir / "delta" / oname)), f"{where}: path")
        outputs[oname] = OutputSpec(
            oname, str(_req(o, "sql", where, str)), key, path if path.is_absolute() else base / path
        )
    opts_raw = dict(raw.get("options", {}))
    valid = set(Options.__dataclass_fields__)
    _check_keys(opts_raw, valid, f"{origin}: [options]")
    options = Options(**opts_raw)
    if options.on_incomplete not in ("warn", "fail"):
        raise ConfigError(
            f"{origin}: on_incomplete={options.on_incomplete!r} is invalid: valid values are 'warn', 'fail'"
        )
    log_retention(options, f"{origin}: [options]")
    spark = spark_settings(dict(raw.get("spark", {})), f"{origin}: [spark]")
    return PipelineSpec(name, spec_path, state_dir, sources, outputs, options, spark)


def load_spec(
    path: str | os.PathLike[str], *, state_dir: str | os.PathLike[str] | None = None
) -> PipelineSpec:
    """Load and check a spec file; ``state_dir`` overrides the file's."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"pipeline spec {p} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"pipeline spec {p} is not valid TOML: {e}") from None
    if state_dir is not None:
        raw["state_dir"] = str(Path(state_dir).absolute())
    return build_spec(raw, p.parent.absolute(), str(p), p)
