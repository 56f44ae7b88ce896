"""A Spark standalone cluster on loopback: one master and N workers, started from the
pyspark installation (``bin/spark-class``), each in its own process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    master_url: str
    ui_url: str
    work_dir: Path

    def state(self) -> dict[str, object]:
        with urllib.request.urlopen(self.ui_url + "/json/", timeout=5) as r:
            data: dict[str, object] = json.loads(r.read())
            return data


@contextmanager
def standalone_cluster(root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[Cluster]:
    """Start the cluster, wait until every worker registered, stop every process on exit."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    spark_class = str(home / "bin" / "spark-class")
    port, ui = _free_port(), _free_port()
    root.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> None:
        out = open(root / log, "wb")  # noqa: SIM115 (the process writes it)
        procs.append(
            subprocess.Popen([spark_class, *args], env=env, stdout=out, stderr=out, start_new_session=True)
        )

    master = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", root / "work")
    try:
        start(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui)],
            "master.log",
        )  # fmt: skip
        for i in range(workers):
            start(
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
                 "--memory", memory, "--webui-port", str(_free_port()), "--work-dir",
                 str(master.work_dir / f"w{i}"), master.master_url],
                f"worker{i}.log",
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            for p in procs:
                assert p.poll() is None, (root / "master.log").read_text()[-2000:]
            try:
                alive = master.state().get("aliveworkers")
            except OSError:
                alive = 0
            if alive == workers:
                break
            assert time.monotonic() < deadline, f"{alive} of {workers} workers registered in 90 s"
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
