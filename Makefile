# The two commands a newcomer runs (see README): `make run` and `make test`; `make docs` builds the docs site.
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
# Runtime state (Airflow home + SQLite DB, landing zone, checkpoints, outputs): one ignored folder.
export WATERMARK_OPS_HOME ?= $(CURDIR)/.runtime
# spark-submit finds SPARK_HOME and the driver's Python through the venv's bin on PATH.
export PATH := $(VENV)/bin:$(PATH)
export AIRFLOW_HOME ?= $(WATERMARK_OPS_HOME)/airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__UNIT_TEST_MODE := False
# The example's [watermark_ops] settings (watermark_ops.examples.flights.settings.airflow_config_env):
# its jobs' thresholds and landings, and the runtime checkpoints as the pages' root "runtime".
export AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG ?= $(CURDIR)/dags/watermark_monitor.json
export AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS ?= {"runtime":"$(WATERMARK_OPS_HOME)/checkpoints"}
# JSON form: a URI with a raw `[` silently falls back to master yarn.
export AIRFLOW_CONN_SPARK_DEFAULT ?= {"conn_type":"spark","host":"local[2]","extra":{"deploy-mode":"client"}}
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(PY)
# Logical dates (America/New_York midnights) that `make run` runs, one DAG run each.
DATES ?= 2013-01-01 2013-01-02 2013-01-03

.PHONY: venv ui wheel run test docs bench up down clean screenshot s3-up s3-down
venv: $(VENV)/.installed

# The React views (ui/, AIP-68 react_apps) as one bundle inside the Python package, which the wheel
# carries (installing it needs no node). Built when missing or older than a source or the lock file.
UI_BUNDLE := plugins/watermark_ops/airflow/static/watermark-views.umd.js
UI_SOURCES := $(shell find ui/src -type f 2>/dev/null) ui/vite.config.ts ui/tsconfig.json ui/package.json
ui: $(UI_BUNDLE)

ui/node_modules/.package-lock.json: ui/package-lock.json
	@command -v npm >/dev/null || { apt-get update -q && apt-get install -y -q nodejs npm; }
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); if (a < 20 || (a === 20 && b < 19)) { console.error("node " + process.versions.node + ": the views build with Vite 7, which needs node 20.19 or newer"); process.exit(1); }'
	cd ui && npm ci --no-audit --no-fund --loglevel=error

$(UI_BUNDLE): ui/node_modules/.package-lock.json $(UI_SOURCES)
	cd ui && npm run --silent build

# The wheel a user installs (bundle included): dist/watermark_ops-<version>-py3-none-any.whl.
wheel: venv ui
	$(VENV)/bin/uv build --wheel --out-dir dist .

$(VENV)/.installed: requirements.txt pyproject.toml
	@command -v java >/dev/null || { apt-get update -q && apt-get install -y -q openjdk-17-jre-headless; }
	@# Debian's chromium for the UI's browser test and `make screenshot` (Playwright drives it; no browser download).
	@test -x /usr/bin/chromium || { apt-get update -q && apt-get install -y -q chromium; }
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "$$(grep '^uv==' requirements.txt)"
	@# The pins from uv's cache when it holds them all (no network, and no rebuild of a cached sdist:
	@# pyspark's took 30 s and 1.4 GB of cache on every install), else from the index.
	$(VENV)/bin/uv pip install -q --offline --compile-bytecode --python $(PY) -r requirements.txt 2>/dev/null \
	  || $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -r requirements.txt
	@# Editable: its entry points register the provider and the UI plugin (nothing in plugins/ does).
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps --no-build-isolation -e .
	@touch $@

# LAUNCH=submit|connect|auto (default auto: the faster end to end here, Connect server start included).
run: venv ui
	$(PY) -m watermark_ops.examples.flights.demo $(DATES) $(if $(LAUNCH),--launch $(LAUNCH))

test: venv ui
	$(PY) -m pytest

# The documentation site (docs/, mkdocs.yml) into $(WATERMARK_OPS_HOME)/site: open its index.html.
# Strict (mkdocs.yml): a broken link or reference fails, as in tests/test_docs.py.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(WATERMARK_OPS_HOME)/site
	@echo "Open $(WATERMARK_OPS_HOME)/site/index.html"

# The docs' pictures of the watermark pages (after `make run`): a real api-server, headless chromium.
screenshot: venv ui
	$(PY) -m watermark_ops.examples.flights.screenshot

# Figures, not asserts (docs/performance.md): the audit and a poke vs cat, DAG file imports,
# the overview at 1,000 checkpoints (local api-server and the S3 server), the monitor cycle at 1,000
# checkpoints (local and on the S3 server, about 15 minutes), availableNow vs batch over January,
# then all of 2013 per state store (about 20 minutes), then submit vs Spark Connect per DAG run and
# 30 daily runs on one Connect server (about 10 minutes), then the batch twin's ledger and corrections
# against the run's streaming time on a job unlike the example (about 2 minutes).
bench: venv
	$(PY) benchmarks/audit_benchmark.py
	$(PY) benchmarks/poke_benchmark.py
	$(PY) benchmarks/ui_benchmark.py
	$(PY) benchmarks/overview_benchmark.py
	$(PY) benchmarks/dag_import_benchmark.py
	$(PY) benchmarks/monitor_benchmark.py
	$(PY) benchmarks/flight_windows_benchmark.py --year
	$(PY) benchmarks/s3_benchmark.py
	$(PY) benchmarks/connect_benchmark.py
	$(PY) benchmarks/twin_benchmark.py

# A real deployment on 127.0.0.1 (PostgreSQL, Airflow 3 with the LocalExecutor, a Spark standalone
# master and two workers), every process recorded by PID; `make down` stops exactly those.
up: venv ui
	$(PY) -m watermark_ops.examples.deploy up

down:
	$(PY) -m watermark_ops.examples.deploy down

# A local S3 API (moto's standalone server on 127.0.0.1, PID in $(WATERMARK_OPS_HOME)/s3/pid) for
# trying `watermark-ops audit s3://...` by hand; the tests start their own.
s3-up: venv
	$(PY) -m watermark_ops.examples.s3server up

s3-down:
	$(PY) -m watermark_ops.examples.s3server down

clean:
	-test -x $(PY) && $(PY) -m watermark_ops.examples.deploy down
	rm -rf $(WATERMARK_OPS_HOME)
