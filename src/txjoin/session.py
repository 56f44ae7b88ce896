"""The Spark session txjoin runs in: local by default or any master, quiet, RocksDB state.

On a cluster (a master other than ``local[...]``) txjoin's own code is
shipped to the executors as a zip of the installed package
(``spark.submit.pyFiles``); the executors' Python needs txjoin's
dependencies (pandas, pyarrow) installed.

Spark's own log output is limited to errors (``log4j2.properties`` shipped
with the package) and the console progress bar is off, so users see
txjoin's messages, not Java's. ``TXJOIN_SPARK_VERBOSE=1`` restores Spark's
warnings when debugging.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from txjoin.errors import MissingDependency, SparkDied

__all__ = ["jvm_died", "jvm_exit_code", "package_zip", "spark_session"]


def _java_ok() -> None:
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise MissingDependency(
            "Spark needs a Java 17 or 21 runtime and none was found: install Debian's "
            "openjdk-17-jre-headless (apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME",
            package="openjdk-17-jre-headless",
        )


def package_zip(target_dir: Path) -> Path:
    """A zip of the installed txjoin package (Python files and resources) for executors."""
    package = Path(str(resources.files("txjoin")))
    target_dir.mkdir(parents=True, exist_ok=True)
    out = target_dir / "txjoin.zip"
    tmp = target_dir / ".txjoin.zip.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(package.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, Path("txjoin") / f.relative_to(package))
    os.replace(tmp, out)
    return out


def spark_session(
    app_name: str = "txjoin",
    *,
    cores: int = 2,
    driver_memory: str = "4g",
    conf: dict[str, str] | None = None,
    master: str = "",
    executor_memory: str = "",
) -> Any:
    """Get or create the Spark session configured for txjoin (``master`` default: ``local[cores]``)."""
    _java_ok()
    # Python workers must run the interpreter that has txjoin and pandas.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    log4j = str(resources.files("txjoin") / "log4j2.properties")
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    if os.environ.get("TXJOIN_SPARK_VERBOSE") == "1":
        java_opts = ""
    # Java's regex engine recurses per character; Spark runs regexes over plan
    # strings that hold a recompute's rows, which overflows the default stack.
    java_opts += " -Xss32m"
    # An OutOfMemoryError in any thread ends the JVM (exit code 3) rather than leaving a query
    # stuck without its result thread; txjoin then reports it (txjoin.pipeline).
    java_opts += " -XX:+ExitOnOutOfMemoryError"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.shuffle.partitions": str(max(1, cores)),
        "spark.default.parallelism": str(max(1, cores)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # The checkpoint is always a local directory (state_dir): Hadoop's FileSystem API writes the
        # same temp file and (atomic, POSIX) rename as the default FileContext one, without its
        # per-call overhead. One-row batches (bench.fixed_cost): walCommit 0.035-0.049 -> 0.010-0.013 s,
        # latestOffset 0.044-0.053 -> 0.014-0.018 s, commitOffsets 0.033-0.046 -> 0.010 s.
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
        ),
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        # Each batch's commit writes the state's changes, not a RocksDB snapshot (snapshots are
        # taken in the background): one-row batches 1.02 -> 0.96 s commit to visible (bench.fixed_cost).
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # PostgreSQL's timestamp has no time zone: naive Arrow timestamps become
        # TIMESTAMP_NTZ, as do TIMESTAMP literals and casts in translated SQL.
        "spark.sql.timestampType": "TIMESTAMP_NTZ",
        # Decimal arithmetic keeps every fractional digit (or fails), never rounds silently.
        "spark.sql.decimalOperations.allowPrecisionLoss": "false",
        # Full recomputes write Parquet that Delta readers take as is: microsecond timestamps.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Capture trims old heartbeat segments; a listed-then-deleted one is harmless.
        "spark.sql.files.ignoreMissingFiles": "true",
        # PostgreSQL json_build_object keeps null fields; so must to_json.
        "spark.sql.jsonGenerator.ignoreNullFields": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # Small local batches: code generation costs more than it saves.
        "spark.sql.codegen.wholeStage": "false",
        # A micro-batch's new changelog files are each a root path of the
        # batch's file index; above this many, Spark lists them with a
        # distributed job (seconds for a few hundred files on 2 cores).
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    }
    master = master or f"local[{cores}]"
    if executor_memory:
        settings["spark.executor.memory"] = executor_memory
    if not master.startswith("local"):
        ship = package_zip(Path(tempfile.gettempdir()) / f"txjoin-{os.getpid()}")
        settings["spark.submit.pyFiles"] = str(ship)
        # Executors' Python: the driver's interpreter path unless the settings name another.
        settings.setdefault("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    with _python_home():
        if os.environ.get("TXJOIN_SPARK_VERBOSE") != "1":
            _quiet_gateway(master, app_name, settings)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if os.environ.get("TXJOIN_SPARK_VERBOSE") == "1" else "ERROR")
    return spark


@contextlib.contextmanager
def _python_home() -> Iterator[None]:
    """Launch the driver JVM with a SPARK_HOME whose Python workers import PySpark from
    site-packages (compiled once, at install) rather than from ``python/lib/pyspark.zip``,
    which Spark puts first on their PYTHONPATH and which Python compiles afresh in every
    process. A streaming query of txjoin's changelog source starts such a process; from the
    zip its imports took 0.7 s of the 1.1 s to its first trigger. A SPARK_HOME the user set
    to another Spark is kept."""
    import pyspark

    package = Path(pyspark.__file__).parent
    before = os.environ.get("SPARK_HOME")
    if before not in (None, str(package)) or not (package / "jars").is_dir():
        yield
        return
    os.environ["SPARK_HOME"] = str(_shadow_home(package, str(pyspark.__version__)))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = before


def _shadow_home(package: Path, version: str) -> Path:
    """A directory of links to the installed PySpark's entries, all but ``python``. It lives in
    the user's cache, not /tmp: the JVM opens its jars through it as it runs, for months, and
    /tmp cleaners remove what they see unused."""
    tag = hashlib.sha256(f"{package}:{version}".encode()).hexdigest()[:12]
    home = _cache_dir() / f"spark-home-{os.getuid()}-{tag}"
    if home.is_dir():
        return home
    tmp = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    for entry in package.iterdir():
        if entry.name != "python":
            (tmp / entry.name).symlink_to(entry)
    try:
        tmp.rename(home)
    except OSError:  # another process made it first
        for link in tmp.iterdir():
            link.unlink()
        tmp.rmdir()
    return home


def _cache_dir() -> Path:
    """txjoin's directory in the user's cache (XDG), or the temp directory if that is not writable."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "txjoin"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        return Path(tempfile.gettempdir())
    return base if os.access(base, os.W_OK) else Path(tempfile.gettempdir())


