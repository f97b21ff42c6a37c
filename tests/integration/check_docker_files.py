#!/usr/bin/env python3
"""Checks docker/ (Dockerfile, compose.yaml, prometheus.yml, the Grafana
provisioning and dashboard) for consistency with each other and with the
metrics the server exports. Docker is not needed: the files are parsed.

    check_docker_files.py --source REPO (--metrics-dump FILE | --metrics-dump-binary BIN)

The compose file runs a cluster: every service of the Flowstate image is a
task with its own data volume, scraped by Prometheus (check_deploy_files.py
checks the cluster they form and docker/k8s/).

The exported metrics are the Prometheus text that `metrics_dump` prints (a
Metrics that recorded one of everything), plus PENDING_METRICS (below) until
the server exports them. Every flowstate_* metric a dashboard query uses
must be exported (histograms as _bucket/_sum/_count),
every label a query matches, groups by or shows in a legend must exist on
it, and every query must parse as PromQL (`promtool check rules`).

Exit status 0 when everything holds, 1 with one line per problem otherwise,
2 on bad usage or a missing tool.
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

try:
    import yaml
except ImportError:
    sys.stderr.write("check_docker_files: PyYAML is missing: install Debian's python3-yaml "
                     "(scripts/install-deps does) and run with /usr/bin/python3\n")
    sys.exit(2)

# Metrics the dashboard may query before the server exports them: the
# data-parallel replicas', {name: (type, labels)}. The job label
# is `job_id`, as on every flowstate_job_* metric (server/metrics.h: `job`
# is Prometheus's scrape job). While the dump lacks one, its entry here
# stands in for it; once the server exports it, the dump is what queries are
# checked against and the entry is reported as no longer needed.
PENDING_METRICS = {
    "flowstate_replica_allreduce_wait_seconds": ("histogram", {"job_id", "replica"}),
    "flowstate_replica_step_seconds": ("histogram", {"job_id", "replica"}),
    "flowstate_replica_examples_per_second": ("gauge", {"job_id", "replica"}),
    "flowstate_job_replicas_alive": ("gauge", {"job_id"}),
    "flowstate_job_restarts_total": ("counter", {"job_id"}),
    "flowstate_allreduce_bytes_total": ("counter", {"job_id"}),
    "flowstate_allreduce_seconds_total": ("counter", {"job_id"}),
    "flowstate_replica_dropped_steps_total": ("counter", {"job_id", "replica"}),
}

# Labels Prometheus attaches to every scraped series.
TARGET_LABELS = {"job", "instance"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Checker:
    def __init__(self, source):
        self.source = source
        self.docker = os.path.join(source, "docker")
        self.errors = []
        self.target_labels = set()  # what prometheus.yml adds to every series of a target

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def rel(self, path):
        return os.path.relpath(path, self.source)

    def load_yaml(self, path):
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except FileNotFoundError:
            self.error(self.rel(path), "missing")
            return None
        except yaml.YAMLError as e:
            self.error(self.rel(path), f"not valid YAML: {e}")
            return None
        if not isinstance(data, dict):
            self.error(self.rel(path), "expected a mapping at the top level")
            return None
        return data


# --- The exported metrics ---------------------------------------------------

def parse_exposition(text):
    """Returns ({family: type}, {series name: (family, set of label names)})."""
    types = {}
    series = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+')
    label_name = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
            continue
        if not line or line.startswith("#"):
            continue
        m = sample.match(line)
        if not m:
            continue
        name = m.group(1)
        labels = set(label_name.findall(m.group(3) or ""))
        family = name
        if name not in types:
            for suffix in HISTOGRAM_SUFFIXES:
                base = name[: -len(suffix)]
                if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                    family = base
        entry = series.setdefault(name, (family, set()))
        entry[1].update(labels)
    return types, series


def add_pending(types, series, pending):
    """Adds each pending metric the dump lacks to (types, series); returns
    the names of those the dump already has."""
    exported = []
    for name, (kind, labels) in sorted(pending.items()):
        if name in types:
            exported.append(name)
            continue
        types[name] = kind
        if kind == "histogram":
            series[name + "_bucket"] = (name, set(labels) | {"le"})
            series[name + "_sum"] = (name, set(labels))
            series[name + "_count"] = (name, set(labels))
        else:
            series[name] = (name, set(labels))
    return exported


def load_metrics(args):
    if args.metrics_dump_binary:
        try:
            out = subprocess.run([args.metrics_dump_binary], check=True, capture_output=True, text=True,
                                 timeout=60)
        except FileNotFoundError:
            sys.stderr.write(f"check_docker_files: {args.metrics_dump_binary} not found: build the "
                             "metrics_dump target first (ninja metrics_dump)\n")
            sys.exit(2)
        except subprocess.CalledProcessError as e:
            sys.stderr.write(f"check_docker_files: {args.metrics_dump_binary} failed ({e.returncode}):\n"
                             f"{e.stderr}\n")
            sys.exit(2)
        return out.stdout
    with open(args.metrics_dump, encoding="utf-8") as f:
        return f.read()


# --- PromQL, approximately ---------------------------------------------------

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
IDENT = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}')
MATCHER_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)')
GROUPING = re.compile(r'\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)')
LEGEND_LABEL = re.compile(r'\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}')
GRAFANA_VAR = re.compile(r'\$(\{[^}]*\}|[a-zA-Z_][a-zA-Z0-9_]*)')


def substitute_grafana_vars(expr):
    """Replaces Grafana variables by values PromQL accepts."""
    def repl(m):
        name = m.group(1).strip("{}").split(":")[0]
        if name in ("__rate_interval", "__interval", "__range"):
            return "1m"
        if name in ("__interval_ms", "__range_ms", "__range_s"):
            return "60000" if name.endswith("ms") else "60"
        return ".*"  # a template variable, used in a regex matcher
    return GRAFANA_VAR.sub(repl, expr)


def strip_strings(expr):
    return STRING.sub('""', expr)


def metric_names(expr):
    """flowstate_* names in an expression (not inside strings)."""
    return sorted({t for t in IDENT.findall(strip_strings(expr)) if t.startswith("flowstate_")})


# --- The checks ---------------------------------------------------------------

def check_expression(c, where, expr, legend, types, series):
    names = metric_names(expr)
    known = set()
    for name in names:
        if name in series:
            known.add(name)
            continue
        if types.get(name) == "histogram":
            c.error(where, f"{name} is a histogram: query {name}_bucket, _sum or _count")
        elif name in types:
            c.error(where, f"{name} is exported ({types[name]}) but has no series in the dump")
        else:
            c.error(where, f"{name} is not exported by the server")
    labels_of = {n: set(series[n][1]) for n in known}
    target_labels = TARGET_LABELS | c.target_labels
    available = set(target_labels)
    for labels in labels_of.values():
        available |= labels
    bare = strip_strings(expr)
    for m in SELECTOR.finditer(bare):
        name, body = m.group(1), m.group(2)
        if name not in labels_of:
            continue
        for label in MATCHER_LABEL.findall(body):
            if label not in labels_of[name] | target_labels and label != "__name__":
                c.error(where, f"{name} has no label '{label}' (it has: {', '.join(sorted(labels_of[name])) or 'none'})")
    groupings = []
    for m in GROUPING.finditer(bare):
        labels = [x.strip() for x in m.group(2).split(",") if x.strip()]
        for label in labels:
            if label not in available:
                c.error(where, f"'{m.group(1)} ({label})': no metric of the query has label '{label}'")
        if m.group(1) == "by":
            groupings.append(set(labels))
    if len(known) < len(names):
        return names  # already reported; the label checks would only add noise
    for label in LEGEND_LABEL.findall(legend or ""):
        if groupings:
            if not all(label in g for g in groupings):
                c.error(where, f"legend uses {{{{{label}}}}} but the query aggregates it away")
        elif label not in available:
            c.error(where, f"legend uses {{{{{label}}}}}, a label no metric of the query has")
    return names


def promtool_check_rules(promtool, exprs):
    """Runs `promtool check rules` on recording rules of `exprs`; returns (ok, output)."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": substitute_grafana_vars(e)} for i, e in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump(rules, f)
        path = f.name
    try:
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def check_promql_syntax(c, exprs, promtool):
    """Every query must parse as PromQL; on a failure, finds which."""
    if not exprs:
        return
    ok, _ = promtool_check_rules(promtool, [e for _, e in exprs])
    if ok:
        return
    for where, e in exprs:
        ok, out = promtool_check_rules(promtool, [e])
        if not ok:
            c.error(where, f"not valid PromQL: {substitute_grafana_vars(e)}\n  " + out.replace("\n", "\n  "))


