"""``txjoin verify --version N`` (txjoin.verify.at_cut.verify_output) names why a version is missing."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.specs import write_spec
from txjoin.cut import Cut
from txjoin.errors import SinkError
from txjoin.sink.delta import DeltaRsStore
from txjoin.spec import load_spec
from txjoin.verify.at_cut import verify_output


def test_a_version_not_written_yet_is_not_blamed_on_the_log_retention(tmp_path: Path) -> None:
    spec = load_spec(write_spec(
        tmp_path / "spec.toml", name="v", state_dir=tmp_path / "state", source="s",
        dsn="postgresql://nobody@127.0.0.1:1/none", tables=["public.t"],
        outputs={"out": (["id"], "SELECT id, v FROM t")},
    ))  # fmt: skip
    store = DeltaRsStore()
    for batch in range(3):
        rows = pa.table({"id": pa.array([batch], pa.int64()), "v": ["x"]})
        store.replace_partitions(
            spec.outputs["out"].path, rows, key=["id"], partition_cols=["id"], partitions=None,
            cut={"s": Cut(batch)}, batch=batch, app_id="t",
        )  # fmt: skip
    with pytest.raises(SinkError, match=r"has no version 7: versions are 0\.\.2 \(it has not been written yet\)"):
        verify_output(spec, "out", 7, delta=store)
