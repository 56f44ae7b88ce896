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

import atexit
import contextlib
import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from txjoin.errors import ConfigError, MissingDependency, SparkDied
from txjoin.pg._watchdog import pid_alive

__all__ = [
    "JVM_EXIT_WAIT",
    "SHORT_LIVED_JIT",
    "check_jvm",
    "jvm_connection_lost",
    "jvm_died",
    "jvm_exit_code",
    "launch_java_options",
    "package_zip",
    "process_exit_code",
    "spark_session",
    "write_class_archive",
]


def _java_ok() -> str:
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise MissingDependency(
            "Spark needs a Java 17 or 21 runtime and none was found: install Debian's "
            "openjdk-17-jre-headless (apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME",
            package="openjdk-17-jre-headless",
        )
    return os.path.realpath(java)


#: The JIT of a JVM that lives seconds to minutes over small data (``spark_session(short_lived=True)``:
#: ``txjoin scenario run``, ``txjoin check``): C1 only. C2's compiler threads otherwise take the
#: cores such a run waits on (``txjoin scenario run pizzeria``, alternating: p50 3.60 and 4.27 s
#: against 6.32 and 6.80 s). Pipelines keep both tiers: C2 decodes JSON twice as fast once warm
#: (bench/NOTES.md). ``TXJOIN_SPARK_JAVA_OPTIONS`` comes after it, so it can set another level.
#: C1 alone gets a 48 MB code cache, not 240: Spark's generated classes filled it in the suite's
#: sessions ("CodeCache is full. Compiler has been disabled"), and once the JVM died of it ("Out of
#: space in CodeCache for method handle intrinsic"). Reserved, not committed: used as compiled.
SHORT_LIVED_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def launch_java_options(java: str, *, short_lived: bool = False) -> str:
    """JVM options txjoin adds when it launches Spark's driver: :data:`SHORT_LIVED_JIT` for a
    short-lived session, then ``TXJOIN_SPARK_JAVA_OPTIONS`` (which win, coming last)."""
    return (f" {SHORT_LIVED_JIT}" if short_lived else "") + _extra_java_options(java)


