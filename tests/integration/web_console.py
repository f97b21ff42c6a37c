#!/usr/bin/python3
"""The web console (GET /) in a real browser: headless Chromium driven by
Selenium against a real `flowstate serve` training the Fashion-MNIST MLP.

  1. No auth: the jobs table lists the job, whose name is hostile markup
     and must show as text; the job's live loss curve gains points while it
     runs (counted twice in the uPlot instance's data); evaluations fill the
     second chart and the metrics table; a checkpoint export link downloads;
     Cancel on the page makes the job CANCELLED (checked over the API);
     devices and cluster pages list their rows; the browser logged no error
     and no Content-Security-Policy violation.
  2. A server with auth.tokens: without a token the page shows the auth
     error; a wrong one too; with the right one the table, the live curve
     (read with fetch(), which sends the token) and Cancel work.

Screenshots (PNG) go to --out. Exits 77 (skipped) only when chromium,
chromedriver or python3-selenium is missing.

  tests/integration/web_console.py --flowstate build/flowstate --source . --out DIR
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">mlp'
TOKEN = "console-s3cret"
SERVERS = []


def fail(msg):
    print("web_console: FAIL: " + msg, file=sys.stderr)
    for s in SERVERS:
        print("--- %s, last lines:\n%s" % (s.log_path, s.tail()), file=sys.stderr)
    raise SystemExit(1)


def wait_for(what, fn, timeout=30, interval=0.1):
    """fn()'s first truthy value within `timeout` seconds, or a failure."""
    deadline = time.time() + timeout
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
            last = v
        except Exception as e:  # a stale element, a page still loading
            last = e
        if time.time() > deadline:
            fail("timed out after %d s waiting for %s (last: %r)" % (timeout, what, last))
        time.sleep(interval)


