"""Spec settings for real sizes: snapshot parallelism per source, memory derived from the machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from txjoin.decode import changelog_input
from txjoin.errors import ConfigError
from txjoin.spec import Options, build_spec, log_retention, machine_memory, memory


def _spec(tmp: Path, source: dict[str, Any], options: dict[str, Any] | None = None) -> Any:
    raw: dict[str, Any] = {
        "name": "s",
        "sources": {"shop": {"dsn": "host=x", "tables": ["public.t"], **source}},
        "outputs": {"o": {"key": ["id"], "sql": "SELECT t.id FROM t"}},
    }
    if options:
        raw["options"] = options
    return build_spec(raw, tmp, "test spec")


def test_snapshot_settings_reach_capture(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"snapshot_workers": 6, "snapshot_chunk_mb": 16})
    cfg = spec.sources["shop"].capture_config(tmp_path / "changelog")
    assert (cfg.snapshot_workers, cfg.snapshot_chunk_mb) == (6, 16)
    default = _spec(tmp_path, {}).sources["shop"].capture_config(tmp_path / "changelog")
    assert (default.snapshot_workers, default.snapshot_chunk_mb) == (2, 64)


@pytest.mark.parametrize("value", [0, -1, "4", True, 1.5])
def test_bad_snapshot_settings_are_refused_with_their_name(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError, match=r"\[sources\.shop\]: snapshot_workers must be a positive integer"):
        _spec(tmp_path, {"snapshot_workers": value})


def trigger_interval(spec: Any) -> str:
    """The trigger a pipeline of ``spec`` starts with (as ``Pipeline.start`` picks it)."""
    return changelog_input(spec).trigger(spec.options.trigger_interval)


def test_trigger_is_short_for_the_changelog_longer_for_listed_topic_files_unless_set(tmp_path: Path) -> None:
    # txjoin's changelog is read through its index; Debezium's topic files are listed per trigger.
    assert trigger_interval(_spec(tmp_path, {})) == "100 milliseconds"
    topics = {"format": "debezium", "topics": str(tmp_path / "topics")}
    assert trigger_interval(_spec(tmp_path, topics)) == "250 milliseconds"
    own = {"trigger_interval": "2 seconds"}
    assert trigger_interval(_spec(tmp_path, {}, own)) == "2 seconds"
    assert trigger_interval(_spec(tmp_path, topics, own)) == "2 seconds"


def test_memory_is_derived_within_bounds_unless_set() -> None:
    ram = machine_memory()
    m = memory(Options())
    driver_mb = int(m.driver.rstrip("m"))
    assert 1024 <= driver_mb <= 4096
    assert driver_mb == min(max(int(ram * 0.10 / 2**20), 1024), 4096)
    assert 16 << 20 <= m.batch_bytes <= 64 << 20
    assert 256 <= int(m.replica.removesuffix("MB")) <= 2048
    set_ = memory(Options(driver_memory="2g", replica_memory="300MB", max_batch_bytes=5 << 20))
    assert (set_.driver, set_.replica, set_.batch_bytes) == ("2g", "300MB", 5 << 20)


def test_running_out_of_memory_names_the_setting_to_raise() -> None:
    import duckdb

    from txjoin.join.replica import out_of_memory

    con = duckdb.connect(config={"memory_limit": "20MB", "threads": 1})
    try:
        con.sql("SELECT list(range) FROM range(50000000) GROUP BY range % 7").fetchall()
        raised: BaseException | None = None
    except duckdb.OutOfMemoryException as e:
        raised = e
    finally:
        con.close()
    assert raised is not None, "DuckDB did not run out of memory at 20MB"
    duck = out_of_memory(raised, replica_memory="20MB", batch_bytes=32 << 20)
    assert duck is not None
    assert "replica_memory is 20MB" in str(duck)
    assert "raise options.replica_memory" in str(duck)
    py = out_of_memory(MemoryError(), replica_memory="1GB", batch_bytes=32 << 20)
    assert py is not None
    assert "max_batch_bytes (now 32 MB)" in str(py)
    assert out_of_memory(ValueError("x"), replica_memory="1GB", batch_bytes=1) is None


def _raw(**extra: Any) -> dict[str, Any]:
    return {
        "name": "s",
        "sources": {"shop": {"dsn": "host=x", "tables": ["public.t"]}},
        "outputs": {"o": {"key": ["id"], "sql": "SELECT t.id FROM t"}},
        **extra,
    }


def test_spark_settings_come_from_the_spec_and_the_command_line(tmp_path: Path) -> None:
    from txjoin.cli.common import conf_pairs, option_pairs

    spark = {"master": "spark://m:7077", "executor_memory": "2g", "conf": {"spark.executor.cores": "2"}}
    spec = build_spec(_raw(spark=spark), tmp_path, "test spec")
    assert spec.spark.master == "spark://m:7077"
    merged = spec.spark.merged("local[3]", conf_pairs(["spark.sql.shuffle.partitions=7"]))
    assert merged.master == "local[3]"
    assert merged.executor_memory == "2g"
    assert merged.conf == {"spark.executor.cores": "2", "spark.sql.shuffle.partitions": "7"}
    assert build_spec(_raw(), tmp_path, "t").spark.master == ""  # local[spark_cores]
    with pytest.raises(ConfigError, match="not a Spark setting"):
        build_spec(_raw(spark={"conf": {"executor.cores": "2"}}), tmp_path, "test spec")
    with pytest.raises(ConfigError, match=r"write spark\.setting=value"):
        conf_pairs(["spark.x"])
    assert option_pairs(["distributed_rows=0", "idle_commit_interval=0.5"]) == {
        "distributed_rows": 0,
        "idle_commit_interval": 0.5,
    }
    with pytest.raises(ConfigError, match="takes a int"):
        option_pairs(["distributed_rows=many"])


def test_locations_take_file_uris_and_refuse_other_schemes(tmp_path: Path) -> None:
    raw = _raw(state_dir=f"file://{tmp_path}/st%20ate")
    raw["outputs"]["o"]["path"] = f"file://localhost{tmp_path}/out"
    spec = build_spec(raw, tmp_path, "test spec")
    assert spec.state_dir == tmp_path / "st ate"
    assert spec.outputs["o"].path == tmp_path / "out"
    with pytest.raises(ConfigError, match=r"state_dir: 's3://b/x': s3:// locations are not supported yet"):
        build_spec(_raw(state_dir="s3://b/x"), tmp_path, "test spec")


@pytest.mark.parametrize(
    ("given", "delta"),
    [
        ("10 minutes", "interval 10 minutes"),
        ("1 hour", "interval 1 hours"),
        ("interval 30 days", "interval 30 days"),
        (" 2 Weeks ", "interval 2 weeks"),
        ("45 second", "interval 45 seconds"),
    ],
)
def test_the_output_log_retention_reaches_delta_in_its_form(tmp_path: Path, given: str, delta: str) -> None:
    spec = _spec(tmp_path, {}, {"output_log_retention": given})
    assert log_retention(spec.options) == delta
    assert log_retention(_spec(tmp_path, {}).options) == "interval 10 minutes"


@pytest.mark.parametrize("value", ["", "10", "minutes", "0 minutes", "-1 hours", "1 month", "10 minutes ago"])
def test_a_bad_output_log_retention_is_refused_with_its_name(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"test spec: \[options\]: output_log_retention=.* is invalid: give a count"):
        _spec(tmp_path, {}, {"output_log_retention": value})