def _extra_java_options(java: str) -> str:
    """``TXJOIN_SPARK_JAVA_OPTIONS``: more options for the driver's and executors' JVMs (GC or
    JIT tuning; ``make test`` uses C1 only, see the Makefile). Tried with ``java -version``
    first, so a bad one is named here rather than as a gateway that did not start."""
    extra = os.environ.get("TXJOIN_SPARK_JAVA_OPTIONS", "").strip()
    if not extra:
        return ""
    r = subprocess.run([java, *shlex.split(extra), "-version"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        said = (r.stderr or r.stdout).strip().splitlines()
        raise ConfigError(
            f"TXJOIN_SPARK_JAVA_OPTIONS={extra!r}: {java} does not start with these options "
            f"({said[0] if said else f'exit code {r.returncode}'}): correct or unset the variable"
        )
    return " " + extra


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
    short_lived: bool = False,
) -> Any:
    """Get or create the Spark session configured for txjoin (``master`` default: ``local[cores]``).
    ``short_lived``: a run of seconds to minutes over small data, whose JVM compiles with C1 only
    (:data:`SHORT_LIVED_JIT`); it applies when this call launches the JVM."""
    java = _java_ok()
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
    from pyspark import SparkContext

    launching = SparkContext._gateway is None  # else getOrCreate reuses the running JVM
    if launching:  # only a JVM about to start needs its options tried
        java_opts += launch_java_options(java, short_lived=short_lived)
    archive = _class_archive(java) if launching else None
    writing = None if archive is None else _archive_lock(archive)
    if archive is not None:
        java_opts += _archive_option(archive, writing)
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
        # Widening two decimals past 38 digits (coalesce, comparison) keeps their fraction digits
        # (a value that does not fit fails), where Spark 4 drops them: 1.2345 became 1.23.
        "spark.sql.legacy.decimal.retainFractionDigitsOnTruncate": "true",
        # Full recomputes write Parquet that Delta readers take as is: microsecond timestamps.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Capture trims old heartbeat segments; a listed-then-deleted one is harmless.
        "spark.sql.files.ignoreMissingFiles": "true",
        # '${x}' in an output's string constant is text to PostgreSQL; Spark would substitute
        # variables, settings and environment variables into it (and publish them).
        "spark.sql.variable.substitute": "false",
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
        try:
            if os.environ.get("TXJOIN_SPARK_VERBOSE") != "1":
                _quiet_gateway(master, app_name, settings)
            spark = builder.getOrCreate()
        except Exception:
            if writing is not None:
                writing.unlink(missing_ok=True)
            elif archive is not None:  # in case it kept the JVM from starting: written afresh later
                archive.unlink(missing_ok=True)
            raise
    if archive is not None and writing is not None:
        gateway: Any = spark.sparkContext._gateway
        _finish_archive_at_exit(gateway.proc, java, archive, writing)
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
    home = _spark_home()
    if home is None:
        yield
        return
    before = os.environ.get("SPARK_HOME")
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = before


def _spark_home() -> Path | None:
    """The SPARK_HOME txjoin launches the driver with (None: the one the user set, or PySpark's
    own where no cache directory is this user's alone)."""
    import pyspark

    package = Path(pyspark.__file__).parent
    if os.environ.get("SPARK_HOME") not in (None, str(package)) or not (package / "jars").is_dir():
        return None
    return _shadow_home(package, str(pyspark.__version__))


#: What Spark's launcher and JVMs read from SPARK_HOME (``conf``, the user's settings, is linked).
_HOME_DIRS = ("bin", "jars", "sbin")


def _shadow_home(package: Path, version: str) -> Path | None:
    """PySpark's ``bin``, ``jars`` and ``sbin``, hard-linked into the user's cache under a name
    taken from their contents, so every install of the same PySpark (each checkout's venv)
    launches from the same paths and shares one class archive (:func:`_class_archive`), and the
    home outlives the install that made it. It lives in the cache, not /tmp: the JVM opens its
    jars through it as it runs, for months, and /tmp cleaners remove what they see unused. Where
    hard links fail (another file system), it is a directory of symbolic links for this install."""
    files = sorted(f for d in _HOME_DIRS for f in (package / d).rglob("*") if f.is_file())
    listing = [(str(f.relative_to(package)), f.stat().st_size) for f in files]
    tag = hashlib.sha256(f"{version}:{listing}".encode()).hexdigest()[:12]
    if (package / "conf").exists():
        # spark-defaults.conf, spark-env.sh, log4j2.properties of this install: a shared home
        # would not read them (the linked home does).
        return _linked_home(package, version)
    cache = _cache_dir()
    if cache is None:
        return None
    home = cache / f"spark-home-{os.getuid()}-{tag}"
    if home.is_dir():
        return home
    tmp = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    try:
        for d in _HOME_DIRS:
            if (package / d).is_dir():
                shutil.copytree(package / d, tmp / d, symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error):
        shutil.rmtree(tmp, ignore_errors=True)
        return _linked_home(package, version)
    _put_in_place(tmp, home)
    return home


def _linked_home(package: Path, version: str) -> Path | None:
    """A directory of symbolic links to ``package``'s entries, all but ``python``."""
    tag = hashlib.sha256(f"{package}:{version}".encode()).hexdigest()[:12]
    cache = _cache_dir()
    if cache is None:
        return None
    home = cache / f"spark-home-{os.getuid()}-{tag}"
    if home.is_dir():
        return home
    tmp = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    for entry in package.iterdir():
        if entry.name != "python":
            (tmp / entry.name).symlink_to(entry)
    _put_in_place(tmp, home)
    return home


def _put_in_place(tmp: Path, home: Path) -> None:
    try:
        tmp.rename(home)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)


