#!/usr/bin/python3
"""Checks the cluster that docker/compose.yaml and docker/k8s/ deploy against
the configuration the server reads. Neither Docker nor Kubernetes is needed:
the files are parsed, and each task's configuration is handed to the built
`flowstate` binary's own loader (`flowstate serve --check-config`), with the
environment that compose or the pod spec gives that task.

    check_deploy_files.py --source REPO --flowstate BIN
    check_deploy_files.py --source REPO --flowstate BIN --self-test \\
        --metrics-dump-binary METRICS_DUMP [--promtool PROMTOOL]

compose.yaml: every service of the Flowstate image is a task; the loader
accepts its command and environment; every task resolves the same cluster;
each address of the cluster is a service's name and that service's gRPC
port, and that service is the task at that place; the tasks listen on
0.0.0.0; each health check GETs /readyz on the task's HTTP port.

docker/k8s/: kustomization.yaml lists every manifest; each file opens with
a comment; the StatefulSet's serviceName is a headless Service that selects
its pods (and publishes them before they are ready); for every pod index i,
the loader accepts the container's args, the ConfigMap's configuration file
where it is mounted, TF_CONFIG from the ConfigMap and FLOWSTATE_TASK_INDEX
from the pod-index label, and resolves task i of a cluster whose addresses
are <statefulset>-<k>.<service>:<gRPC port> for k < replicas; container
ports, Service target ports, probes (/readyz, /healthz), the Prometheus
annotations, the data volume claim and the user agree with the
configuration and the Dockerfile; environment variables named FLOWSTATE_*
are ones the server reads (a misspelt one would be ignored silently).

--self-test runs these checks, and check_docker_files.py's, on copies of
the files with one mistake planted in each, and fails unless every mistake
is reported (and the unchanged copy passes).

Exit status 0 when everything holds, 1 with one line per problem, 2 on bad
usage.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_docker_files as dockerfiles  # noqa: E402  (PyYAML is checked there)
import yaml  # noqa: E402

# Variables the server reads besides FLOWSTATE_<SECTION>_<KEY> (config/config.h,
# distributed/cluster_spec.h, distributed/registry.h).
OTHER_VARIABLES = {"FLOWSTATE_CONFIG", "FLOWSTATE_CLUSTER", "TF_CONFIG", "MASTER_ADDR", "MASTER_PORT",
                   "WORLD_SIZE", "RANK", "POD_IP"}
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


class Checker(dockerfiles.Checker):
    def __init__(self, source, flowstate):
        super().__init__(source)
        self.flowstate = flowstate
        self.k8s = os.path.join(self.docker, "k8s")


# --- What the server reads ----------------------------------------------------

def config_variables(source):
    """FLOWSTATE_<SECTION>_<KEY> for every leaf of config/flowstate.json."""
    with open(os.path.join(source, "config", "flowstate.json"), encoding="utf-8") as f:
        default = json.load(f)
    out = set()

    def walk(node, path):
        for k, v in node.items():
            p = path + [k]
            if isinstance(v, dict) and v:
                walk(v, p)
            elif k != "cluster":
                out.add("FLOWSTATE_" + "_".join(p).upper())
    walk(default, [])
    return out | OTHER_VARIABLES


def check_variable_names(c, where, names, known):
    for n in sorted(names):
        if (n.startswith("FLOWSTATE_") or n in OTHER_VARIABLES) and n not in known:
            c.error(where, f"environment variable {n} is not one the server reads (a misspelt one is "
                    "ignored): FLOWSTATE_<SECTION>_<KEY> of config/flowstate.json, FLOWSTATE_CONFIG, "
                    "FLOWSTATE_CLUSTER, TF_CONFIG, MASTER_*, POD_IP")


def run_check_config(c, where, args, env, files=None):
    """`flowstate <args> --check-config` with exactly `env`; {config, cluster} or None.
    `files` {path in args: text} are written to temporary files first."""
    tmp = tempfile.mkdtemp(prefix="check-deploy-")
    try:
        args = list(args)
        for path, text in (files or {}).items():
            local = os.path.join(tmp, os.path.basename(path))
            with open(local, "w", encoding="utf-8") as f:
                f.write(text)
            args = [local if a == path else a for a in args]
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp}
        full_env.update(env)
        try:
            r = subprocess.run([c.flowstate] + args + ["--check-config"], env=full_env, capture_output=True,
                               text=True, timeout=30, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as e:
            c.error(where, f"flowstate {' '.join(args)} --check-config did not run: {e}")
            return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode != 0:
        msg = r.stderr.strip().splitlines()[0] if r.stderr.strip() else f"exit {r.returncode}"
        c.error(where, f"the server refuses this task's configuration: {msg}")
        return None
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        c.error(where, f"--check-config printed no JSON: {r.stdout[:200]!r}")
        return None


def split_address(address):
    host, _, port = str(address).rpartition(":")
    return host, port


def check_listens_everywhere(c, where, cfg):
    for key in ("http", "grpc"):
        host, _ = split_address(cfg[key]["address"])
        if host not in ("0.0.0.0", "[::]"):
            c.error(where, f"{key}.address is {cfg[key]['address']}: a task must listen on every interface "
                    "(0.0.0.0) for the other tasks, the probes and Prometheus")


# --- compose.yaml ------------------------------------------------------------------

def compose_env(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(e).split("=", 1) if "=" in str(e) else (str(e), "") for e in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def check_compose(c, known):
    compose = c.load_yaml(os.path.join(c.docker, "compose.yaml"))
    if compose is None:
        return
    df = dockerfiles.parse_dockerfile(c)
    tasks = dockerfiles.flowstate_services(compose.get("services") or {})
    if not tasks:
        c.error("docker/compose.yaml", "no service of the Flowstate image")
        return
    resolved = {}
    for name, svc in sorted(tasks.items()):
        where = f"docker/compose.yaml {name}"
        env = compose_env(svc)
        check_variable_names(c, where, env, known)
        for k, v in env.items():
            if "$" in v:
                c.error(where, f"{k} uses ${{...}} interpolation, which this check cannot resolve")
        command = svc.get("command")
        if command is None:
            argv = df["argv"] if df else []
        else:
            command = command if isinstance(command, list) else shlex.split(str(command))
            argv = (df["entrypoint"] if df else []) + [str(a) for a in command]
        if argv[:1] == ["flowstate"]:
            argv = argv[1:]
        out = run_check_config(c, where, argv, env)
        if out is None:
            continue
        if out["cluster"] is None:
            c.error(where, "is not a task of a cluster (no cluster in its configuration or environment)")
            continue
        check_listens_everywhere(c, where, out["config"])
        resolved[name] = out
        http = split_address(out["config"]["http"]["address"])[1]
        test = svc.get("healthcheck", {}).get("test") if isinstance(svc.get("healthcheck"), dict) else None
        test = " ".join(test) if isinstance(test, list) else str(test or "")
        if f"127.0.0.1:{http}/readyz" not in test and f"localhost:{http}/readyz" not in test:
            c.error(where, f"healthcheck must GET http://127.0.0.1:{http}/readyz (found: {test or 'none'})")
    if not resolved:
        return
    # One cluster; each address names the service that is that task, at its gRPC port.
    clusters = {json.dumps(o["cluster"]["jobs"], sort_keys=True) for o in resolved.values()}
    if len(clusters) > 1:
        c.error("docker/compose.yaml", "the tasks resolve different clusters: " + " / ".join(sorted(clusters)))
    by_task = {}
    for name, out in sorted(resolved.items()):
        t = out["cluster"]["task"]
        key = f"{t['type']}:{t['index']}"
        if key in by_task:
            c.error(f"docker/compose.yaml {name}", f"is task {key}, as {by_task[key]} is")
        by_task[key] = name
        jobs = out["cluster"]["jobs"]
        own = jobs[t["type"]][t["index"]]
        host, port = split_address(own)
        grpc = split_address(out["config"]["grpc"]["address"])[1]
        if host != name or port != grpc:
            c.error(f"docker/compose.yaml {name}",
                    f"is task {key}, whose address in the cluster is {own}, not {name}:{grpc} "
                    "(its service name and gRPC port)")
    jobs = next(iter(resolved.values()))["cluster"]["jobs"]
    for job, addrs in sorted(jobs.items()):
        for i, a in enumerate(addrs):
            host, _ = split_address(a)
            if host not in tasks:
                c.error("docker/compose.yaml", f"cluster.{job}[{i}] is {a}: no service is named {host}")
            elif f"{job}:{i}" not in by_task and host in resolved:
                c.error("docker/compose.yaml", f"cluster.{job}[{i}] is {a}, but {host} is another task")
    # Task 0 of the first job is the API: it publishes its HTTP and gRPC ports.
    first = f"{sorted(jobs)[0]}:0"
    if first in by_task:
        name = by_task[first]
        cfg = resolved[name]["config"]
        published = dockerfiles.container_ports(tasks[name].get("ports"))
        for key in ("http", "grpc"):
            p = split_address(cfg[key]["address"])[1]
            if p not in published:
                c.error(f"docker/compose.yaml {name}", f"task {first} (the API) does not publish its {key} port {p}")


# --- docker/k8s -----------------------------------------------------------------------

def load_k8s(c):
    """[(file, document)] of the files kustomization.yaml lists."""
    kpath = os.path.join(c.k8s, "kustomization.yaml")
    kust = c.load_yaml(kpath)
    if kust is None:
        return []
    resources = [str(r) for r in kust.get("resources") or []]
    on_disk = sorted(f for f in os.listdir(c.k8s) if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")
    for f in on_disk:
        if f not in resources:
            c.error("docker/k8s/kustomization.yaml", f"resources: does not list {f}")
    docs = []
    for f in ["kustomization.yaml"] + resources:
        path = os.path.join(c.k8s, f)
        where = f"docker/k8s/{f}"
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            c.error("docker/k8s/kustomization.yaml", f"resources: {f} does not exist")
            continue
        head = text.splitlines()[:3]
        if len(head) < 3 or not all(l.startswith("#") for l in head):
            c.error(where, "does not open with a comment saying what it is (three lines or more)")
        if f == "kustomization.yaml":
            continue
        try:
            for d in yaml.safe_load_all(text):
                if d is not None:
                    docs.append((f, d))
        except yaml.YAMLError as e:
            c.error(where, f"not valid YAML: {e}")
    return docs


def subset(a, b):
    return all(b.get(k) == v for k, v in (a or {}).items())


def port_number(port, container_ports):
    """A Service/probe port (name or number) as the container's port number."""
    if isinstance(port, int):
        return str(port)
    return container_ports.get(str(port), str(port))


