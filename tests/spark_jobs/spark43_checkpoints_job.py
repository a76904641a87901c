"""Real pyspark 4.3 checkpoints of Spark 4.2/4.3's newest features, made in one JVM (local[2]).

Run by ``tests/spark_jobs/test_spark43_checkpoints.py`` with the python of the release venv
(``tests.release_venvs``): ``python spark43_checkpoints_job.py ROOT``. Imports nothing of
watermark-ops. Every query is a window count of JSON rows ``{"k", "ts"}`` (5 s windows, 10 s delay,
append, availableNow); each run is a real restart of the query from its checkpoint. Before a
restart whose outcome a test compares with a preflight, the folder is copied to
``ROOT/before/<name>``: the very folder Spark then restarted from. ``ROOT/results.json`` holds
each run's outcome: ``"ok"`` or the error text Spark raised.
"""

import json
import os
import shutil
import sys

from pyspark.sql import SparkSession, functions as F

root = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").appName("spark43 checkpoints")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
results = {}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def land(folder, number, key, seconds):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"part-{number}.json"), "w") as out:
        for s in seconds:
            out.write(json.dumps({"k": key, "ts": f"2024-01-01 00:00:{s:02d}"}) + "\n")


def run(name, checkpoint, sources, conf=None):
    """One availableNow run over ``sources`` ((name or None, folder)); the outcome in results."""
    conf = dict(conf or {})
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        frames = []
        for source_name, folder in sources:
            reader = spark.readStream.schema("k STRING, ts TIMESTAMP")
            if source_name:
                reader = reader.name(source_name)
            frames.append(reader.json(folder))
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.unionByName(frame)
        query = (rows.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "5 seconds"), "k").count()
                 .writeStream.format("json").outputMode("append").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(checkpoint + "_out"))
        query.awaitTermination()
        results[name] = "ok"
    except Exception as exc:  # the outcome is the test's evidence
        results[name] = f"{type(exc).__name__}: {exc}"[:4000]
    finally:
        for key in conf:
            spark.conf.unset(key)


def before(name, checkpoint):
    shutil.copytree(checkpoint, os.path.join(root, "before", name))


def data(folder, run_number, key):
    land(folder, run_number, key, [run_number * 20 + s for s in (1, 3, 7)])


# (a) named sources, offset log v2: two sources, then a third added on restart, then one removed
named = os.path.join(root, "named")
evolve = {"spark.sql.streaming.offsetLog.formatVersion": "2",
          "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true"}
folders = {n: os.path.join(root, "in_" + n) for n in ("src_a", "src_b", "src_c")}
data(folders["src_a"], 0, "a"); data(folders["src_b"], 0, "b")
run("named_1", named, [("src_a", folders["src_a"]), ("src_b", folders["src_b"])], evolve)
data(folders["src_a"], 1, "a"); data(folders["src_c"], 1, "c")
run("named_2_added", named, [("src_a", folders["src_a"]), ("src_b", folders["src_b"]), ("src_c", folders["src_c"])],
    evolve)
data(folders["src_a"], 2, "a"); data(folders["src_c"], 2, "c")
run("named_3_removed", named, [("src_a", folders["src_a"]), ("src_c", folders["src_c"])], evolve)

# (b) repartition: RocksDB (works), HDFS (fails, then every restart fails)
for provider, label in ((ROCKSDB, "rocks"), (HDFS, "hdfs")):
    checkpoint, folder = os.path.join(root, label), os.path.join(root, "in_" + label)
    for number in range(2):
        data(folder, number, label)
        run(f"{label}_{number + 1}", checkpoint, [(None, folder)], {"spark.sql.streaming.stateStore.providerClass": provider})
    try:
        spark._streamingCheckpointManager.repartition(checkpoint, 4)
        results[f"{label}_repartition"] = "ok"
    except Exception as exc:
        results[f"{label}_repartition"] = f"{type(exc).__name__}: {exc}"[:4000]
    data(folder, 2, label)
    before(label, checkpoint)
    run(f"{label}_3", checkpoint, [(None, folder)])
    if label == "hdfs":  # the way out preflight gives: remove the failed repartition's offsets file
        fixed = os.path.join(root, "hdfs_fixed")
        shutil.copytree(checkpoint, fixed)
        head = max(int(n) for n in os.listdir(os.path.join(fixed, "offsets")) if n.isdigit())
        for name in (str(head), f".{head}.crc"):
            path = os.path.join(fixed, "offsets", name)
            if os.path.exists(path):
                os.remove(path)
        run("hdfs_fixed", fixed, [(None, folder)])

# (c) a new query id over the same history: metadata deleted, the check turned off
qid, folder = os.path.join(root, "qid"), os.path.join(root, "in_qid")
data(folder, 0, "q")
run("qid_1", qid, [(None, folder)])
before("qid", qid)
os.remove(os.path.join(qid, "metadata"))
for crc in (".metadata.crc",):
    if os.path.exists(os.path.join(qid, crc)):
        os.remove(os.path.join(qid, crc))
data(folder, 1, "q")
run("qid_refused", qid, [(None, folder)])
run("qid_2", qid, [(None, folder)], {"spark.sql.streaming.checkpoint.verifyMetadataExists.enabled": "false"})
# and a replaced checkpoint: the same input from scratch in a new folder
run("replaced", os.path.join(root, "replaced"), [(None, folder)])

with open(os.path.join(root, "results.json"), "w") as out:
    json.dump(results, out, indent=1)
spark.stop()
