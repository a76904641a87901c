"""pyspark and pyspark-client write into the same pyspark/ folder: their versions, the Python side
and the jars (and the JVM actually started) must all be one Spark release."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pyspark


def _jar_versions() -> set[str]:
    jars = Path(pyspark.__file__).parent / "jars"
    found = {m.group(1) for p in jars.glob("spark-*_2.1[23]-*.jar") if (m := re.search(r"_2\.1[23]-(\d+\.\d+\.\d+)\.jar$", p.name))}
    assert found, f"no Spark jars under {jars}"
    return found


def test_distributions_are_the_same_release():
    assert metadata.version("pyspark") == metadata.version("pyspark-client") == pyspark.__version__


def test_python_side_matches_the_jars():
    assert _jar_versions() == {pyspark.__version__}


def test_python_side_matches_the_running_jvm(spark):
    # Both answers come from the JVM (SparkSession.version, JavaSparkContext.version).
    assert spark.version == spark.sparkContext._jsc.version() == pyspark.__version__