def _cache_dir() -> Path | None:
    """txjoin's directory in the user's cache (XDG), or ``txjoin-<uid>`` in the temp directory if
    that is not writable; None if neither is this user's alone. Spark is launched from what is
    found there, so a directory another user could write would let them run code as this one."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "txjoin"
    with contextlib.suppress(OSError):
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    private = Path(tempfile.gettempdir()) / f"txjoin-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            private.mkdir(mode=0o700)
        st = os.lstat(private)
    except OSError:  # no usable temp directory either
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # a symbolic link, or someone else's: no shared home, no class archive
    return private


def _class_archive(java: str) -> Path | None:
    """The driver JVM's class data sharing archive for this PySpark and Java (None: turned off
    by ``TXJOIN_SPARK_CDS=0``). Spark's driver loads and verifies some 20,000 classes from its
    jars at every start; from the archive they are mapped ready-made. A restart of ``txjoin
    run`` reached its first batch 7-8 s sooner (25 against 33 s; bench/NOTES.md). The JVM checks
    the archive against its own version and class path and starts without it on a mismatch."""
    if os.environ.get("TXJOIN_SPARK_CDS", "1") == "0":
        return None
    import pyspark

    st = os.stat(java)
    # The class path's jars are under the home the driver launches from.
    home = _spark_home() or Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    key = f"{home}:{pyspark.__version__}:{java}:{st.st_size}:{st.st_mtime_ns}"
    cache = _cache_dir()
    if cache is None:
        return None
    return cache / f"spark-classes-{os.getuid()}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa"


def _archive_lock(archive: Path) -> Path | None:
    """The lock file, if this process is to write ``archive`` (missing, and no live process
    writing it): one writer at a time, since each archive is about 180 MB."""
    if archive.is_file():
        return None
    lock = archive.with_name(archive.name + ".lock")
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid, age = int(lock.read_text() or 0), time.time() - lock.stat().st_mtime
            except (OSError, ValueError):
                pid, age = 0, 0.0
            if (pid and pid_alive(pid)) or (not pid and age < 60):  # being written, or just locked
                return None
            lock.unlink(missing_ok=True)
            continue
        except OSError:
            return None
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        # Half-written archives of writers that died, with or without their lock (a writer
        # killed by SIGTERM was seen to leave one without): about 180 MB each.
        for stale in lock.parent.glob(archive.name + ".*.tmp"):
            writer = stale.name[len(archive.name) + 1 : -len(".tmp")]
            if not (writer.isdigit() and pid_alive(int(writer))):
                stale.unlink(missing_ok=True)
        return lock
    return None


def _archive_option(archive: Path, lock: Path | None) -> str:
    if lock is None:
        return f" -XX:SharedArchiveFile={archive}" if archive.is_file() else ""
    return f" -XX:ArchiveClassesAtExit={_archive_tmp(archive)}"


def _archive_tmp(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.{os.getpid()}.tmp")


def _archive_loads(java: str, archive: Path) -> bool:
    """Whether a JVM starts with ``archive``: Java 17 crashes on a damaged one rather than
    starting without it, so only an archive that passed this is put in place."""
    quiet = ["-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash"]  # its crash leaves no files
    check = [java, *quiet, f"-XX:SharedArchiveFile={archive}", "-version"]
    return subprocess.run(check, capture_output=True, timeout=60).returncode == 0


def _stop_spark_context() -> None:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        sc.stop()


#: What :func:`finish_class_archive` still has to do.
_finishers: list[Callable[[], None]] = []


def finish_class_archive() -> None:
    """Put in place the class archive a session of this process is writing (waiting for its
    JVM to exit and write it). Runs at exit; a program that leaves by ``os._exit``, which skips
    that, calls it first (the ``txjoin`` command does)."""
    while _finishers:
        _finishers.pop()()


def _finish_archive_at_exit(proc: Any, java: str, archive: Path, lock: Path) -> None:
    """When this process exits, let the driver JVM exit and write the classes it loaded, then
    put the archive in place: only a JVM that exited normally wrote a whole one."""

    def finish() -> None:
        from py4j.protocol import Py4JError

        tmp = _archive_tmp(archive)
        try:
            if proc.poll() is None and proc.stdin is not None:
                sys.stderr.write(f"txjoin: saving Spark's classes to {archive} for faster starts (once)\n")
                _stop_spark_context()  # else PySpark's accumulator server prints the JVM's exit
                proc.stdin.close()  # Spark's gateway exits at end of input
                proc.wait(timeout=120)
            if proc.returncode == 0 and tmp.is_file() and _archive_loads(java, tmp):
                os.replace(tmp, archive)
        except (OSError, subprocess.TimeoutExpired, Py4JError) as e:  # a cache: the next start writes it
            sys.stderr.write(f"txjoin: Spark's class archive {archive} was not written: {e}\n")
        finally:
            tmp.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)

    if not _finishers:
        atexit.register(finish_class_archive)
    _finishers.append(finish)


def write_class_archive() -> Path | None:
    """Write the driver JVM's class archive (:func:`_class_archive`) if it is missing: a session
    that runs Spark SQL over Arrow views and a stateful streaming query, as a pipeline does,
    then exits. ``make setup`` runs it (``python -m txjoin.session``); otherwise the first
    session of a process that finds none writes it as it exits."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    archive = _class_archive(_java_ok())
    if archive is None or archive.is_file():
        return archive
    spark = spark_session("txjoin-class-archive", cores=1)
    a = pa.table({"id": [1, 2], "k": [1, 1], "v": [1.5, None]})
    spark.createDataFrame(a).createOrReplaceTempView("a")
    spark.createDataFrame(pa.table({"k": [1], "name": ["x"]})).createOrReplaceTempView("b")
    spark.sql(
        "SELECT b.name, count(a.id) AS n, sum(a.v) AS v, max(CAST(a.v AS decimal(20, 4))) AS d "
        "FROM b LEFT JOIN a ON a.k = b.k WHERE b.name LIKE 'x%' GROUP BY b.name ORDER BY b.name"
    ).toArrow()

    def count(key: Any, frames: Any, state: Any) -> Any:
        n = sum(len(f) for f in frames) + (state.get[0] if state.exists else 0)
        state.update((n,))
        yield pd.DataFrame({"k": [str(key[0])], "n": [n]})

    batches: list[int] = []
    rows = spark.readStream.format("rate").option("rowsPerSecond", 10).option("numPartitions", 1).load()
    stream = (
        rows.withColumn("k", F.lit("s"))
        .groupBy("k")
        .applyInPandasWithState(count, "k string, n long", "n long", "append", GroupStateTimeout.NoTimeout)
    )
    with tempfile.TemporaryDirectory(prefix="txjoin-class-archive-") as d:
        query = (
            stream.writeStream.foreachBatch(lambda df, i: batches.append(len(df.toPandas())))
            .option("checkpointLocation", d)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 120
        while len(batches) < 3 and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
    spark.stop()
    return archive


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


#: How long a call that lost its connection to Spark's JVM waits for the JVM's exit code: a
#: killed JVM's socket can close before the process can be reaped (its threads still exiting).
JVM_EXIT_WAIT = 10.0


def jvm_exit_code(spark: Any, wait: float = 0.0) -> int | None:
    """The exit code of the Spark driver JVM this process started, or None while it runs
    (after waiting up to ``wait`` seconds for it to exit)."""
    gateway = getattr(getattr(spark, "sparkContext", None), "_gateway", None)
    proc = getattr(gateway, "proc", None)
    return None if proc is None else process_exit_code(proc, wait)


def process_exit_code(proc: subprocess.Popen[Any], wait: float = 0.0) -> int | None:
    """``proc``'s exit code, or None if it still runs after ``wait`` seconds."""
    try:
        code = proc.wait(wait) if wait > 0 else proc.poll()
    except subprocess.TimeoutExpired:
        return None
    return None if code is None else int(code)


def jvm_connection_lost(e: BaseException) -> bool:
    """Whether ``e`` is a call to Spark's JVM failing because its connection went away."""
    from py4j.protocol import Py4JNetworkError

    return isinstance(e, (Py4JNetworkError, ConnectionError, EOFError))


def check_jvm(
    spark: Any, *, driver_memory: str, batch_bytes: int, cause: BaseException | None = None
) -> None:
    """Raise :class:`SparkDied` if Spark's driver JVM exited. After a call to it failed
    (``cause``) for want of a connection, wait for the JVM to finish exiting first."""
    lost = cause is not None and jvm_connection_lost(cause)
    code = jvm_exit_code(spark, wait=JVM_EXIT_WAIT if lost else 0.0)
    if code is not None:
        raise jvm_died(code, driver_memory=driver_memory, batch_bytes=batch_bytes) from cause


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


if __name__ == "__main__":
    path = _class_archive(_java_ok())
    if path is not None and not path.is_file():
        print(f"txjoin: writing Spark's class archive {path} (once, about a minute)", flush=True)
        write_class_archive()
