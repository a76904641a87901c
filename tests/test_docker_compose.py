"""docker-compose.yaml and Dockerfile, checked without a Docker engine (CI has none).

What breaks a compose deployment long before anything runs: a service that starts before what it
needs is ready, a bind mount of a folder the repository does not have, two services on one host
port, a Spark master URL the provider turns into something else, an image whose Spark is not the
one the project pins, runtime state that Airflow and the Spark workers see at different paths or
write as different users. Each is checked here on the files themselves; the Spark connection goes
through the real provider hook. ``test_compose_file_is_valid`` also runs ``docker compose config
-q`` when a Docker engine answers, and says so (a warning in the summary) when none does.

Nothing here builds, binds or starts anything.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
REQUIREMENTS = REPO / "requirements.txt"

AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
INIT = "airflow-init"
SPARK_MASTER = "spark-master"
SPARK_WORKERS = {"spark-worker-1", "spark-worker-2"}
SPARK_SERVICES = {SPARK_MASTER} | SPARK_WORKERS
PROJECT_SERVICES = AIRFLOW_SERVICES | {INIT} | SPARK_SERVICES  # the ones built from the Dockerfile
# The variables docker-compose.yaml reads from the user's environment or .env (documented at its top).
DOCUMENTED_VARIABLES = {"AIRFLOW_UID", "_AIRFLOW_WWW_USER_USERNAME", "_AIRFLOW_WWW_USER_PASSWORD"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())  # anchors and `<<` merge keys resolved


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _pins() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line):
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined; heredoc bodies skipped."""
    out, pending, heredoc_end = [], "", None
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if heredoc_end is not None:
            if line == heredoc_end:
                heredoc_end = None
            continue
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        instruction, _, args = full.partition(" ")
        out.append((instruction.upper(), args.strip()))
        if m := re.search(r"<<-?'?\"?(\w+)'?\"?", args):
            heredoc_end = m.group(1)
    return out


def _pip_installs() -> list[list[str]]:
    """The arguments of every `pip install` in the Dockerfile's RUN lines."""
    installs = []
    for instruction, args in _dockerfile():
        if instruction != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            words = shlex.split(command)
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    installs.append(words[i + 2:])
    return installs


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of every volume, short syntax."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append((volume["source"], volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            mounts.append((source, target))
    return mounts


def _host_ports(service: dict) -> list[int]:
    ports = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            ports.append(int(port["published"]))
        else:
            parts = str(port).split(":")
            assert len(parts) >= 2, f"{port!r}: publish with an explicit host port"
            ports.append(int(parts[-2]))
    return ports


def _command(service: dict) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def _healthcheck_port(service: dict) -> int:
    test = " ".join(service["healthcheck"]["test"])
    return int(re.search(r"localhost:(\d+)", test).group(1))


# --- structure --------------------------------------------------------------------------------


def test_compose_defines_the_services(services):
    assert PROJECT_SERVICES | {"postgres"} <= set(services)
    assert services["postgres"]["image"].split(":")[0] == "postgres"  # the official image


def test_every_service_has_a_health_check(services):
    for name, service in services.items():
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no health check"
        assert check["test"] and check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_airflow_health_checks_are_the_ones_airflow_3_has(services):
    api = services["airflow-apiserver"]
    assert "http://localhost:8080/api/v2/monitor/health" in " ".join(api["healthcheck"]["test"])
    for name, job_type in (("airflow-scheduler", "SchedulerJob"), ("airflow-dag-processor", "DagProcessorJob"),
                           ("airflow-triggerer", "TriggererJob")):
        test = services[name]["healthcheck"]["test"]
        assert test[1:5] == ["airflow", "jobs", "check", "--job-type"] and test[5] == job_type, name
    # The job types are the CLI's own choices (the CLI parser of the pinned Airflow).
    from airflow.cli.cli_config import ARG_JOB_TYPE_FILTER

    assert {"SchedulerJob", "DagProcessorJob", "TriggererJob"} <= set(ARG_JOB_TYPE_FILTER.kwargs["choices"])


def test_dependencies_wait_for_health_or_completion(services):
    for name, service in services.items():
        depends_on = service.get("depends_on") or {}
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions, not a bare list"
        for dependency, spec in depends_on.items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            expected = "service_completed_successfully" if dependency == INIT else "service_healthy"
            assert spec.get("condition") == expected, f"{name} -> {dependency}: {spec}"
    for name in AIRFLOW_SERVICES:
        assert {"postgres", INIT} <= set(services[name]["depends_on"]), name
    assert "postgres" in services[INIT]["depends_on"]
    for name in SPARK_WORKERS:
        assert SPARK_MASTER in services[name]["depends_on"], name
    # The scheduler's task processes run the Spark driver: it waits for the master and the workers.
    assert SPARK_SERVICES <= set(services["airflow-scheduler"]["depends_on"])


