# syntax=docker/dockerfile:1
# One image for every service of docker-compose.yaml: the Airflow components (whose task processes
# run the Spark driver, spark-submit in client mode) and the Spark standalone master and workers
# (whose executors run the jobs' Python). Same Python, same pyspark jars, same Java on both sides.
#
# The React views (ui/): built here so the image needs no node at run time, as a user's wheel does not.
FROM node:20-bookworm-slim AS views
WORKDIR /src/ui
COPY ui/package.json ui/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY ui ./
RUN npm run build

# bookworm, not the default trixie: Debian 13 no longer ships openjdk-17, and Spark 4 is tested on 17.
FROM python:3.11-slim-bookworm

# Java 17 for Spark (driver and executors). procps: Spark's scripts call `ps`. tini: PID 1 that
# forwards signals and reaps the JVMs' and spark-submit's children.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

# One user both sides write with (uid 50000, group 0, like the official Airflow image). Compose runs
# every service as "${AIRFLOW_UID:-50000}:0"; a uid chosen with AIRFLOW_UID has no passwd entry,
# which Hadoop's login (Spark reads and writes files through it) refuses, so the entrypoint below
# adds one: /etc/passwd is writable by group 0 for that.
ENV PROJECT_DIR=/opt/watermark-ops \
    HOME=/home/airflow \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1
RUN useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
 && chmod g+w /etc/passwd \
 && chmod -R g+rwX /home/airflow

WORKDIR ${PROJECT_DIR}

# The project's own pins, compiled from requirements.in (Airflow, the Spark provider, pyspark,
# pyspark-client, the PostgreSQL drivers psycopg2 and asyncpg, ...): the same set `make run` and
# the tests use. Its own layer, so that a code change does not reinstall Airflow and Spark.
COPY requirements.txt ./
RUN pip install -r requirements.txt

# The project, installed editable at the path compose mounts plugins/ on: watermark_ops imports
# from ${PROJECT_DIR}/plugins, so settings.REPO_ROOT is ${PROJECT_DIR} and SPARK_JOBS_DIR the
# mounted spark_jobs/. (A regular install would put the package in site-packages, where
# REPO_ROOT, four folders up, is not the project.) The copies also make the image usable alone.
COPY pyproject.toml README.md ./
COPY plugins ./plugins
# The views' bundle (compose mounts ./plugins over this folder: there `make ui` on the host builds it).
COPY --from=views /src/plugins/watermark_ops/airflow/static ./plugins/watermark_ops/airflow/static
COPY dags ./dags
COPY spark_jobs ./spark_jobs
RUN pip install --no-deps --no-build-isolation -e . \
 && mkdir -p ${PROJECT_DIR}/runtime \
 && chown -R 50000:0 ${PROJECT_DIR}/runtime \
 && chmod -R g+rwX ${PROJECT_DIR}/runtime

# Adds a passwd entry for a uid that has none (see above), then runs the command.
COPY --chmod=755 <<'EOF' /usr/local/bin/watermark-ops-entrypoint
#!/bin/sh
if ! whoami >/dev/null 2>&1; then
  echo "default:x:$(id -u):0:default user:${HOME}:/bin/sh" >> /etc/passwd
fi
exec "$@"
EOF

USER 50000:0
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/watermark-ops-entrypoint"]
CMD ["airflow", "version"]