def flag_value(argv, flag):
    """The value of --flag VALUE or --flag=VALUE in an argument list."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def port_of(address):
    return address.rsplit(":", 1)[1] if address and ":" in address else None


def parse_dockerfile(c):
    """Returns the serve command's argument list (CMD after ENTRYPOINT)."""
    path = os.path.join(c.docker, "Dockerfile")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        c.error("docker/Dockerfile", "missing")
        return None
    where = "docker/Dockerfile"
    # Join continuation lines, drop comments.
    lines, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        lines.append(cur + s)
        cur = ""
    instructions = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in lines]
    froms = [a for i, a in instructions if i == "FROM"]
    if not froms or not re.match(r"debian:12(\S*)?(\s|$)", froms[0]):
        c.error(where, f"the build stage must start FROM debian:12 (found {froms[:1]})")
    runs = " ".join(a for i, a in instructions if i == "RUN")
    if "scripts/install-deps" not in runs:
        c.error(where, "does not run scripts/install-deps")
    if not os.path.exists(os.path.join(c.source, "scripts", "install-deps")):
        c.error("scripts/install-deps", "missing")
    if "-DFLOWSTATE_NATIVE=OFF" not in runs:
        c.error(where, "must configure with -DFLOWSTATE_NATIVE=OFF (the image runs on other CPUs)")
    if "-DCMAKE_BUILD_TYPE=Release" not in runs:
        c.error(where, "must build with -DCMAKE_BUILD_TYPE=Release")

    def exec_form(arg):
        arg = arg.strip()
        if arg.startswith("["):
            try:
                return json.loads(arg)
            except json.JSONDecodeError:
                c.error(where, f"bad exec form: {arg}")
                return []
        return shlex.split(arg)

    entry = [exec_form(a) for i, a in instructions if i == "ENTRYPOINT"]
    cmd = [exec_form(a) for i, a in instructions if i == "CMD"]
    argv = (entry[-1] if entry else []) + (cmd[-1] if cmd else [])
    if not argv or "serve" not in argv:
        c.error(where, f"the command must be `flowstate serve ...` (found {argv})")
    exposed = set()
    for i, a in instructions:
        if i == "EXPOSE":
            exposed |= {p.split("/")[0] for p in a.split()}
    health = " ".join(a for i, a in instructions if i == "HEALTHCHECK")
    return {"argv": argv, "exposed": exposed, "healthcheck": health, "entrypoint": entry[-1] if entry else []}