def test_bind_mounts_and_build_files_exist(compose, services):
    named_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for source, target in _mounts(service):
            if source.startswith((".", "/", "~")):
                assert (REPO / source).resolve().is_dir(), f"{name}: bind mount {source} is not in the repo"
                assert (REPO / source).resolve().is_relative_to(REPO), f"{name}: {source} is outside the repo"
            else:
                assert source in named_volumes, f"{name}: volume {source} is not declared"
        if "build" in service:
            build = service["build"]
            context = REPO / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            assert context.resolve() == REPO
            assert (context / dockerfile).resolve() == DOCKERFILE
    assert DOCKERFILE.is_file() and REQUIREMENTS.is_file()
    for instruction, args in _dockerfile():
        if instruction == "COPY" and "<<" not in args and "--from=" not in args:
            sources = [a for a in shlex.split(args) if not a.startswith("--")][:-1]
            for source in sources:
                assert (REPO / source).exists(), f"Dockerfile copies {source}, missing from the repo"
                assert source.rstrip("/") not in (REPO / ".dockerignore").read_text().split(), source


# --- one image: the project's pins, Java 17, the same Spark everywhere ------------------------


def test_dockerfile_installs_the_projects_pins_and_a_jre_17():
    instructions = _dockerfile()
    base = [args for instruction, args in instructions if instruction == "FROM"][-1]  # the image; before it, the views' build
    assert re.match(r"python:3\.11-slim", base), base
    runs = " ".join(args for instruction, args in instructions if instruction == "RUN")
    assert re.search(r"apt-get install .*\bopenjdk-17-jre-headless\b", runs)
    # Debian 13 (trixie, the default python:3.11-slim today) has no openjdk-17: the base names bookworm.
    assert "bookworm" in base
    installs = _pip_installs()
    assert ["-r", "requirements.txt"] in installs, installs
    copies = [args for instruction, args in instructions if instruction == "COPY"]
    assert any(shlex.split(c)[0] == "requirements.txt" for c in copies)
    # Anything else pip installs is pinned, and none of it is Airflow or Spark: those come only
    # from requirements.txt.
    for args in installs:
        if args == ["-r", "requirements.txt"]:
            continue
        packages = [a for a in args if not a.startswith("-") and a != "."]
        for package in packages:
            assert "==" in package, f"unpinned {package} in the Dockerfile"
            assert not re.match(r"(apache-airflow|pyspark|py4j)", package, re.I), package


def test_project_is_installed_editable_where_compose_mounts_it(services):
    instructions = _dockerfile()
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for i, a in instructions if i == "ENV")))
    workdir = [a for i, a in instructions if i == "WORKDIR"][-1].replace("${PROJECT_DIR}", env["PROJECT_DIR"])
    assert any(args[-2:] == ["-e", "."] for args in _pip_installs())
    # settings.REPO_ROOT is four folders above settings.py: the editable install makes it the
    # project folder, whose plugins/ and spark_jobs/ compose mounts.
    for name in PROJECT_SERVICES:
        targets = dict((t, s) for s, t in _mounts(services[name]))
        for folder in ("dags", "plugins", "spark_jobs"):
            assert targets.get(f"{workdir}/{folder}") == f"./{folder}", f"{name}: {folder} not at {workdir}/{folder}"


