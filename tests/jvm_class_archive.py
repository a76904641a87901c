"""One JVM class-data archive (AppCDS) of Spark's classes for every JVM the tests start.

A Spark driver's JVM spends most of a short run loading and verifying Spark's classes: a
spark-submit of a small job here took 15.4 CPU seconds, 9.0 with this archive (13.0 -> 7.4 s of
wall time), and the suite starts dozens of them (each job's spark-submit, the session's gateway,
the Spark Connect servers). The archive is a dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) dumped once per environment by a small streaming job like the ones
the tests run (:data:`JOB`), kept under the virtual environment, keyed by the java binary, the
pyspark install and this file, and built under a file lock (the xdist workers and the controller
each call :func:`jvm_options`; one builds, the others wait and reuse it).

A JVM whose class path differs from the archive's (another pyspark install, such as the wheel tests'
fresh environments) silently loads its classes as usual; this only changes how fast classes load,
never what a job computes. A team's runs never see it: only the tests set it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: C1 only: a test's JVM lives seconds to minutes on small data, and the C2 compiler's work never
#: pays back there (a spark-submit of a small job here: 23.5 -> 14.9 CPU seconds, the same result).
#: The serial collector: no parallel GC threads on 2 cores (another 6 % of a Spark test's CPU).
FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: The JVM's own notes on the archive (dumping skips signed jars, a mismatched class path) stay off
#: the drivers' output, which tests read.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")

#: The dumping job: file sources (CSV, JSON, Parquet), an event-time watermark, a windowed
#: aggregation in append mode to a Parquet sink, a deduplication within the watermark, foreachBatch,
#: a Python listener, availableNow and a restart from the checkpoint, and a batch read to pandas.
JOB = r'''
import json, sys
from pathlib import Path
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.streaming import StreamingQueryListener

root = Path(sys.argv[1])
spark = (SparkSession.builder.appName("class-archive").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())


class Listener(StreamingQueryListener):
    def onQueryStarted(self, event): pass
    def onQueryProgress(self, event): json.loads(event.progress.json)
    def onQueryIdle(self, event): pass
    def onQueryTerminated(self, event): pass


spark.streams.addListener(Listener())
schema = "key STRING, ts TIMESTAMP, value DOUBLE"
for name in ("csv", "json", "parquet"):
    (root / "in" / name).mkdir(parents=True)
rows = [("a", "2013-01-01 00:0%d:00" % i, float(i)) for i in range(6)]
frame = spark.createDataFrame(rows, "key STRING, ts STRING, value DOUBLE").withColumn("ts", F.to_timestamp("ts"))
for run in range(2):
    frame.write.mode("append").csv(str(root / "in" / "csv"), header=True)
    frame.write.mode("append").json(str(root / "in" / "json"))
    frame.write.mode("append").parquet(str(root / "in" / "parquet"))
    sources = [spark.readStream.schema(schema).option("header", True).csv(str(root / "in" / "csv")),
               spark.readStream.schema(schema).json(str(root / "in" / "json")),
               spark.readStream.schema(schema).parquet(str(root / "in" / "parquet"))]
    for index, source in enumerate(sources):
        watermarked = source.withWatermark("ts", "2 minutes")
        windows = watermarked.groupBy(F.window("ts", "1 minute"), "key").agg(F.count("*"), F.sum("value"))
        (windows.writeStream.outputMode("append").format("parquet").trigger(availableNow=True)
         .option("checkpointLocation", str(root / "cp" / f"w{index}")).start(str(root / "out" / f"w{index}"))
         .awaitTermination())
        (watermarked.dropDuplicatesWithinWatermark(["key", "ts"]).writeStream.outputMode("update")
         .foreachBatch(lambda batch, batch_id: batch.count()).trigger(availableNow=True)
         .option("checkpointLocation", str(root / "cp" / f"d{index}")).start().awaitTermination())
spark.read.parquet(str(root / "out" / "w0")).toPandas()
spark.stop()
'''


def _key() -> str:
    """What the archive depends on: the java binary the launcher runs, the pyspark install, this file."""
    import pyspark

    home = os.environ.get("JAVA_HOME")  # spark-submit's java: JAVA_HOME's, else the one on PATH
    java = os.path.realpath(shutil.which("java", path=os.path.join(home, "bin") if home else None) or "java")
    parts = [java, str(os.stat(java).st_mtime_ns) if os.path.exists(java) else "",
             str(Path(pyspark.__file__).parent / "jars"), pyspark.__version__,
             hashlib.sha256(Path(__file__).read_bytes()).hexdigest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _build(target: Path, log: Path) -> str | None:
    """Dump the archive to ``target`` by running :data:`JOB`; the reason when it could not be built."""
    spark_submit = Path(sys.executable).parent / "spark-submit"
    with tempfile.TemporaryDirectory(prefix="class-archive-") as work:
        script = Path(work) / "job.py"
        script.write_text(JOB)
        partial = target.with_suffix(".part")
        partial.unlink(missing_ok=True)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_SUBMIT_OPTS": " ".join((*FAST_START, *QUIET, f"-XX:ArchiveClassesAtExit={partial}"))}
        try:
            done = subprocess.run([str(spark_submit), "--master", "local[2]", "--conf", "spark.log.level=WARN",
                                   str(script), str(Path(work) / "data")], env=env, capture_output=True, text=True,
                                  timeout=600)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"the dumping job did not run: {error}"
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0 or not partial.exists() or not partial.stat().st_size:
            partial.unlink(missing_ok=True)
            return f"the dumping job exited {done.returncode} without an archive (its output: {log})"
        os.replace(partial, target)
    return None


def jvm_options(folder: Path | None = None) -> tuple[str, str]:
    """The ``SPARK_SUBMIT_OPTS`` for the tests' JVMs and a line for pytest's header.

    Builds the archive first when this environment has none (about 40 s, once), under a lock on
    ``folder/.lock`` (default: ``<venv>/spark-class-archive``). Without an archive (the build
    failed, e.g. no JDK with CDS), the options are :data:`FAST_START` alone and the line says why.
    """
    folder = folder or Path(sys.prefix) / "spark-class-archive"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{_key()}.jsa"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            problem, note = None, f"reused {target}"
        else:
            started = time.monotonic()
            problem = _build(target, folder / "build.log")
            # An archive of another key (an older pyspark, java or this file) is never read again:
            # about 180 MB each. A JVM still mapping one keeps its pages until it exits.
            for stale in folder.glob("*.jsa"):
                if stale != target:
                    stale.unlink()
            note = f"built {target} in {time.monotonic() - started:.0f} s"
    if problem:
        return " ".join(FAST_START), f"JVM class-data archive: none ({problem})"
    return " ".join((*FAST_START, *QUIET, f"-XX:SharedArchiveFile={target}")), f"JVM class-data archive: {note}"