def serve_ports(c, where, argv):
    http = flag_value(argv, "--http")
    grpc = flag_value(argv, "--grpc")
    data_dir = flag_value(argv, "--data-dir")
    if not http or not http.startswith("0.0.0.0:"):
        c.error(where, f"serve must listen on all interfaces: --http 0.0.0.0:PORT (found {http})")
    if not grpc or not grpc.startswith("0.0.0.0:"):
        c.error(where, f"serve must listen on all interfaces: --grpc 0.0.0.0:PORT (found {grpc})")
    if data_dir != "/var/lib/flowstate":
        c.error(where, f"--data-dir should be /var/lib/flowstate (found {data_dir})")
    return port_of(http), port_of(grpc)


def container_ports(ports):
    out = set()
    for p in ports or []:
        if isinstance(p, dict):
            out.add(str(p.get("target")))
        else:
            out.add(str(p).split("/")[0].rsplit(":", 1)[-1])
    return out


def flowstate_services(services):
    """The compose services that run the Flowstate image: {name: service}."""
    out = {}
    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        image = str(svc.get("image") or "")
        build = svc.get("build")
        dockerfile = build.get("dockerfile", "") if isinstance(build, dict) else ""
        if image.split(":")[0].rsplit("/", 1)[-1] == "flowstate" or dockerfile.endswith("docker/Dockerfile"):
            out[name] = svc
    return out


