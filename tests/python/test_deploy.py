"""deploy/k8s checked offline (issue 22; no cluster here): kubectl's kustomize renders it, the
rendered objects validate strictly against the Kubernetes API schemas (kubernetes-validate), and the
parts that must agree do: the router discovers exactly the replicas' pods on their HTTP port with
the RBAC it needs, CPU requests equal limits, probes ask /health on a port the container opens, every
$(VAR) in the arguments is defined, every flag is one the pinned vllm-router or tqserve accepts, and
the replica's own command line, with the model and ports made local, starts tqserve serve."""
import re
import shutil
import socket
import subprocess

import pytest

yaml = pytest.importorskip("yaml")

from conftest import BINARY, REPO  # noqa: E402
from server_process import ServerProcess  # noqa: E402

KUSTOMIZATION = REPO / "deploy" / "k8s"
VALIDATE = REPO / "build" / "deploy-venv" / "bin" / "kubernetes-validate"  # scripts/setup.sh installs it
ROUTER = REPO / "build" / "router-venv" / "bin" / "vllm-router"
KUBERNETES_VERSION = "1.32.0"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl missing: scripts/setup.sh installs Debian's kubernetes-client")
    proc = subprocess.run([kubectl, "kustomize", str(KUSTOMIZATION)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path_factory.mktemp("k8s") / "rendered.yaml"
    path.write_text(proc.stdout)
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return path, {(d["kind"], d["metadata"]["name"] if d["kind"] != "ConfigMap" else "config"): d
                  for d in docs}


def by_kind(objects, kind):
    return [o for (k, _), o in objects.items() if k == kind]


def test_renders_and_validates_against_the_api_schemas(rendered):
    path, objects = rendered
    assert VALIDATE.exists(), f"{VALIDATE} missing: scripts/setup.sh installs kubernetes-validate==1.37.0"
    proc = subprocess.run([str(VALIDATE), "--strict", "-k", KUBERNETES_VERSION, str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = sorted(k for k, _ in objects)
    assert kinds == sorted(["Namespace", "PersistentVolumeClaim", "Service", "StatefulSet", "ServiceAccount", "Role",
                            "RoleBinding", "Deployment", "Service", "ConfigMap"]), kinds
    assert all(o["metadata"].get("namespace") == "tqserve" for (k, _), o in objects.items() if k != "Namespace")
    assert proc.stdout.count("passed") == len(objects), proc.stdout


def container(workload):
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return c


def flag(args, name):
    for a in args:
        if a == name or a.startswith(name + "="):
            return a.split("=", 1)[1] if "=" in a else True
    return None


def test_router_finds_the_replicas_with_the_rights_it_needs(rendered):
    _, objects = rendered
    sts = objects[("StatefulSet", "tqserve")]
    headless = objects[("Service", "tqserve")]
    router = objects[("Deployment", "vllm-router")]
    replica, route = container(sts), container(router)

    assert headless["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == headless["metadata"]["name"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= pod_labels.items()
    # --selector key=value must pick the replicas' pods, and only them
    key, value = flag(route["args"], "--selector").split("=")
    assert pod_labels.get(key) == value
    assert router["spec"]["template"]["metadata"]["labels"].get(key) != value
    ports = {p["name"]: p["containerPort"] for p in replica["ports"]}
    assert int(flag(route["args"], "--service-discovery-port")) == ports["http"] == int(flag(replica["args"], "--port"))
    events = flag(replica["args"], "--kv-events-endpoint")
    assert int(events.rsplit(":", 1)[1]) == ports["kv-events"]
    assert {p["name"] for p in headless["spec"]["ports"]} == {"http", "kv-events"}
    assert flag(route["args"], "--policy") == "kv_aware" and flag(route["args"], "--service-discovery") is True

    role, binding = objects[("Role", "vllm-router-pod-reader")], objects[("RoleBinding", "vllm-router-pod-reader")]
    (rule,) = role["rules"]
    assert rule["resources"] == ["pods"] and {"get", "list", "watch"} <= set(rule["verbs"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == router["spec"]["template"]["spec"]["serviceAccountName"]


def test_guaranteed_cpus_probes_and_defined_variables(rendered):
    _, objects = rendered
    config = objects[("ConfigMap", "config")]
    for workload in by_kind(objects, "StatefulSet") + by_kind(objects, "Deployment"):
        c = container(workload)
        assert c["resources"]["requests"] == c["resources"]["limits"], workload["metadata"]["name"]
        ports = {p["name"] for p in c["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/health" and c[probe]["httpGet"]["port"] in ports
        defined = {e["name"] for e in c.get("env", [])}
        for source in c.get("envFrom", []):
            assert source["configMapRef"]["name"] == config["metadata"]["name"]
            defined |= set(config["data"])
        used = {m for a in c["args"] for m in re.findall(r"\$\((\w+)\)", a)}
        assert used <= defined, used - defined
    replica = container(objects[("StatefulSet", "tqserve")])
    (cpu_env,) = [e for e in replica["env"] if e["name"] == "CPU_LIMIT"]
    assert cpu_env["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"


def accepted_flags(help_text):
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))


def test_every_flag_is_one_the_programs_accept(rendered):
    _, objects = rendered
    replica = container(objects[("StatefulSet", "tqserve")])
    route = container(objects[("Deployment", "vllm-router")])
    serve_help = subprocess.run([str(BINARY), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert replica["args"][0] == "serve"
    wanted = {a.split("=")[0] for a in replica["args"] if a.startswith("--")}
    assert wanted <= accepted_flags(serve_help), wanted - accepted_flags(serve_help)
    assert ROUTER.exists(), f"{ROUTER} missing: scripts/setup.sh installs vllm-router==0.1.17"
    router_help = subprocess.run([str(ROUTER), "--help"], capture_output=True, text=True, timeout=60).stdout
    wanted = {a.split("=")[0] for a in route["args"] if a.startswith("--")}
    assert wanted <= accepted_flags(router_help), wanted - accepted_flags(router_help)


def test_the_replica_command_line_serves(rendered, smollm2):
    """The StatefulSet's own arguments, with the configured values filled in, the model file local,
    the host loopback and the ports free ones: tqserve starts, answers /health and /kv_event_sources."""
    _, objects = rendered
    replica = container(objects[("StatefulSet", "tqserve")])
    values = dict(objects[("ConfigMap", "config")]["data"], CPU_LIMIT="2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        events_port = s.getsockname()[1]
    args = []
    for a in replica["args"][1:]:
        a = re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a)
        if a.startswith("/models/"):
            a = smollm2
        elif a.startswith("--host="):
            a = "--host=127.0.0.1"
        elif a.startswith("--port="):
            continue  # ServerProcess picks a free one
        elif a.startswith("--kv-events-endpoint="):
            a = f"--kv-events-endpoint=tcp://127.0.0.1:{events_port}"
        args.append(a)
    server = ServerProcess(BINARY, *args)
    try:
        status, body = server.get("/kv_event_sources")
        assert status == 200 and str(events_port) in body, body
        status, body = server.get("/server_info")
        assert status == 200 and values["KV_CACHE_DTYPE"] in body, body
    finally:
        server.stop()