#: Where the driver JVM's own output goes (None: the terminal, TXJOIN_SPARK_VERBOSE=1).
SPARK_LOG: list[Path] = []


def _quiet_gateway(master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start Spark's driver JVM with its stdout and stderr in a file: Java's banner
    ('Using incubator modules'), log4j's start-up line and shutdown noise stay off the
    terminal; txjoin reports what matters in its own words."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    path = Path(tempfile.gettempdir()) / f"txjoin-spark-{os.getpid()}.log"
    out = open(path, "ab")  # noqa: SIM115 (the JVM writes it until it exits)
    gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)  # a builder below reuses this JVM
    SPARK_LOG[:] = [path]


def jvm_exit_code(spark: Any) -> int | None:
    """The exit code of the Spark driver JVM this process started, or None while it runs."""
    gateway = getattr(getattr(spark, "sparkContext", None), "_gateway", None)
    proc = getattr(gateway, "proc", None)
    code = None if proc is None else proc.poll()
    return None if code is None else int(code)


def jvm_died(code: int, *, driver_memory: str, batch_bytes: int) -> SparkDied:
    """The error to report when Spark's driver JVM exited with ``code``."""
    if code == 3:  # -XX:+ExitOnOutOfMemoryError
        return SparkDied(
            f"Spark's driver ran out of memory (Java heap; driver_memory is {driver_memory}): raise "
            "options.driver_memory in the pipeline spec, or lower options.max_batch_bytes (now "
            f"{batch_bytes >> 20} MB); the pipeline resumes from its last committed batch",
            exit_code=code,
            setting="driver_memory",
        )
    where = f"its output is in {SPARK_LOG[0]}" if SPARK_LOG else "see its output above"
    return SparkDied(
        f"Spark's driver process exited with code {code} ({where}); the pipeline resumes "
        "from its last committed batch when started again",
        exit_code=code,
    )
