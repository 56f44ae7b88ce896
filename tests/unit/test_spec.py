"""Spec settings for real sizes: snapshot parallelism per source, memory derived from the machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from txjoin.errors import ConfigError
from txjoin.spec import Options, build_spec, machine_memory, memory


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


def test_memory_is_derived_within_bounds_unless_set() -> None:
    ram = machine_memory()
    m = memory(Options())
    driver_mb = int(m.driver.rstrip("m"))
    assert 1024 <= driver_mb <= 4096
    assert driver_mb == min(max(int(ram * 0.15 / 2**20), 1024), 4096)
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