def mounts(c, compose_dir, service, name):
    """[(host path or None, container path, is named volume)] of a service."""
    out = []
    for v in service.get("volumes", []) or []:
        if isinstance(v, dict):
            src, dst, kind = v.get("source"), v.get("target"), v.get("type", "volume")
            named = kind == "volume"
        else:
            parts = str(v).split(":")
            if len(parts) < 2:
                continue
            src, dst = parts[0], parts[1]
            named = not (src.startswith(".") or src.startswith("/") or src.startswith("~"))
        host = None if named else os.path.normpath(os.path.join(compose_dir, src))
        out.append((host, dst, named, src))
    return out


def check(c, types, series, promtool):
    compose_path = os.path.join(c.docker, "compose.yaml")
    compose = c.load_yaml(compose_path)
    df = parse_dockerfile(c)
    if compose is None:
        return
    services = compose.get("services") or {}
    tasks = flowstate_services(services)
    if not tasks:
        c.error("docker/compose.yaml", "no flowstate service (one built from docker/Dockerfile or "
                "running image flowstate:...)")
    for s in ("prometheus", "grafana"):
        if s not in services:
            c.error("docker/compose.yaml", f"no service '{s}'")
    if not tasks or any(s not in services for s in ("prometheus", "grafana")):
        return
    declared_volumes = set((compose.get("volumes") or {}).keys())
    for sname, svc in services.items():
        for host, dst, named, src in mounts(c, c.docker, svc, sname):
            if named and src not in declared_volumes:
                c.error("docker/compose.yaml", f"{sname}: volume '{src}' is not declared under volumes:")
            if host is not None and not os.path.exists(host):
                c.error("docker/compose.yaml", f"{sname}: mounts {src}, which does not exist ({c.rel(host)})")

    # Every flowstate task: built from docker/Dockerfile, serving on the
    # Dockerfile's ports, its data directory on a volume of its own; the
    # HTTP and gRPC ports published by one of them (task 0, the API).
    http_ports = {}
    published_any = set()
    data_volumes = {}
    for name, fs in sorted(tasks.items()):
        where = f"docker/compose.yaml {name}"
        build = fs.get("build")
        if isinstance(build, str):
            build = {"context": build}
        if not isinstance(build, dict):
            c.error(where, "needs build: {context: .., dockerfile: docker/Dockerfile}")
        else:
            context = os.path.normpath(os.path.join(c.docker, build.get("context", ".")))
            dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
            if os.path.normpath(dockerfile) != os.path.normpath(os.path.join(c.docker, "Dockerfile")):
                c.error(where, f"builds {c.rel(dockerfile)}, not docker/Dockerfile")
            if os.path.normpath(context) != os.path.normpath(c.source):
                c.error(where, "the build context must be the repository root (the Dockerfile copies the repo)")
        argv = df["argv"] if df else []
        if fs.get("command") is not None:
            command = fs["command"] if isinstance(fs["command"], list) else shlex.split(fs["command"])
            argv = (df["entrypoint"] if df else []) + [str(a) for a in command]
        http_port, grpc_port = serve_ports(c, f"{where} (or Dockerfile CMD)", argv)
        http_ports[name] = http_port
        if df:
            dhttp, dgrpc = serve_ports(c, "docker/Dockerfile CMD", df["argv"])
            if (dhttp, dgrpc) != (http_port, grpc_port):
                c.error(where, f"command ports {http_port}/{grpc_port} differ from the Dockerfile's {dhttp}/{dgrpc}")
        published = container_ports(fs.get("ports"))
        published_any |= published
        for p in published - {http_port, grpc_port}:
            c.error(where, f"publishes container port {p}, on which it does not listen")
        data = [src for _, dst, named, src in mounts(c, c.docker, fs, name) if dst == "/var/lib/flowstate"]
        if not data:
            c.error(where, "no volume at /var/lib/flowstate (its data directory)")
        elif data[0] in data_volumes:
            c.error(where, f"shares the volume '{data[0]}' with {data_volumes[data[0]]}: each task needs "
                    "its own data directory (one server per RocksDB store)")
        else:
            data_volumes[data[0]] = name
    if df:
        dhttp, dgrpc = serve_ports(c, "docker/Dockerfile CMD", df["argv"])
        for p in (dhttp, dgrpc):
            if p and p not in df["exposed"]:
                c.error("docker/Dockerfile", f"EXPOSE lacks port {p}")
            if p and p not in published_any:
                c.error("docker/compose.yaml", f"no flowstate service publishes port {p}")
        if "/healthz" not in df["healthcheck"] or (dhttp and f":{dhttp}/" not in df["healthcheck"]):
            c.error("docker/Dockerfile", f"HEALTHCHECK must GET /healthz on port {dhttp} "
                    f"(found: {df['healthcheck'] or 'none'})")

    # prometheus: its config file is docker/prometheus.yml and scrapes flowstate.
    prom = services["prometheus"]
    pargs = [str(a) for a in (prom.get("command") or [])]
    config_path = flag_value(pargs, "--config.file") or "/etc/prometheus/prometheus.yml"
    prom_port = port_of(flag_value(pargs, "--web.listen-address") or ":9090")
    prom_yml = os.path.join(c.docker, "prometheus.yml")
    mounted = [host for host, dst, named, _ in mounts(c, c.docker, prom, "prometheus") if dst == config_path]
    if not mounted or os.path.normpath(mounted[0]) != os.path.normpath(prom_yml):
        c.error("docker/compose.yaml", f"prometheus: docker/prometheus.yml must be mounted at {config_path}")
    pconf = c.load_yaml(prom_yml)
    if pconf is not None:
        # Labels set on targets: an exported label of the same name would be
        # renamed exported_<name> (as `job` would; hence `job_id`).
        for job in pconf.get("scrape_configs") or []:
            for sc in job.get("static_configs") or []:
                c.target_labels |= set((sc.get("labels") or {}).keys())
        for name, (family, labels) in sorted(series.items()):
            for label in sorted(labels & (c.target_labels | TARGET_LABELS)):
                c.error("docker/prometheus.yml", f"{name} has a label '{label}', which Prometheus sets on "
                        f"every target: it would be renamed exported_{label}")
        r = subprocess.run([promtool, "check", "config", prom_yml], capture_output=True, text=True)
        if r.returncode != 0:
            c.error("docker/prometheus.yml", "promtool check config failed:\n  "
                    + (r.stdout + r.stderr).strip().replace("\n", "\n  "))
        scraped = set()
        for job in pconf.get("scrape_configs") or []:
            for sc in job.get("static_configs") or []:
                for target in sc.get("targets") or []:
                    host, _, port = str(target).rpartition(":")
                    where = f"docker/prometheus.yml job {job.get('job_name')}"
                    if host not in tasks:
                        if host.startswith("flowstate"):
                            c.error(where, f"scrapes {target}, but no flowstate service is named {host}")
                        continue
                    scraped.add(host)
                    if port != http_ports[host]:
                        c.error(where, f"scrapes {host}:{port}, but {host} serves HTTP on {http_ports[host]}")
                    if job.get("metrics_path", "/metrics") != "/metrics":
                        c.error(where, f"metrics_path is {job.get('metrics_path')}, the server serves /metrics")
                    interval = job.get("scrape_interval") or (pconf.get("global") or {}).get("scrape_interval")
                    if interval != "5s":
                        c.error(where, f"scrape_interval should be 5s (found {interval})")
        for name in sorted(set(tasks) - scraped):
            c.error("docker/prometheus.yml", f"no scrape target {name}:{http_ports[name]} (every task's /metrics)")
        deps = prom.get("depends_on") or []
        deps = set(deps.keys()) if isinstance(deps, dict) else set(deps)
        for name in sorted(set(tasks) - deps):
            c.error("docker/compose.yaml", f"prometheus: depends_on lacks {name}")

    # grafana: the provisioned data source and dashboards.
    graf = services["grafana"]
    gmounts = mounts(c, c.docker, graf, "grafana")
    prov = [host for host, dst, _, _ in gmounts if dst == "/etc/grafana/provisioning"]
    prov_dir = os.path.join(c.docker, "grafana", "provisioning")
    if not prov or os.path.normpath(prov[0]) != os.path.normpath(prov_dir):
        c.error("docker/compose.yaml", "grafana: docker/grafana/provisioning must be mounted at "
                "/etc/grafana/provisioning")
    ds_path = os.path.join(prov_dir, "datasources", "prometheus.yaml")
    ds = c.load_yaml(ds_path)
    ds_uid = None
    if ds is not None:
        where = "docker/grafana/provisioning/datasources/prometheus.yaml"
        if ds.get("apiVersion") != 1:
            c.error(where, "apiVersion must be 1")
        proms = [d for d in ds.get("datasources") or [] if d.get("type") == "prometheus"]
        if not proms:
            c.error(where, "no datasource of type prometheus")
        else:
            d = proms[0]
            ds_uid = d.get("uid")
            if not ds_uid:
                c.error(where, "the datasource needs a fixed uid for the dashboard to refer to")
            m = re.match(r"^https?://([^:/]+)(?::(\d+))?", str(d.get("url", "")))
            if not m or m.group(1) != "prometheus" or (m.group(2) or "80") != prom_port:
                c.error(where, f"url should be http://prometheus:{prom_port} (found {d.get('url')})")
    dp_path = os.path.join(prov_dir, "dashboards", "dashboards.yaml")
    dp = c.load_yaml(dp_path)
    dashboard_files = []
    if dp is not None:
        where = "docker/grafana/provisioning/dashboards/dashboards.yaml"
        if dp.get("apiVersion") != 1:
            c.error(where, "apiVersion must be 1")
        providers = [p for p in dp.get("providers") or [] if p.get("type", "file") == "file"]
        if not providers:
            c.error(where, "no file provider")
        for p in providers:
            path = (p.get("options") or {}).get("path")
            hosts = [host for host, dst, named, _ in gmounts
                     if not named and path and (path == dst or path.startswith(dst.rstrip("/") + "/"))]
            if not hosts:
                c.error(where, f"provider path {path} is not a directory compose.yaml mounts into grafana")
                continue
            dst = [dst for host, dst, named, _ in gmounts if host == hosts[0]][0]
            host_dir = os.path.normpath(os.path.join(hosts[0], os.path.relpath(path, dst)))
            files = sorted(f for f in os.listdir(host_dir) if f.endswith(".json")) if os.path.isdir(host_dir) else []
            if not files:
                c.error(where, f"provider path {path} ({c.rel(host_dir)}) holds no dashboard")
            dashboard_files += [os.path.join(host_dir, f) for f in files]
    if os.path.join(c.docker, "grafana", "dashboards", "flowstate.json") not in dashboard_files:
        c.error("docker/grafana/dashboards/flowstate.json", "missing, or not provisioned")

    exprs = []
    used = set()
    for path in dashboard_files:
        used |= check_dashboard(c, path, ds_uid, types, series, exprs)
    check_promql_syntax(c, exprs, promtool)
    unused = sorted(set(types) - {series[n][0] for n in used if n in series})
    if unused and not c.errors:
        print("check_docker_files: note: exported but not on a dashboard: " + ", ".join(unused))


