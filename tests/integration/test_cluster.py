"""The pizzeria scenario on a real Spark standalone cluster (issue [6 of 7]).

A master and two workers run in processes of their own on loopback, started
from the pyspark installation; ``txjoin scenario run pizzeria --master
spark://...`` runs in another process, so nothing shares the driver's
process but what a cluster shares: the changelog, the state directory and
the output tables on the (here local) filesystem. txjoin's code reaches the
executors as a zip (``spark.submit.pyFiles``). With ``distributed_rows=0``
the initial load of every output is the distributed job of [2 of 7]; the
event log shows its tasks ran on both executors.

About two minutes, so it runs in ``make test-thorough`` (``TXJOIN_THOROUGH=1``)::

    TXJOIN_THOROUGH=1 .venv/bin/python -m pytest -q tests/integration/test_cluster.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import standalone_cluster
from tests.support.profiles import THOROUGH
from txjoin.pg.embedded import EmbeddedPostgres

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.spark,
    pytest.mark.skipif(not THOROUGH, reason="about two minutes: make test-thorough runs it"),
]


def _executors(event_dir: Path) -> set[str]:
    """Executor ids that ran tasks, from Spark's event logs."""
    ids: set[str] = set()
    for log in (p for p in event_dir.rglob("*") if p.is_file()):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                ids.add(str(event["Task Info"]["Executor ID"]))
    return ids


def test_pizzeria_on_a_standalone_cluster(pg_server: EmbeddedPostgres, tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    with standalone_cluster(tmp_path / "cluster", workers=2) as cluster:
        done = subprocess.run(
            [
                sys.executable, "-m", "txjoin.cli", "scenario", "run", "pizzeria",
                "--txs", "60", "--json", "--home", str(tmp_path / "home"),
                "--dsn", pg_server.dsn(),
                "--master", cluster.master_url,
                "--option", "distributed_rows=0",
                "--conf", "spark.eventLog.enabled=true",
                "--conf", "spark.eventLog.compress=false",
                "--conf", "spark.eventLog.rolling.enabled=false",
                "--conf", f"spark.eventLog.dir=file://{events}",
                "--conf", "spark.executor.memory=768m",
            ],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        state = cluster.state()
        apps = [*state.get("activeapps", []), *state.get("completedapps", [])]  # type: ignore[misc]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert report["violations"] == [], report["violations"]
    assert sum(report["versions_checked"].values()) > 0
    assert isinstance(apps, list)
    assert apps, "the scenario's application ran on the cluster"
    ran_on = _executors(events)
    assert {"0", "1"} <= ran_on, f"tasks ran on executors {ran_on}"
    assert "driver" not in ran_on
    # The initial load went through the distributed recompute: Spark wrote the files.
    out = Path(report["outputs"]["orders_enriched"])
    assert list(out.glob("txjoin-*/*.parquet")), "no files written by the distributed recompute"
