"""The deployment artifacts under deploy/: what can be checked without Docker, Kubernetes or
systemd running. Each file parses; the settings files load with the bridge's own loader; and
the pieces that must agree across files do: ports, probe paths, mount paths and config paths,
the token's variable, memory and volume sizes, the image's COPY sources and pins."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_delta.config import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
COLLECTOR = DEPLOY / "collector"
DOCKERFILE = DEPLOY / "Dockerfile"

MIB = 1024 * 1024
# the memory a bridge needs besides its row buffer (statefulset.yaml's comment)
HEADROOM = 300 * MIB
ADMIN_PORT = 13133
OTLP_PORTS = {"grpc": 4317, "http": 4318}


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings come from the files under test (and the environment a test sets), not from
    OTEL_DELTA_* variables of the shell that runs pytest."""
    for name in list(os.environ):
        if name.startswith("OTEL_DELTA_"):
            monkeypatch.delenv(name)


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def _host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0]


def load_toml_text(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> Settings:
    path = tmp_path / "deltalake.toml"
    path.write_text(text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings(path)


# --- YAML -------------------------------------------------------------------------------------

YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


def yaml_documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_the_expected_yaml_files_exist() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in YAML_FILES}
    assert {
        "kubernetes/kustomization.yaml",
        "kubernetes/statefulset.yaml",
        "kubernetes/service.yaml",
        "kubernetes/configmap.yaml",
        "kubernetes/secret.yaml",
        "collector/otlp-grpc.yaml",
        "collector/otlp-http.yaml",
        "collector/otlp-grpc-plain.yaml",
    } <= names
    # moved to collector/otlp-grpc-plain.yaml
    assert not (DEPLOY / "otelcol-config.yaml").exists()


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses_into_mappings(path: Path) -> None:
    documents = yaml_documents(path)
    assert documents, f"{path} has no YAML document"
    for document in documents:
        assert isinstance(document, dict), f"{path}: a document is not a mapping"


# --- Kubernetes -------------------------------------------------------------------------------


def kustomization() -> dict[str, Any]:
    return yaml_documents(K8S / "kustomization.yaml")[0]


def manifests() -> list[dict[str, Any]]:
    return [doc for name in kustomization()["resources"] for doc in yaml_documents(K8S / name)]


def only(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        m
        for m in manifests()
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def statefulset() -> dict[str, Any]:
    return only("StatefulSet")


def pod_spec() -> dict[str, Any]:
    return statefulset()["spec"]["template"]["spec"]


def container() -> dict[str, Any]:
    (bridge,) = [c for c in pod_spec()["containers"] if c["name"] == "otel-delta"]
    return bridge


def container_port(port: int | str) -> int:
    """A probe's or Service's target port: a number, or the name of a container port."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert port in named, f"no container port named {port!r}"
    return named[port]


def mount_path(volume: str) -> str:
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == volume]
    return mount["mountPath"]


def configmap_toml() -> str:
    return only("ConfigMap", "otel-delta-config")["data"]["deltalake.toml"]


@pytest.fixture
def k8s_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The ConfigMap's deltalake.toml as the bridge in the pod loads it: with the image's
    environment (which wins over the file) and the pod's."""
    return load_toml_text(configmap_toml(), tmp_path, monkeypatch, image_env())


def quantity(value: str | int) -> float:
    """A Kubernetes resource quantity in bytes (or cores)."""
    units = {
        "Ki": 1024,
        "Mi": 1024**2,
        "Gi": 1024**3,
        "Ti": 1024**4,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "m": 1e-3,
    }
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert match, f"not a quantity: {value!r}"
    number, unit = match.groups()
    return float(number) * (units[unit] if unit else 1)


def test_kustomization_lists_every_manifest() -> None:
    listed = kustomization()["resources"]
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(listed) == sorted(on_disk)
    assert kustomization()["namespace"] == "otel-delta"


def test_manifests_have_the_expected_kinds() -> None:
    kinds = sorted(m["kind"] for m in manifests())
    assert kinds == [
        "ConfigMap",
        "PersistentVolumeClaim",
        "Secret",
        "Service",
        "Service",
        "StatefulSet",
    ]
    for manifest in manifests():
        assert manifest["apiVersion"] == ("apps/v1" if manifest["kind"] == "StatefulSet" else "v1")
        assert manifest["metadata"]["labels"]["app.kubernetes.io/name"] == "otel-delta"


def test_statefulset_runs_one_bridge_with_a_wal_claim_per_pod() -> None:
    spec = statefulset()["spec"]
    assert spec["replicas"] == 1
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    templates = {t["metadata"]["name"]: t for t in spec["volumeClaimTemplates"]}
    assert "wal" in templates
    # every mount names a volume of the pod or a claim template
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for mount in container()["volumeMounts"]:
        assert mount["name"] in volumes or mount["name"] in templates, mount
    lakehouse = volumes["lakehouse"]["persistentVolumeClaim"]["claimName"]
    assert only("PersistentVolumeClaim", lakehouse)


def test_probes_hit_healthz_and_readyz_on_the_admin_port(k8s_settings: Settings) -> None:
    bridge = container()
    assert bridge["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert bridge["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert bridge["startupProbe"]["httpGet"]["path"] == "/healthz"
    admin = k8s_settings.admin.endpoint
    # the kubelet probes the pod's IP: a loopback-only admin server would fail every probe
    assert _host(admin) == "0.0.0.0"
    assert _port(admin) == ADMIN_PORT
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container_port(bridge[probe]["httpGet"]["port"]) == ADMIN_PORT, probe


def test_configmap_toml_loads_with_the_project_loader(k8s_settings: Settings) -> None:
    settings = k8s_settings
    bridge = container()
    ports = {p["name"]: p["containerPort"] for p in bridge["ports"]}
    assert _port(settings.receiver.grpc_endpoint) == ports["otlp-grpc"] == OTLP_PORTS["grpc"]
    assert _port(settings.receiver.http_endpoint) == ports["otlp-http"] == OTLP_PORTS["http"]
    assert ports["admin"] == ADMIN_PORT
    assert settings.logging.format == "json"
    assert settings.buffer.ack == "wal"
    # the WAL on the per-pod claim, the tables on the lakehouse claim
    assert settings.wal.dir == mount_path("wal")
    assert settings.deltalake.table_path == mount_path("lakehouse")


def test_tls_files_come_from_the_mounted_tls_secret(k8s_settings: Settings) -> None:
    tls = k8s_settings.receiver.tls
    assert tls.enabled
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "otel-delta-tls"
    # the keys of a kubernetes.io/tls Secret
    assert tls.cert_file == f"{mount_path('tls')}/tls.crt"
    assert tls.key_file == f"{mount_path('tls')}/tls.key"


def test_the_token_variable_comes_from_the_secret(k8s_settings: Settings) -> None:
    token_env = k8s_settings.receiver.auth.token_env
    assert token_env
    env = {e["name"]: e for e in container()["env"]}
    ref = env[token_env]["valueFrom"]["secretKeyRef"]
    secret = only("Secret", ref["name"])
    assert ref["key"] in {**secret.get("data", {}), **secret.get("stringData", {})}


def test_config_is_mounted_where_the_image_reads_it() -> None:
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == "config"]
    assert mount["mountPath"] == entrypoint_config()
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    configmap = only("ConfigMap", volumes["config"]["configMap"]["name"])
    assert mount["subPath"] in configmap["data"]


def test_services_expose_otlp_and_admin_separately() -> None:
    template_labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    otlp = only("Service", "otel-delta")
    admin = only("Service", "otel-delta-admin")
    for service in (otlp, admin):
        assert service["spec"]["selector"].items() <= template_labels.items()
    assert {p["port"]: container_port(p["targetPort"]) for p in otlp["spec"]["ports"]} == {
        4317: 4317,
        4318: 4318,
    }
    assert [(p["port"], container_port(p["targetPort"])) for p in admin["spec"]["ports"]] == [
        (ADMIN_PORT, ADMIN_PORT)
    ]
    assert admin["spec"]["clusterIP"] == "None"
    assert statefulset()["spec"]["serviceName"] == "otel-delta-admin"


def test_memory_limit_covers_the_buffer_plus_headroom(k8s_settings: Settings) -> None:
    resources = container()["resources"]
    limit = quantity(resources["limits"]["memory"])
    assert quantity(resources["requests"]["memory"]) <= limit
    assert limit >= k8s_settings.buffer.max_bytes + HEADROOM
    # the bridge stops taking requests below the limit, not at it
    resident_limit = k8s_settings.buffer.resident_limit()
    assert resident_limit is not None and resident_limit < limit
    # that limit holds no JVM: `serve` must never start Spark with this config
    operations = k8s_settings.deltalake.operations
    assert not k8s_settings.connector_service.enabled
    assert operations.engine == "delta-rs" or (
        operations.engine == "auto"
        and k8s_settings.buffer.max_rows < operations.bulk_threshold_rows
    )


def test_wal_claim_holds_a_full_wal(k8s_settings: Settings) -> None:
    (wal,) = [
        t for t in statefulset()["spec"]["volumeClaimTemplates"] if t["metadata"]["name"] == "wal"
    ]
    size = quantity(wal["spec"]["resources"]["requests"]["storage"])
    assert size >= k8s_settings.wal.max_bytes + k8s_settings.wal.segment_bytes


def test_pod_runs_as_the_image_user_with_a_read_only_root(k8s_settings: Settings) -> None:
    pod = pod_spec()
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == security["fsGroup"] == image_uid()
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False
    bridge = container()["securityContext"]
    assert bridge["allowPrivilegeEscalation"] is False
    assert bridge["capabilities"]["drop"] == ["ALL"]
    assert bridge["readOnlyRootFilesystem"] is True
    # then everything written must land on a mounted volume: /tmp is an emptyDir, and Spark's
    # warehouse directory (./spark-warehouse by default) is moved there
    volumes = {v["name"]: v for v in pod["volumes"]}
    (tmp,) = [m for m in container()["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]
    assert k8s_settings.spark.conf["spark.sql.warehouse.dir"].startswith("/tmp/")


def test_image_environment_agrees_with_the_configmap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's OTEL_DELTA_* variables win over the mounted file: the file must say the
    same, or an edit to the ConfigMap would silently not apply."""
    from_file = load_toml_text(configmap_toml(), tmp_path, monkeypatch, {})
    env = {k: v for k, v in image_env().items() if "__" in k}
    assert env, "the image sets no OTEL_DELTA_<SECTION>__<KEY>"
    for name, value in env.items():
        section, key = name.removeprefix("OTEL_DELTA_").lower().split("__")
        assert str(getattr(getattr(from_file, section), key)) == value, name


def test_kustomize_builds() -> None:
    assert shutil.which("kubectl"), "kubectl (the machine's) is needed to build the kustomization"
    result = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert len(built) == len(manifests())
    assert {d["metadata"]["namespace"] for d in built} == {"otel-delta"}


# --- Dockerfile -------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments) with continuation lines joined and comments dropped;
    instructions before the first FROM are in stage ""."""
    instructions: list[tuple[str, str, str]] = []
    stage, pending = "", ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        word, _, arguments = text.partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = arguments.split()
            stage = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else parts[0]
        instructions.append((stage, word, arguments.strip()))
    assert not pending, "Dockerfile ends in a continuation line"
    return instructions


def stages() -> list[str]:
    return [stage for stage, word, _ in dockerfile() if word == "FROM"]


def runtime(word: str) -> list[str]:
    """The arguments of every `word` instruction of the final stage."""
    final = stages()[-1]
    return [args for stage, w, args in dockerfile() if stage == final and w == word]


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY/ADD from the build context (not --from=)."""
    found = []
    for _, word, arguments in dockerfile():
        if word not in ("COPY", "ADD"):
            continue
        parts = shlex.split(arguments)
        if any(p.startswith("--from=") for p in parts):
            continue
        paths = [p for p in parts if not p.startswith("--")]
        found.append((paths[:-1], paths[-1]))
    return found


def image_env() -> dict[str, str]:
    """The OTEL_DELTA_* variables the image sets."""
    env = {}
    for arguments in runtime("ENV"):
        for pair in shlex.split(arguments):
            name, _, value = pair.partition("=")
            if name.startswith("OTEL_DELTA_"):
                env[name] = value
    return env


def entrypoint() -> list[str]:
    (value,) = runtime("ENTRYPOINT")
    return json.loads(value)  # exec form


def entrypoint_config() -> str:
    argv = entrypoint()
    start = argv.index("otel-delta")
    assert argv[start : start + 3] == ["otel-delta", "serve", "--config"]
    return argv[start + 3]


def image_uid() -> int:
    (user,) = runtime("USER")
    return int(user.split(":")[0])


def arg_default(name: str) -> str:
    for _, word, arguments in dockerfile():
        if word == "ARG" and arguments.startswith(f"{name}="):
            return arguments.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}= in the Dockerfile")


def test_dockerfile_is_multi_stage_python_311_slim() -> None:
    assert stages() == ["builder", "runtime"]
    bases = [args.split()[0] for _, word, args in dockerfile() if word == "FROM"]
    assert bases == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    image = arg_default("PYTHON_IMAGE")
    assert image.startswith("python:3.11-slim"), image
    runtime_runs = " ".join(runtime("RUN"))
    assert "openjdk-17-jre-headless" in runtime_runs
    assert "cargo" not in runtime_runs and "maven" not in runtime_runs


def test_builder_keeps_its_build_tools_out_of_the_image_venv() -> None:
    """The builder installs maturin and grpcio-tools with a bare `python`: with the image's
    venv (/opt/otel-delta/bin) on the builder's PATH they would land in the runtime image."""
    for stage, word, arguments in dockerfile():
        if stage == "builder" and word == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                if name == "PATH":
                    assert "/opt/otel-delta/bin" not in value


def test_copy_sources_exist_in_the_repository() -> None:
    found = copies()
    assert len(found) >= 5
    for sources, destination in found:
        assert sources, f"COPY without a source: {destination}"
        for source in sources:
            assert (ROOT / source).exists(), f"COPY source {source} is not in the repository"


@pytest.mark.parametrize("folder", ["native", "spark/logstore", "otel_delta", "protos"])
def test_the_build_gets_every_source_file(folder: str) -> None:
    """Every file of the folders the builder compiles is copied (nothing built is needed)."""
    sources = [ROOT / s for sources, _ in copies() for s in sources]
    skipped = {"target", "__pycache__", "_generated"}
    files = [
        p
        for p in (ROOT / folder).rglob("*")
        if p.is_file() and not skipped & set(p.relative_to(ROOT).parts)
    ]
    assert files
    for path in files:
        assert any(path == s or s in path.parents for s in sources), f"{path} is not copied"


def test_expose_lists_the_otlp_and_admin_ports() -> None:
    ports = {int(p.split("/")[0]) for args in runtime("EXPOSE") for p in args.split()}
    assert ports == {4317, 4318, ADMIN_PORT}


def test_entrypoint_serves_the_copied_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = entrypoint_config()
    (source,) = [s for sources, dest in copies() if dest == config for s in sources]
    settings = load_toml_text((ROOT / source).read_text(), tmp_path, monkeypatch, image_env())
    assert _host(settings.admin.endpoint) == "0.0.0.0"
    assert _port(settings.admin.endpoint) == ADMIN_PORT
    assert _port(settings.receiver.grpc_endpoint) == OTLP_PORTS["grpc"]
    assert _port(settings.receiver.http_endpoint) == OTLP_PORTS["http"]
    # plaintext without a token by default: `docker run` works without secrets
    assert not settings.receiver.tls.enabled
    assert settings.receiver.auth.resolved_token() is None
    volumes = json.loads(" ".join(runtime("VOLUME")))
    assert settings.wal.dir in volumes
    assert settings.deltalake.table_path in volumes


def test_image_environment() -> None:
    env = image_env()
    assert env["OTEL_DELTA_ADMIN__ENDPOINT"] == f"0.0.0.0:{ADMIN_PORT}"
    volumes = json.loads(" ".join(runtime("VOLUME")))
    assert env["OTEL_DELTA_WAL__DIR"] in volumes
    # Spark finds the jars the builder fetched (otel_delta.spark.session reads OTEL_DELTA_JARS)
    jar_copies = [args for args in runtime("COPY") if "--from=builder" in args and "jars" in args]
    assert [shlex.split(args)[-1] for args in jar_copies] == [env["OTEL_DELTA_JARS"]]


def test_image_runs_as_a_non_root_user() -> None:
    assert image_uid() != 0
    assert image_uid() == statefulset()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]


def test_pip_version_is_the_makefiles() -> None:
    makefile = (ROOT / "Makefile").read_text()
    pins = set(re.findall(r"pip==([0-9][0-9.]*)", makefile))
    assert pins == {arg_default("PIP_VERSION")}


def load_pins():
    spec = importlib.util.spec_from_file_location("deploy_pins", DEPLOY / "docker" / "pins.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pins_reads_runtime_and_build_requirements() -> None:
    pins = load_pins()
    runtime_reqs = pins.requirements("runtime", ROOT / "pyproject.toml")
    names = {pins._name(r) for r in runtime_reqs}
    assert {"grpcio", "deltalake", "pydantic-settings", "pyspark", "delta-spark"} <= names
    assert all("==" in r for r in runtime_reqs)
    build = pins.requirements("build", ROOT / "pyproject.toml")
    assert sorted(pins._name(r) for r in build) == ["grpcio-tools", "maturin"]
    with pytest.raises(SystemExit):
        pins.requirements("nonsense", ROOT / "pyproject.toml")


# --- systemd ----------------------------------------------------------------------------------


def unit() -> dict[str, dict[str, list[str]]]:
    """Sections of otel-delta.service → key → every value given (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in (SYSTEMD / "otel-delta.service").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), "continuation lines are not expected"
        if line.startswith("["):
            assert line.endswith("]"), line
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} before the first section"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def service(key: str) -> str:
    (value,) = unit()["Service"][key]
    return value


def test_unit_has_its_sections() -> None:
    assert set(unit()) == {"Unit", "Service", "Install"}
    assert unit()["Install"]["WantedBy"] == ["multi-user.target"]


def test_unit_starts_otel_delta_serve() -> None:
    argv = shlex.split(service("ExecStart"))
    assert argv[0].startswith("/") and Path(argv[0]).name == "otel-delta"
    assert argv[1:3] == ["serve", "--config"]
    config = argv[3]
    # the install steps in the unit's header put the example config there
    text = (SYSTEMD / "otel-delta.service").read_text()
    assert f"deploy/systemd/deltalake.toml {config}" in text


def test_unit_is_hardened() -> None:
    assert service("User") == "otel-delta"
    assert service("Restart") == "on-failure"
    assert int(service("LimitNOFILE")) >= 65536
    assert service("NoNewPrivileges") == "yes"
    assert service("ProtectSystem") == "strict"
    assert service("PrivateTmp") == "yes"
    assert service("ProtectHome") == "yes"
    assert service("CapabilityBoundingSet") == ""
    assert service("EnvironmentFile").startswith("/etc/otel-delta/")
    # the JVM's JIT needs writable code pages
    assert "MemoryDenyWriteExecute" not in unit()["Service"]


def test_unit_state_directory_holds_wal_and_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = [Path("/var/lib") / d for d in service("StateDirectory").split()]
    writable = [Path(p) for p in service("ReadWritePaths").split()]
    assert Path(service("WorkingDirectory")) in state
    settings = load_toml_text((SYSTEMD / "deltalake.toml").read_text(), tmp_path, monkeypatch, {})
    for path in (settings.wal.dir, settings.deltalake.table_path):
        assert Path(path).is_absolute()
        assert Path(path) in state, f"{path} is not created by StateDirectory="
        assert any(w == Path(path) or w in Path(path).parents for w in writable), path
    # the token's variable is the one the environment file sets
    env_file = (SYSTEMD / "otel-delta.env").read_text()
    token_env = settings.receiver.auth.token_env
    assert token_env
    assert re.search(rf"^{token_env}=", env_file, re.MULTILINE)
    assert settings.receiver.tls.enabled
    assert _host(settings.admin.endpoint) == "127.0.0.1"


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    """systemd's own parser: unknown keys and bad values are reported on stderr. ExecStart's
    binary must exist for `verify`, so a copy runs `true` instead."""
    assert shutil.which("systemd-analyze"), "systemd-analyze (the machine's) is needed"
    true = shutil.which("true")
    assert true
    text = (SYSTEMD / "otel-delta.service").read_text()
    binary = shlex.split(service("ExecStart"))[0]
    copy = tmp_path / "otel-delta.service"
    copy.write_text(text.replace(binary, true))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""


# --- Collector --------------------------------------------------------------------------------

# keys of the exporters' configs in Collector v0.161.0 (configgrpc/confighttp client config,
# exporterhelper timeout, queue and retry): a misspelt key would stop the Collector at start
GRPC_EXPORTER_KEYS = {
    "endpoint",
    "tls",
    "headers",
    "compression",
    "timeout",
    "retry_on_failure",
    "sending_queue",
    "keepalive",
    "balancer_name",
    "wait_for_ready",
    "auth",
    "authority",
    "read_buffer_size",
    "write_buffer_size",
    "user_agent",
}
HTTP_EXPORTER_KEYS = {
    "endpoint",
    "tls",
    "headers",
    "compression",
    "timeout",
    "retry_on_failure",
    "sending_queue",
    "encoding",
    "traces_endpoint",
    "metrics_endpoint",
    "logs_endpoint",
    "proxy_url",
    "auth",
}
TLS_CLIENT_KEYS = {"insecure", "insecure_skip_verify", "ca_file", "cert_file", "key_file"}
RETRY_KEYS = {"enabled", "initial_interval", "max_interval", "max_elapsed_time", "multiplier"}
QUEUE_KEYS = {"enabled", "num_consumers", "queue_size", "sizer", "block_on_overflow", "batch"}

COLLECTOR_CONFIGS = {
    "otlp-grpc.yaml": "otlp_grpc",
    "otlp-http.yaml": "otlp_http",
    "otlp-grpc-plain.yaml": "otlp_grpc",
}


def collector_config(name: str) -> dict[str, Any]:
    return yaml_documents(COLLECTOR / name)[0]


def the_exporter(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ((component_id, exporter),) = config["exporters"].items()
    return component_id, exporter


def test_every_collector_config_is_tested() -> None:
    assert sorted(p.name for p in COLLECTOR.glob("*.yaml")) == sorted(COLLECTOR_CONFIGS)


@pytest.mark.parametrize(("name", "exporter_type"), COLLECTOR_CONFIGS.items())
def test_collector_pipelines_reference_defined_components(name: str, exporter_type: str) -> None:
    config = collector_config(name)
    component_id, exporter = the_exporter(config)
    assert component_id.split("/")[0] == exporter_type
    service = config["service"]
    assert set(service["extensions"]) <= set(config["extensions"])
    assert "health_check" in service["extensions"]
    assert set(service["pipelines"]) == {"traces", "metrics", "logs"}
    for pipeline in service["pipelines"].values():
        assert pipeline["receivers"] == ["otlp"]
        assert set(pipeline["receivers"]) <= set(config["receivers"])
        # memory_limiter first, batch after it
        assert pipeline["processors"] == ["memory_limiter", "batch"]
        assert set(pipeline["processors"]) <= set(config["processors"])
        assert pipeline["exporters"] == [component_id]
    allowed = GRPC_EXPORTER_KEYS if exporter_type == "otlp_grpc" else HTTP_EXPORTER_KEYS
    assert set(exporter) <= allowed, set(exporter) - allowed
    assert set(exporter["tls"]) <= TLS_CLIENT_KEYS
    assert set(exporter["retry_on_failure"]) <= RETRY_KEYS
    assert set(exporter["sending_queue"]) <= QUEUE_KEYS
    assert exporter["compression"] == "gzip"
    assert exporter["retry_on_failure"]["enabled"] is True
    assert exporter["sending_queue"]["enabled"] is True
    assert exporter["sending_queue"]["num_consumers"] > 1


@pytest.mark.parametrize(
    ("name", "scheme", "port"),
    [
        ("otlp-grpc.yaml", "", OTLP_PORTS["grpc"]),
        ("otlp-http.yaml", "https://", OTLP_PORTS["http"]),
    ],
)
def test_secured_collector_configs_reach_the_kubernetes_service_with_tls_and_token(
    name: str, scheme: str, port: int, k8s_settings: Settings
) -> None:
    _, exporter = the_exporter(collector_config(name))
    # the Service of deploy/kubernetes in the kustomization's namespace
    host = f"{only('Service', 'otel-delta')['metadata']['name']}.{kustomization()['namespace']}.svc"
    assert exporter["endpoint"] == f"{scheme}{host}:{port}"
    assert exporter["tls"]["ca_file"]
    assert not exporter["tls"].get("insecure", False)
    token_env = k8s_settings.receiver.auth.token_env
    assert exporter["headers"] == {"authorization": f"Bearer ${{env:{token_env}}}"}


def test_plain_collector_config_has_no_tls_and_no_token() -> None:
    _, exporter = the_exporter(collector_config("otlp-grpc-plain.yaml"))
    assert exporter["tls"] == {"insecure": True}
    assert "headers" not in exporter
    assert exporter["endpoint"].endswith(f":{OTLP_PORTS['grpc']}")


# --- README -----------------------------------------------------------------------------------


def test_deploy_readme_names_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text()
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and p.name != "README.md"]
    files = [p for p in files if "__pycache__" not in p.parts]
    assert files
    for path in files:
        assert str(path.relative_to(DEPLOY)) in readme, f"deploy/README.md omits {path.name}"
