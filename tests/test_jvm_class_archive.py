"""The tests' JVMs really load Spark's classes from the class-data archive (tests/jvm_class_archive.py).

A JVM whose class path no longer matches the archive's loads its classes from the jars without a
word (the archive's notes are off, so that drivers' output stays clean): the suite would only get
slower. A real spark-submit with the tests' options logs where each class came from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.jvm_class_archive import jvm_options

JOB = "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().range(3).count()\n"


def test_a_spark_submit_loads_spark_s_classes_from_the_archive(tmp_path):
    options, header = jvm_options()
    assert "-XX:SharedArchiveFile=" in options, header
    script, log = tmp_path / "job.py", tmp_path / "classes.log"
    script.write_text(JOB)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info:file={log}",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
                           "--conf", "spark.ui.enabled=false", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # Spark's classes read from a jar or mapped from the archive (a lambda's class is made at run time).
    spark_classes = [line for line in log.read_text().splitlines() if " org.apache.spark." in line
                     and ("source: file:" in line or "source: shared objects file" in line)]
    shared = [line for line in spark_classes if "source: shared objects file (top)" in line]
    # Nearly all from the archive (here 4,371 of 4,429): a class the dumping job never loaded comes
    # from its jar; without the archive, none would.
    assert len(spark_classes) > 1000 and len(shared) > 0.9 * len(spark_classes), (len(shared), len(spark_classes))