class Server:
    def __init__(self, binary, tmp, name, data_root, token=None):
        self.token = token
        port_file = os.path.join(tmp, name + ".ports.json")
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "wb")
        args = [binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                "--port-file", port_file, "--data-dir", os.path.join(tmp, name + "-data"),
                "--data-root", data_root]
        if token:
            args += ["--set", "auth.tokens=" + token]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        SERVERS.append(self)
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                fail("flowstate serve exited with %d before listening" % self.proc.returncode)
            if time.time() > deadline:
                fail("no port file after 30 s")
            time.sleep(0.05)
        time.sleep(0.05)
        with open(port_file) as f:
            self.base = "http://127.0.0.1:%d" % json.load(f)["http"]

    def tail(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace")

    def request(self, method, path, body=None, raw=False):
        headers = {"Authorization": "Bearer " + self.token} if self.token else {}
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                payload = r.read()
                return r.status, payload if raw else json.loads(payload)
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def job(self, job_id):
        code, j = self.request("GET", "/v1/jobs/" + job_id)
        if code != 200:
            fail("GET /v1/jobs/%s: %d %s" % (job_id, code, j))
        return j

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                fail("flowstate serve did not stop 30 s after SIGTERM")
        self.log.close()
        SERVERS.remove(self)


def fashion_job(source, name, epochs):
    """The Fashion-MNIST MLP of examples/jobs on 3000 examples an epoch, with
    an evaluation every epoch and a checkpoint every 100 steps: long enough
    to watch, cancelled by the test."""
    with open(os.path.join(source, "examples", "jobs", "fashion_mlp.json")) as f:
        j = json.load(f)
    j["name"] = name
    j["optimizer"] = {"type": "adam", "learning_rate": 0.001}
    j["input"].update({"max_examples": 3000, "batch_size": 64, "epochs": epochs})
    j["eval"].update({"max_examples": 500, "batch_size": 500})
    j["checkpoint"] = {"every_steps": 100, "keep": 2}
    return j


def start_browser(tmp, out):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    # Without the networking flags Chromium keeps trying to reach Google's
    # services, which on a machine without a network makes it slow.
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1400",
                 "--user-data-dir=" + os.path.join(tmp, "chromium-profile")):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(shutil.which("chromedriver"), log_path=os.path.join(out, "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return driver


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def chart_points(driver, name):
    return js(driver, "const u = window.flowstateConsole && window.flowstateConsole.chart(arguments[0]);"
                      "return u ? u.data[0].length : -1;", name)


def click(driver, selector):
    from selenium.webdriver.common.by import By

    def attempt():
        e = driver.find_element(By.CSS_SELECTOR, selector)
        if not e.is_enabled():
            return False
        e.click()
        return True
    wait_for("a click on " + selector, attempt)


def text_of(driver, selector):
    return js(driver, "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
              selector)


def browser_errors(driver):
    """SEVERE entries and CSP reports in the browser's console log, but for
    a 404 of GET /v1/jobs/{id}/history, which the console takes as "this
    server keeps no history"."""
    out = []
    for e in driver.get_log("browser"):
        m = e.get("message", "")
        if "/history" in m and " 404 " in m:
            continue
        if e.get("level") == "SEVERE" or "Content Security Policy" in m or "Content-Security-Policy" in m:
            out.append(m)
    return out


def watch_live_curve(driver, server, job_id):
    """The open job's loss chart gains points while the job runs."""
    n1 = wait_for("the loss chart's first points", lambda: chart_points(driver, "loss") > 0 and
                  chart_points(driver, "loss"))
    state = server.job(job_id)["state"]
    if state != "RUNNING":
        fail("the job is %s, not RUNNING, while the curve is watched" % state)
    n2 = wait_for("the loss chart to gain 3 points (had %d)" % n1,
                  lambda: chart_points(driver, "loss") >= n1 + 3 and chart_points(driver, "loss"), timeout=20)
    steps = js(driver, "return window.flowstateConsole.chart('loss').data[0];")
    if steps != sorted(set(steps)):
        fail("the loss chart's steps are not increasing: %s" % steps[-20:])
    print("live curve: %d points, then %d (last steps %s)" % (n1, n2, steps[-5:]))
    # A server with GET /v1/jobs/{id}/history: the curve starts with the
    # job's past, not where the page came in.
    code, history = server.request("GET", "/v1/jobs/%s/history" % job_id)
    if code == 200 and history.get("steps"):
        if steps[0] > history["steps"][-1]["step"]:
            fail("the curve starts at step %d, after the history it loaded (%d..%d)" % (
                steps[0], history["steps"][0]["step"], history["steps"][-1]["step"]))
        print("the curve starts with the job's history (step %d)" % steps[0])
    elif code != 404:
        fail("GET /v1/jobs/%s/history: %d %s" % (job_id, code, history))


def cancel_from_page(driver, server, job_id):
    click(driver, '#job-detail button[data-action="cancel"]')
    j = wait_for("the job to be CANCELLED after Cancel on the page",
                 lambda: (lambda j: j if j["state"] == "CANCELLED" else None)(server.job(job_id)), timeout=30)
    wait_for("the table to show CANCELLED", lambda: text_of(
        driver, '#jobs-table tr[data-job="%s"] .state' % job_id) == "CANCELLED", timeout=15)
    print("cancelled from the page at step %d" % j["step"])


def no_auth_part(args, tmp, driver, data_root):
    server = Server(args.flowstate, tmp, "open", data_root)
    code, job = server.request("POST", "/v1/jobs", fashion_job(args.source, HOSTILE, 2000))
    if code != 201:
        fail("submit: %d %s" % (code, job))
    job_id = job["job_id"]
    wait_for("the job to run", lambda: server.job(job_id)["state"] == "RUNNING")

    driver.get(server.base + "/")
    row = '#jobs-table tr[data-job="%s"]' % job_id
    wait_for("the jobs table to list " + job_id, lambda: text_of(driver, row + " .job-id") == job_id)
    name = text_of(driver, row + " .job-name")
    if name != HOSTILE:
        fail("the job's name is not shown as text: %r" % name)
    injected = js(driver, "return [window.__pwned === undefined,"
                          " document.querySelectorAll('#jobs-table script, #jobs-table img').length];")
    if injected != [True, 0]:
        fail("the job's name was rendered as markup: %s" % injected)
    print("jobs table lists %s; its name shows as text" % job_id)

    click(driver, row)
    wait_for("the job's detail", lambda: js(driver, "return window.flowstateConsole.jobId();") == job_id)
    watch_live_curve(driver, server, job_id)
    wait_for("the evaluation chart's points", lambda: chart_points(driver, "eval") > 0)
    labels = js(driver, "return window.flowstateConsole.chart('eval').series.map(s => s.label);")
    if "accuracy" not in labels:
        fail("the evaluation chart has no accuracy series: %s" % labels)
    wait_for("a row in the metrics table", lambda: js(
        driver, "return document.querySelectorAll('#metrics-table tbody tr').length;") > 0)
    if text_of(driver, "#job-detail h2 .job-name") != HOSTILE:
        fail("the detail's title is not the name as text")

    href = wait_for("a checkpoint export link", lambda: js(
        driver, "const a = document.querySelector('#checkpoints a.export'); return a && a.getAttribute('href');"),
        timeout=30)
    if "/checkpoints/export?step=" not in href:
        fail("export link: %s" % href)
    code, body = server.request("GET", href, raw=True)
    if code != 200 or len(body) == 0:
        fail("the export link %s answered %d" % (href, code))
    print("checkpoint export link %s: %d bytes" % (href, len(body)))
    spec = wait_for("the job's configuration", lambda: js(
        driver, "const p = document.getElementById('job-spec'); return p && p.textContent;"), timeout=30)
    if '"optimizer"' not in spec or '"graph"' not in spec:
        fail("the configuration panel does not show the submitted job: %r" % spec[:200])
    npz = js(driver, "const a = document.querySelector('#checkpoints a.export-npz'); "
                     "return a && a.getAttribute('href');")
    if not npz or "format=npz" not in npz:
        fail("no .npz export link beside the .fsck one: %s" % npz)
    code, body = server.request("GET", npz, raw=True)
    if code != 200 or not body.startswith(b"PK"):
        fail("the .npz link %s answered %d with %r" % (npz, code, body[:8]))
    print("npz export link %s: %d bytes" % (npz, len(body)))

    shot = os.path.join(args.out, "web_console.png")
    driver.save_screenshot(shot)
    print("screenshot: " + shot)
    cancel_from_page(driver, server, job_id)

    driver.get(server.base + "/#/devices")
    wait_for("the devices table", lambda: js(
        driver, "return document.querySelectorAll('#devices-table tr[data-device]').length;") > 0)
    mem = text_of(driver, "#devices-table tr[data-device] .memory")
    if not mem or "B" not in mem:
        fail("the devices table shows no memory in use: %r" % mem)
    driver.save_screenshot(os.path.join(args.out, "web_console_devices.png"))
    driver.get(server.base + "/#/cluster")
    wait_for("the cluster table with a task UP", lambda: text_of(
        driver, "#cluster-table tr[data-task] .state") == "UP")
    print("devices and cluster pages: ok (memory %s)" % mem)

    errors = browser_errors(driver)
    if errors:
        fail("the browser logged errors:\n  " + "\n  ".join(errors))
    # Leave the page before its server goes: a poll of the old page would
    # otherwise fail (connection refused) in the next part's log.
    driver.get("about:blank")
    driver.get_log("browser")
    server.stop()


def auth_part(args, tmp, driver, data_root):
    server = Server(args.flowstate, tmp, "auth", data_root, token=TOKEN)
    code, job = server.request("POST", "/v1/jobs", fashion_job(args.source, "auth-mlp", 2000))
    if code != 201:
        fail("submit with the token: %d %s" % (code, job))
    job_id = job["job_id"]
    row = '#jobs-table tr[data-job="%s"]' % job_id

    driver.get(server.base + "/")  # another origin: no token in sessionStorage
    banner = wait_for("the auth error without a token", lambda: js(
        driver, "const b = document.getElementById('banner');"
                "return !b.hidden && b.dataset.kind === 'auth' && b.textContent;"))
    if "token" not in banner:
        fail("the auth error does not ask for a token: %r" % banner)
    if text_of(driver, row) is not None:
        fail("the table lists a job without a token")
    print("without a token: %r" % banner)

    driver.find_element("css selector", "#token").send_keys("wrong-token")
    click(driver, "#token-save")
    wait_for("the auth error with a wrong token", lambda: js(
        driver, "const b = document.getElementById('banner');"
                "return !b.hidden && b.dataset.kind === 'auth' && /invalid|wrong|not/i.test(b.textContent);"))
    driver.find_element("css selector", "#token").send_keys(TOKEN)
    click(driver, "#token-save")
    wait_for("the jobs table with the token", lambda: text_of(driver, row + " .job-id") == job_id)
    if not js(driver, "return document.getElementById('banner').hidden;"):
        fail("the auth error stays after the right token")
    if js(driver, "return sessionStorage.getItem('flowstate.token');") != TOKEN:
        fail("the token is not kept in sessionStorage")
    wait_for("the job to run", lambda: server.job(job_id)["state"] == "RUNNING")
    click(driver, row)
    watch_live_curve(driver, server, job_id)
    driver.save_screenshot(os.path.join(args.out, "web_console_auth.png"))
    # Pause and Resume from the page, with the token.
    for action, state in (("pause", "PAUSED"), ("resume", "RUNNING")):
        click(driver, '#job-detail button[data-action="%s"]' % action)
        wait_for("the job to be %s after %s on the page" % (state, action),
                 lambda: server.job(job_id)["state"] == state)
        wait_for("the detail to show " + state, lambda: text_of(driver, "#job-detail h2 .state") == state)
    print("paused and resumed from the page")
    cancel_from_page(driver, server, job_id)
    errors = [e for e in browser_errors(driver) if " 401 " not in e and "401 (Unauthorized)" not in e]
    if errors:
        fail("the browser logged errors besides the expected 401s:\n  " + "\n  ".join(errors))
    server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--source", required=True, help="the repository root (examples/jobs)")
    ap.add_argument("--out", required=True, help="where the screenshots go")
    ap.add_argument("--data-root", default="/usr/share/datasets")
    args = ap.parse_args()
    missing = [p for p in ("chromium", "chromedriver") if shutil.which(p) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("python3-selenium")
    if missing:
        print("web_console: SKIP: %s not installed (scripts/install-deps installs them)" % ", ".join(missing))
        return 77
    if not os.path.exists(os.path.join(args.data_root, "fashion-mnist", "train-images-idx3-ubyte.gz")):
        fail("no Fashion-MNIST under %s (Debian's dataset-fashion-mnist)" % args.data_root)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        driver = start_browser(tmp, args.out)
        try:
            no_auth_part(args, tmp, driver, args.data_root)
            auth_part(args, tmp, driver, args.data_root)
        finally:
            driver.quit()
            for s in list(SERVERS):
                if s.proc.poll() is None:
                    s.proc.kill()
                    s.proc.wait(timeout=30)
    print("web console: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