def dockerfile_uid(c):
    try:
        with open(os.path.join(c.docker, "Dockerfile"), encoding="utf-8") as f:
            m = re.search(r"useradd\b[^\n]*--uid\s+(\d+)", f.read())
        return int(m.group(1)) if m else None
    except OSError:
        return None


def resolve_env(c, where, env, configmaps, sts_name, index):
    """The container's environment as pod `index` sees it (None on an error)."""
    out = {}
    for e in env or []:
        name = e.get("name")
        if "value" in e:
            out[name] = str(e["value"])
            continue
        vf = e.get("valueFrom") or {}
        if "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            cm = configmaps.get(ref.get("name"))
            if cm is None or ref.get("key") not in (cm.get("data") or {}):
                c.error(where, f"{name}: ConfigMap {ref.get('name')} has no key {ref.get('key')}")
                return None
            out[name] = str(cm["data"][ref["key"]])
        elif "fieldRef" in vf:
            path = vf["fieldRef"].get("fieldPath", "")
            if path == f"metadata.labels['{POD_INDEX_LABEL}']":
                out[name] = str(index)
            elif path == "metadata.name":
                out[name] = f"{sts_name}-{index}"
            elif path == "status.podIP":
                out[name] = f"10.0.0.{index + 1}"
            elif path.startswith("metadata.") or path.startswith("status.") or path.startswith("spec."):
                out[name] = "x"
            else:
                c.error(where, f"{name}: unknown fieldRef {path}")
        elif "resourceFieldRef" in vf or "secretKeyRef" in vf:
            out[name] = "x"
        else:
            c.error(where, f"{name}: neither value nor a valueFrom this check knows")
    return out