def test_spark_services_run_the_pinned_pyspark_from_the_one_image(services):
    pins = _pins()
    assert pins["pyspark"] == pins["pyspark-client"], "pyspark and pyspark-client write the same folder"
    images = {(services[n]["image"], json.dumps(services[n].get("build"), sort_keys=True)) for n in PROJECT_SERVICES}
    assert len(images) == 1, f"Airflow and Spark services must share one image: {images}"
    (image, build), = images
    assert build != "null", "the image is built from the Dockerfile, not pulled"
    # The Spark daemons are pyspark's own scripts (spark-class on PATH from the pip install), not a
    # separate Spark distribution; nothing in the Dockerfile brings another one.
    assert _command(services[SPARK_MASTER])[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    for name in SPARK_WORKERS:
        command = _command(services[name])
        assert command[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"], name
        assert command[-1] == "spark://spark-master:7077", name
        assert command[command.index("--cores") + 1] == "1", name
    dockerfile = DOCKERFILE.read_text()
    assert not re.search(r"spark-\d[\d.]*-bin|archive\.apache\.org|SPARK_HOME=", dockerfile)
    # The venv the tests run in installs the same pins: the version the image gets is this one.
    from importlib.metadata import version

    assert version("pyspark") == pins["pyspark"]


# --- wiring: Spark connection, ports, shared runtime, executor, database, auth ----------------


def test_spark_default_resolves_to_the_master_service(services, monkeypatch):
    env = _env(services["airflow-scheduler"])
    raw = env["AIRFLOW_CONN_SPARK_DEFAULT"]
    conn = json.loads(raw)  # the JSON form: a URI with `[` silently becomes master yarn
    assert conn["conn_type"] == "spark" and conn["extra"]["deploy-mode"] == "client"
    for name in AIRFLOW_SERVICES | {INIT}:
        assert _env(services[name])["AIRFLOW_CONN_SPARK_DEFAULT"] == raw, name

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", raw)
    resolved = SparkSubmitHook(conn_id="spark_default")._resolve_connection()
    assert resolved["master"] == "spark://spark-master:7077", resolved
    assert resolved["deploy_mode"] == "client"

    master = _command(services[SPARK_MASTER])
    assert services[SPARK_MASTER]["hostname"] == SPARK_MASTER
    assert master[master.index("--host") + 1] == SPARK_MASTER
    assert master[master.index("--port") + 1] == "7077"


def test_host_ports_do_not_clash(services):
    published = [(port, name) for name, service in services.items() for port in _host_ports(service)]
    ports = [port for port, _ in published]
    assert len(ports) == len(set(ports)), f"two services publish one host port: {sorted(published)}"
    assert _host_ports(services["airflow-apiserver"]) == [8080]
    master_ui = _command(services[SPARK_MASTER])
    webui = int(master_ui[master_ui.index("--webui-port") + 1])
    assert webui != 8080 and webui in _host_ports(services[SPARK_MASTER])
    assert _healthcheck_port(services[SPARK_MASTER]) == webui
    for name in SPARK_WORKERS:
        command = _command(services[name])
        port = int(command[command.index("--webui-port") + 1])
        assert port in _host_ports(services[name]) and _healthcheck_port(services[name]) == port, name


def test_airflow_and_spark_share_the_runtime_folder_and_the_uid(services):
    homes = {_env(services[n]).get("WATERMARK_OPS_HOME") for n in PROJECT_SERVICES}
    assert len(homes) == 1 and None not in homes, homes
    (home,) = homes
    sources = set()
    for name in PROJECT_SERVICES:
        mounted = [s for s, t in _mounts(services[name]) if t == home]
        assert len(mounted) == 1, f"{name} does not mount the runtime folder at {home}"
        sources |= set(mounted)
    assert len(sources) == 1, f"one volume for the runtime folder everywhere: {sources}"
    for name in AIRFLOW_SERVICES | {INIT}:
        assert _env(services[name])["AIRFLOW_HOME"].startswith(home + "/"), name
    # One uid on both sides (files the driver writes, executors append to, and back); only the
    # init runs as root, to hand the volume to that uid.
    users = {services[n]["user"] for n in PROJECT_SERVICES - {INIT}}
    assert users == {"${AIRFLOW_UID:-50000}:0"}, users
    assert services[INIT]["user"] == "0:0"
    init_script = " ".join(_command(services[INIT]))
    assert 'chown -R "$${AIRFLOW_UID}:0" "$${WATERMARK_OPS_HOME}"' in init_script
    assert _env(services[INIT])["AIRFLOW_UID"] == "${AIRFLOW_UID:-50000}"
    # The image's own user is the default uid.
    assert ("USER", "50000:0") in _dockerfile()


def test_local_executor_on_the_postgres_service(services):
    env = _env(services["airflow-scheduler"])
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    pins = _pins()
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"):
        url = env[key]
        m = re.match(r"postgresql\+(\w+)://[^@]+@([\w.-]+)(?::(\d+))?/\w+$", url)
        assert m, url
        driver, host, port = m.groups()
        assert host == "postgres" and port in (None, "5432"), url
        package = {"psycopg2": "psycopg2-binary", "asyncpg": "asyncpg"}[driver]
        assert package in pins, f"{url}: requirements.txt (which the image installs) does not pin {package}"
    postgres = _env(services["postgres"])
    assert f"{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("/" + postgres["POSTGRES_DB"])
    for name in AIRFLOW_SERVICES | {INIT}:
        assert _env(services[name])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert _env(services[name])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert "airflow db migrate" in " ".join(_command(services[INIT]))


def test_auth_manager_is_named_and_has_its_admin(services):
    env = _env(services["airflow-apiserver"])
    pins = _pins()
    manager = env["AIRFLOW__CORE__AUTH_MANAGER"]
    if "apache-airflow-providers-fab" in pins:
        assert manager.endswith("FabAuthManager")
    else:
        assert manager == "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "${_AIRFLOW_WWW_USER_USERNAME:-admin}:admin"
        # airflow-init writes the admin's password into the file the API server reads.
        init_env = _env(services[INIT])
        assert init_env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == env[
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
        assert init_env["_AIRFLOW_WWW_USER_PASSWORD"] == "${_AIRFLOW_WWW_USER_PASSWORD:-admin}"
        assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in " ".join(_command(services[INIT]))


# --- the whole file, as compose reads it ------------------------------------------------------


def _engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _compose_command() -> list[str] | None:
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        if subprocess.run([*command, "version"], capture_output=True, timeout=20).returncode == 0:
            return command
    return None


def test_compose_file_is_valid(compose, services):
    """Always: what `docker compose config` would reject that a YAML parser accepts (interpolation
    of undocumented variables, e.g. a shell `$VAR` in a command not written `$$VAR`; references to
    undeclared services or volumes). Then, when a Docker engine answers, compose's own check."""
    text = COMPOSE_FILE.read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for m in re.finditer(r"(?<!\$)\$(\{)?(\w+)", body):
        assert m.group(2) in DOCUMENTED_VARIABLES, (
            f"compose would interpolate ${m.group(2)} from the host: write $${m.group(2)} for the shell")
    for m in re.finditer(r"(?<!\$)\$\{(\w+)(:?[-?][^}]*)?\}", body):
        assert m.group(1) in DOCUMENTED_VARIABLES
    assert set(compose) <= {"services", "volumes", "networks", "secrets", "configs", "name"} | {
        k for k in compose if k.startswith("x-")}
    for name, service in services.items():
        assert "image" in service or "build" in service, name

    if not _engine_answers():
        warnings.warn("docker compose config not run: no Docker engine answered `docker info`; "
                      "the static checks above ran instead", UserWarning)
        return
    command = _compose_command()
    if command is None:
        warnings.warn("docker compose config not run: a Docker engine answers but neither "
                      "`docker compose` nor `docker-compose` is installed", UserWarning)
        return
    result = subprocess.run([*command, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_plugin_is_loaded_once_from_the_images_editable_install(services):
    """The UI plugin comes only from the ``airflow.plugins`` entry point of the image's editable
    install: the mounted plugins folder defines no plugin of its own (Airflow's loader, honouring
    ``.airflowignore``, finds no module there), and the install runs after ``pyproject.toml`` (which
    declares the entry point) is copied."""
    from airflow._shared.module_loading import find_path_from_directory

    found = [p for p in find_path_from_directory(str(REPO / "plugins"), ".airflowignore", "glob") if p.endswith(".py")]
    assert found == [], f"the plugins folder would load {found} as plugin modules"
    instructions = _dockerfile()
    copied = [i for i, (instruction, args) in enumerate(instructions)
              if instruction == "COPY" and "pyproject.toml" in shlex.split(args)]
    installed = [i for i, (instruction, args) in enumerate(instructions)
                 if instruction == "RUN" and re.search(r"pip install .*-e \.", args)]
    assert copied and installed and copied[0] < installed[0]
    for name in AIRFLOW_SERVICES | {INIT}:
        env = _env(services[name])
        targets = {t: s for s, t in _mounts(services[name])}
        assert targets[env["AIRFLOW__CORE__PLUGINS_FOLDER"]] == "./plugins", name


def test_spark_connect_default_resolves_to_the_connect_service(services, monkeypatch):
    """The Connect server runs the package's launcher on the master, one core, on the port the
    connection names; the scheduler (where the client runs) waits for it."""
    raw = _env(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", raw)
    assert SparkConnectHook().get_connection_url() == "sc://spark-connect:15002/"
    connect = services["spark-connect"]
    command = _command(connect)
    assert command[:3] == ["python", "-m", "watermark_ops.spark.connect"]
    assert command[command.index("--port") + 1] == "15002" and "15002" in " ".join(connect["healthcheck"]["test"])
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    assert "spark.cores.max=1" in command  # a spark-submit run still finds a free worker
    assert "spark-connect" in services["airflow-scheduler"]["depends_on"]
    assert _env(services["airflow-scheduler"])["WATERMARK_OPS_SPARK_LAUNCH"] == "connect"
