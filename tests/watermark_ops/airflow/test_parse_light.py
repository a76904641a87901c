"""What keeps a DAG file's parse light (issue 36 item 6) stays true to what it stands in for: the
package's assets equal the ones Airflow would make, and the spark-submit operator, which imports the
Spark provider only when it runs, templates what the provider templates and runs the provider's
operator with the task's arguments. The module check itself: ``tests/watermark_ops/test_layers.py``."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset


def test_the_package_assets_equal_those_airflow_makes():
    from watermark_ops.airflow.operators import AUDIT_MEMORY_ASSET
    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY, package_asset

    assert CHECKPOINT_REGISTRY == Asset(name="watermark_ops_checkpoints", uri="watermark-ops://checkpoints")
    assert AUDIT_MEMORY_ASSET == Asset(name="watermark_ops_audit_memory", uri="watermark-ops://audit-memory")
    for uri in ("watermark-ops://test/once", "Watermark-Ops://x/a/b/", "watermark-ops://h"):
        made = package_asset("n", uri)
        assert made == Asset(name="n", uri=uri) and hash(made) == hash(Asset(name="n", uri=uri)), uri


def test_the_submit_operator_templates_and_passes_what_the_provider_does():
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from watermark_ops.airflow.restart import SUBMIT_TEMPLATE_FIELDS, DiagnosedSparkSubmitOperator

    assert set(SparkSubmitOperator.template_fields) <= set(SUBMIT_TEMPLATE_FIELDS)
    operator = DiagnosedSparkSubmitOperator(
        task_id="submit", application="/jobs/job.py", application_args=["--run", "{{ run_id }}"],
        conf={"spark.log.level": "WARN"}, conn_id="spark_other", deploy_mode="client", name="readings",
        execution_timeout=timedelta(minutes=30), retries=2, diagnosis_checkpoints=["/ck/readings"])
    assert operator.execution_timeout == timedelta(minutes=30) and operator.retries == 2
    assert operator.application_args == ["--run", "{{ run_id }}"] and operator.py_files is None
    assert set(operator.template_fields) >= set(SparkSubmitOperator.template_fields) | {"diagnosis_checkpoints"}
    operator.application_args = ["--run", "scheduled__1"]  # what rendering the templates does
    inner = operator._spark_submit()
    assert isinstance(inner, SparkSubmitOperator) and inner.task_id == "submit"
    assert (inner.application, inner.application_args, inner.conf, inner.name) == (
        "/jobs/job.py", ["--run", "scheduled__1"], {"spark.log.level": "WARN"}, "readings")
    hook = inner._get_hook()
    assert (hook._conn_id, hook._deploy_mode) == ("spark_other", "client")