def config_file(c, where, args, container, volumes, configmaps):
    """{path: text} of the --config file the args name, from its ConfigMap volume."""
    path = dockerfiles.flag_value(args, "--config")
    if path is None:
        return {}
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if not path.startswith(mp + "/"):
            continue
        vol = volumes.get(m.get("name")) or {}
        cmref = vol.get("configMap")
        if not cmref:
            c.error(where, f"--config {path}: the volume at {mp} is not a ConfigMap")
            return None
        data = (configmaps.get(cmref.get("name")) or {}).get("data") or {}
        rel = path[len(mp) + 1:]
        items = cmref.get("items")
        key = next((i["key"] for i in items if i.get("path") == rel), None) if items else rel
        if key not in data:
            c.error(where, f"--config {path}: ConfigMap {cmref.get('name')} has no key for {rel}")
            return None
        return {path: data[key]}
    c.error(where, f"--config {path}: no volume is mounted there")
    return None


def check_k8s(c, known):
    docs = load_k8s(c)
    if not docs:
        return
    by_kind = {}
    for f, d in docs:
        by_kind.setdefault(d.get("kind"), []).append((f, d))
    configmaps = {d["metadata"]["name"]: d for _, d in by_kind.get("ConfigMap", [])}
    services = {d["metadata"]["name"]: (f, d) for f, d in by_kind.get("Service", [])}
    stss = by_kind.get("StatefulSet", [])
    if len(stss) != 1:
        c.error("docker/k8s", f"expected one StatefulSet, found {len(stss)}")
        return
    f, sts = stss[0]
    where = f"docker/k8s/{f} StatefulSet {sts['metadata']['name']}"
    name = sts["metadata"]["name"]
    spec = sts.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    pod = tmpl.get("spec") or {}
    if not subset((spec.get("selector") or {}).get("matchLabels"), labels):
        c.error(where, "spec.selector.matchLabels does not match the pod template's labels")
    svc_name = spec.get("serviceName")
    if svc_name not in services:
        c.error(where, f"serviceName {svc_name}: no such Service")
        return
    sf, svc = services[svc_name]
    sw = f"docker/k8s/{sf} Service {svc_name}"
    sspec = svc.get("spec") or {}
    if sspec.get("clusterIP") != "None":
        c.error(sw, "must be headless (clusterIP: None) for the stable names <pod>.<service>")
    if sspec.get("publishNotReadyAddresses") is not True:
        c.error(sw, "publishNotReadyAddresses must be true: tasks must resolve each other while they start")
    if not sspec.get("selector") or not subset(sspec.get("selector"), labels):
        c.error(sw, "its selector does not select the StatefulSet's pods")
    if pod.get("enableServiceLinks") is not False:
        c.error(where, "enableServiceLinks must be false: a Service named flowstate* would put "
                "FLOWSTATE_* variables (the server configuration's prefix) into the environment")
    containers = [x for x in pod.get("containers") or []
                  if str(x.get("image", "")).split(":")[0].rsplit("/", 1)[-1] == "flowstate"]
    if len(containers) != 1:
        c.error(where, "expected one container of the flowstate image")
        return
    ctr = containers[0]
    cw = f"{where} container {ctr.get('name')}"
    cports = {str(p.get("name")): str(p.get("containerPort")) for p in ctr.get("ports") or []}
    command = [str(a) for a in ctr.get("command") or []]
    if command not in ([], ["flowstate"]):
        c.error(cw, f"command {command}: leave it to the image's ENTRYPOINT (flowstate)")
    args = [str(a) for a in ctr.get("args") or []]
    if args[:1] != ["serve"]:
        c.error(cw, f"args must run `flowstate serve` (a worker has no HTTP port for probes and metrics): {args}")
    check_variable_names(c, cw, [e.get("name") for e in ctr.get("env") or []], known)
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    files = config_file(c, cw, args, ctr, volumes, configmaps)
    if files is None:
        return
    index_env = [e for e in ctr.get("env") or [] if e.get("name") == "FLOWSTATE_TASK_INDEX"]
    if not index_env or ((index_env[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != \
            f"metadata.labels['{POD_INDEX_LABEL}']":
        c.error(cw, f"FLOWSTATE_TASK_INDEX must come from the pod's label {POD_INDEX_LABEL} "
                "(downward API): one TF_CONFIG for all pods, each pod's own index")
    resolved = []
    for i in range(replicas):
        env = resolve_env(c, cw, ctr.get("env"), configmaps, name, i)
        if env is None:
            return
        out = run_check_config(c, f"{cw} (pod {name}-{i})", args, env, files)
        if out is not None:
            resolved.append((i, out))
    if replicas < 1:
        c.error(where, "replicas must be >= 1")
    if not resolved:
        return
    cfg = resolved[0][1]["config"]
    check_listens_everywhere(c, cw, cfg)
    http = split_address(cfg["http"]["address"])[1]
    grpc = split_address(cfg["grpc"]["address"])[1]
    for key, port in (("http", http), ("grpc", grpc)):
        if cports.get(key) != port:
            c.error(cw, f"containerPort named {key} is {cports.get(key)}, the server listens on {port}")
    # Each pod is its own task; the addresses are the pods' stable names.
    for i, out in resolved:
        cl = out["cluster"]
        pw = f"{cw} (pod {name}-{i})"
        if cl is None:
            c.error(pw, "is not a task of a cluster (no TF_CONFIG, cluster or MASTER_*)")
            continue
        if cl["task"]["index"] != i:
            c.error(pw, f"resolves task index {cl['task']['index']}, not its pod index {i}")
        jobs = cl["jobs"]
        if len(jobs) != 1:
            c.error(pw, f"one StatefulSet is one job of the cluster; the cluster has {sorted(jobs)}")
        addrs = jobs.get(cl["task"]["type"], [])
        if len(addrs) != replicas:
            c.error(pw, f"the cluster's job {cl['task']['type']} lists {len(addrs)} task(s), the StatefulSet "
                    f"runs {replicas} replicas")
        for k, a in enumerate(addrs):
            host, port = split_address(a)
            want = f"{name}-{k}.{svc_name}"
            if not (host == want or host.startswith(want + ".")) or port != grpc:
                c.error(pw, f"task {k}'s address is {a}, not {want}:{grpc} (pod {name}-{k} behind the "
                        f"headless Service {svc_name}, the gRPC port)")
    sports = {str(p.get("name")): port_number(p.get("targetPort", p.get("port")), cports)
              for p in sspec.get("ports") or []}
    if grpc not in sports.values():
        c.error(sw, f"no port targets the gRPC port {grpc}")
    # The other Services: each selects pods of this StatefulSet and targets its ports.
    for other, (of, o) in sorted(services.items()):
        ow = f"docker/k8s/{of} Service {other}"
        sel = dict((o.get("spec") or {}).get("selector") or {})
        pod_name = sel.pop("statefulset.kubernetes.io/pod-name", None)
        if not subset(sel, labels):
            c.error(ow, "its selector does not select the StatefulSet's pods")
        if pod_name is not None and pod_name not in [f"{name}-{i}" for i in range(replicas)]:
            c.error(ow, f"selects pod {pod_name}, which the StatefulSet does not run")
        for p in (o.get("spec") or {}).get("ports") or []:
            t = port_number(p.get("targetPort", p.get("port")), cports)
            if t not in cports.values():
                c.error(ow, f"port {p.get('name')} targets {p.get('targetPort')}, not a port of the container")
    # Probes, scraping, resources, storage, user.
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        g = (ctr.get(probe) or {}).get("httpGet") or {}
        if g.get("path") != path or port_number(g.get("port"), cports) != http:
            c.error(cw, f"{probe} must GET {path} on the HTTP port {http} (found {g or 'none'})")
    ann = (tmpl.get("metadata") or {}).get("annotations") or {}
    if str(ann.get("prometheus.io/scrape")) != "true" or str(ann.get("prometheus.io/port")) != http or \
            ann.get("prometheus.io/path", "/metrics") != "/metrics":
        c.error(where, f"pod annotations must say prometheus.io/scrape \"true\", prometheus.io/port \"{http}\", "
                f"prometheus.io/path /metrics (found {ann})")
    res = ctr.get("resources") or {}
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(kind) or {}):
                c.error(cw, f"resources.{kind}.{r} is not set")
    data_dir = cfg["data_dir"]
    claims = {(t.get("metadata") or {}).get("name"): t for t in spec.get("volumeClaimTemplates") or []}
    mounts = {m.get("mountPath", "").rstrip("/"): m.get("name") for m in ctr.get("volumeMounts") or []}
    claim = mounts.get(data_dir.rstrip("/"))
    if claim not in claims:
        c.error(cw, f"the data directory {data_dir} is not on a volumeClaimTemplate (found {claim})")
    elif not (((claims[claim].get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage"):
        c.error(where, f"volumeClaimTemplate {claim} requests no storage")
    uid = dockerfile_uid(c)
    sc = pod.get("securityContext") or {}
    if uid is not None and (sc.get("runAsUser") != uid or sc.get("fsGroup") != uid):
        c.error(where, f"securityContext runAsUser and fsGroup must be the image's user {uid} "
                f"(docker/Dockerfile), to write the claimed volume (found {sc})")
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = subprocess.run([kubectl, "kustomize", c.k8s], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            c.error("docker/k8s", "kubectl kustomize failed: " + (r.stderr.strip() or r.stdout.strip()))


def check_all(source, flowstate):
    c = Checker(source, flowstate)
    known = config_variables(source)
    check_compose(c, known)
    check_k8s(c, known)
    return c.errors


# --- Self-test ------------------------------------------------------------------------

# (file under the repository, text, replacement, what an error must say)
MISTAKES = [
    ("docker/compose.yaml", 'FLOWSTATE_TASK_INDEX: "2"', 'FLOWSTATE_TASK_INDEX: "1"', "is task worker:1, as"),
    ("docker/compose.yaml", '"flowstate-2:50051"]', '"flowstate-3:50051"]', "no service is named flowstate-3"),
    ("docker/compose.yaml", 'FLOWSTATE_TASK_INDEX: "1"', 'FLOWSTATE_TASK_INDX: "1"',
     "FLOWSTATE_TASK_INDX is not one the server reads"),
    ("docker/compose.yaml", '"0.0.0.0:50051"', '"127.0.0.1:50051"', "must listen on every interface"),
    ("docker/compose.yaml", "8080/readyz", "8080/ready", "healthcheck must GET"),
    ("docker/k8s/statefulset.yaml", "replicas: 3", "replicas: 4", "lists 3 task(s), the StatefulSet runs 4"),
    ("docker/k8s/configmap.yaml", '"flowstate-1.flowstate:50051"', '"flowstate-1.flowstate-headless:50051"',
     "task 1's address is flowstate-1.flowstate-headless:50051"),
    ("docker/k8s/configmap.yaml", '"max_running": 2', '"max_runing": 2', "jobs.max_runing: unknown key"),
    ("docker/k8s/service.yaml", "  clusterIP: None\n", "", "must be headless"),
    ("docker/k8s/service.yaml", "  publishNotReadyAddresses: true\n", "", "publishNotReadyAddresses"),
    ("docker/k8s/statefulset.yaml", "containerPort: 50051", "containerPort: 50052",
     "containerPort named grpc is 50052"),
    ("docker/k8s/statefulset.yaml", "path: /readyz", "path: /ready", "readinessProbe must GET /readyz"),
    ("docker/k8s/statefulset.yaml", "fieldPath: metadata.labels['apps.kubernetes.io/pod-index']",
     "fieldPath: metadata.name", "FLOWSTATE_TASK_INDEX must come from the pod's label"),
    ("docker/k8s/statefulset.yaml", 'prometheus.io/port: "8080"', 'prometheus.io/port: "9090"',
     "prometheus.io/port"),
    ("docker/k8s/statefulset.yaml", "enableServiceLinks: false", "enableServiceLinks: true",
     "enableServiceLinks must be false"),
    ("docker/k8s/statefulset.yaml", "      labels:\n        app.kubernetes.io/name: flowstate\n      annotations:",
     "      labels:\n        app.kubernetes.io/name: flowstate-task\n      annotations:",
     "spec.selector.matchLabels does not match"),
    ("docker/k8s/statefulset.yaml", "mountPath: /var/lib/flowstate", "mountPath: /data",
     "is not on a volumeClaimTemplate"),
    ("docker/k8s/statefulset.yaml", "runAsUser: 10001", "runAsUser: 1000", "securityContext runAsUser"),
    ("docker/k8s/statefulset.yaml", "memory: 8Gi", "ephemeral-storage: 8Gi", "resources.limits.memory"),
    ("docker/k8s/kustomization.yaml", "  - service.yaml\n", "", "does not list service.yaml"),
    ("docker/k8s/service.yaml", "statefulset.kubernetes.io/pod-name: flowstate-0",
     "statefulset.kubernetes.io/pod-name: flowstate-3", "selects pod flowstate-3"),
]
# The same for check_docker_files.py (the dashboard and Prometheus).
DOCKER_MISTAKES = [
    ("docker/prometheus.yml", '      - targets: ["flowstate-2:8080"]\n        labels:\n          task: "2"\n', "",
     "no scrape target flowstate-2:8080"),
    ("docker/prometheus.yml", 'task: "2"', 'job_id: "2"', "has a label 'job_id', which Prometheus sets on every"),
    ("docker/grafana/dashboards/flowstate.json",
     "histogram_quantile(0.99, sum by (job_id, replica, le) (rate(flowstate_replica_step_seconds_bucket",
     "histogram_quantile(0.99, sum by (job_id, replica, le) (rate(flowstate_replica_step_time_seconds_bucket", "flowstate_replica_step_time_seconds_bucket is not exported"),
    ("docker/grafana/dashboards/flowstate.json", "max by (job_id, replica) (flowstate_replica_examples",
     "max by (job_id, rank) (flowstate_replica_examples", "no metric of the query has label 'rank'"),
    ("docker/compose.yaml", "flowstate-2-data:/var/lib/flowstate", "flowstate-1-data:/var/lib/flowstate",
     "shares the volume 'flowstate-1-data'"),
]


def self_test(source, flowstate, metrics_dump, promtool):
    out = subprocess.run([metrics_dump], check=True, capture_output=True, text=True, timeout=60).stdout
    failures = []

    def docker_errors(root):
        types, series = dockerfiles.parse_exposition(out)
        dockerfiles.add_pending(types, series, dockerfiles.PENDING_METRICS)
        c = dockerfiles.Checker(root)
        dockerfiles.check(c, types, series, promtool)
        return c.errors

    def copy():
        root = tempfile.mkdtemp(prefix="deploy-self-test-")
        for d in ("docker", "config", "scripts"):
            shutil.copytree(os.path.join(source, d), os.path.join(root, d))
        return root

    root = copy()
    try:
        errors = check_all(root, flowstate) + docker_errors(root)
        if errors:
            failures.append("the unchanged copy does not pass:\n  " + "\n  ".join(errors))
    finally:
        shutil.rmtree(root)
    for mistakes, check in ((MISTAKES, lambda r: check_all(r, flowstate)), (DOCKER_MISTAKES, docker_errors)):
        for path, old, new, want in mistakes:
            root = copy()
            try:
                p = os.path.join(root, path)
                with open(p, encoding="utf-8") as f:
                    text = f.read()
                if text.count(old) != 1:
                    failures.append(f"{path}: {old!r} occurs {text.count(old)} times (the mistake needs one)")
                    continue
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text.replace(old, new))
                errors = check(root)
                label = f"{path}: {old.strip()!r} -> {new.strip()!r}"
                if any(want in e for e in errors):
                    print(f"ok   {label}: reported")
                else:
                    failures.append(f"{label}: expected an error saying {want!r}, got: "
                                    + ("; ".join(errors) or "none"))
            finally:
                shutil.rmtree(root)
    for f in failures:
        print(f"FAIL {f}")
    n = len(MISTAKES) + len(DOCKER_MISTAKES) + 1
    print(f"{n - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--flowstate", required=True, help="the built flowstate binary")
    ap.add_argument("--self-test", action="store_true", help="plant mistakes in copies; each must be reported")
    ap.add_argument("--metrics-dump-binary", help="the metrics_dump program (for --self-test)")
    ap.add_argument("--promtool", default=None, help="promtool (default: from PATH)")
    args = ap.parse_args()
    source = os.path.abspath(args.source)
    if not os.access(args.flowstate, os.X_OK):
        sys.stderr.write(f"check_deploy_files: {args.flowstate} is not an executable: build the flowstate target\n")
        return 2
    if args.self_test:
        promtool = args.promtool or shutil.which("promtool")
        if not args.metrics_dump_binary or not promtool:
            sys.stderr.write("check_deploy_files: --self-test needs --metrics-dump-binary and promtool\n")
            return 2
        return self_test(source, os.path.abspath(args.flowstate), args.metrics_dump_binary, promtool)
    errors = check_all(source, os.path.abspath(args.flowstate))
    if errors:
        for e in errors:
            print(f"check_deploy_files: {e}")
        print(f"check_deploy_files: {len(errors)} problem(s)")
        return 1
    print("check_deploy_files: OK (compose.yaml's cluster and docker/k8s agree with the server's configuration)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