def check_dashboard(c, path, ds_uid, types, series, exprs):
    where = c.rel(path)
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except (json.JSONDecodeError, OSError) as e:
        c.error(where, f"not valid JSON: {e}")
        return set()
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dash:
            c.error(where, f"no '{key}'")
    if not isinstance(dash.get("schemaVersion"), int) or dash.get("schemaVersion", 0) < 36:
        c.error(where, f"schemaVersion {dash.get('schemaVersion')}: expected a Grafana 9/10 dashboard (>= 36)")

    def check_ds(w, ds):
        if ds is None:
            return  # the panel's or the default
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if isinstance(uid, str) and uid.startswith("$"):
            return
        if ds_uid and uid != ds_uid:
            c.error(w, f"datasource uid '{uid}' is not the provisioned one ('{ds_uid}')")

    used = set()
    ids = set()

    def walk(panels):
        for p in panels or []:
            pw = f"{where} panel '{p.get('title')}'"
            if p.get("id") in ids:
                c.error(pw, f"duplicate panel id {p.get('id')}")
            ids.add(p.get("id"))
            if p.get("type") == "row":
                walk(p.get("panels"))
                continue
            if "gridPos" not in p:
                c.error(pw, "no gridPos")
            check_ds(pw, p.get("datasource"))
            targets = p.get("targets") or []
            if not targets:
                c.error(pw, "no queries")
            for t in targets:
                tw = f"{pw} query {t.get('refId')}"
                check_ds(tw, t.get("datasource"))
                expr = t.get("expr")
                if not expr:
                    c.error(tw, "no expr")
                    continue
                used.update(check_expression(c, tw, expr, t.get("legendFormat"), types, series))
                exprs.append((tw, expr))
            walk(p.get("panels"))

    walk(dash.get("panels"))
    if not used:
        c.error(where, "no panel queries a flowstate_* metric")
    for v in (dash.get("templating") or {}).get("list") or []:
        if v.get("type") != "query":
            continue
        vw = f"{where} variable '{v.get('name')}'"
        check_ds(vw, v.get("datasource"))
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"^\s*label_values\(\s*([^,]+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", q or "")
        if m:
            metric, label = m.group(1), m.group(2)
            names = metric_names(metric)
            used.update(check_expression(c, vw, metric, "{{" + label + "}}", types, series))
            if not names:
                c.error(vw, f"label_values over {metric}: not a flowstate metric")
        elif q and "flowstate_" in q:
            used.update(check_expression(c, vw, q, "", types, series))
            exprs.append((vw, q))
    return used


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="the repository root")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--metrics-dump", help="a file with the server's /metrics text")
    g.add_argument("--metrics-dump-binary", help="a program that prints it (the metrics_dump target)")
    ap.add_argument("--promtool", default=None, help="promtool to use (default: from PATH)")
    args = ap.parse_args()

    promtool = args.promtool or shutil.which("promtool")
    if not promtool or not os.path.exists(promtool):
        sys.stderr.write("check_docker_files: promtool not found: install Debian's `prometheus` package "
                         "(scripts/install-deps does)\n")
        return 2
    text = load_metrics(args)
    types, series = parse_exposition(text)
    n_exported = len(types)
    exported_pending = add_pending(types, series, PENDING_METRICS)
    if not any(n.startswith("flowstate_") for n in types):
        sys.stderr.write("check_docker_files: the metrics dump has no flowstate_* family:\n" + text[:2000] + "\n")
        return 1
    c = Checker(os.path.abspath(args.source))
    check(c, types, series, promtool)
    if c.errors:
        for e in c.errors:
            print(f"check_docker_files: {e}")
        print(f"check_docker_files: {len(c.errors)} problem(s)")
        return 1
    for name in exported_pending:
        print(f"check_docker_files: note: {name} is exported now: its PENDING_METRICS entry can go")
    print(f"check_docker_files: OK ({n_exported} exported families; docker/ is consistent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
