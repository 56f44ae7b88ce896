"""The Spark session txjoin runs in: local by default, quiet, RocksDB state.

Spark's own log output is limited to errors (``log4j2.properties`` shipped
with the package) and the console progress bar is off, so users see
txjoin's messages, not Java's. ``TXJOIN_SPARK_VERBOSE=1`` restores Spark's
warnings when debugging.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from typing import Any

from txjoin.errors import MissingDependency, SparkDied

__all__ = ["jvm_died", "jvm_exit_code", "spark_session"]


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


def spark_session(
    app_name: str = "txjoin",
    *,
    cores: int = 2,
    driver_memory: str = "4g",
    conf: dict[str, str] | None = None,
) -> Any:
    """Get or create the local Spark session configured for txjoin."""
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
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
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
    settings.update(conf or {})
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if os.environ.get("TXJOIN_SPARK_VERBOSE") == "1" else "ERROR")
    return spark


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
    return SparkDied(
        f"Spark's driver process exited with code {code} (see its output above); the pipeline resumes "
        "from its last committed batch when started again",
        exit_code=code,
    )
