#!/usr/bin/env node
// api/openapi.json checked by tools from npm (versions pinned by
// package-lock.json; `npm ci` in this folder installs them):
//
//   node check_openapi.js validate SPEC
//     SPEC is a valid OpenAPI 3 document (@apidevtools/swagger-parser: the
//     OpenAPI schema, $refs, unique operationIds, path parameters); and, so
//     that the check can be seen to fail, a copy with a broken $ref is not.
//
//   node check_openapi.js responses SPEC --flowstate BIN [--timeout S]
//     Starts BIN serve (free ports, its own data dir and data root, killed
//     by its PID at the end), drives a session, a short training job, its
//     checkpoints, export, predict and some errors, and validates every
//     response against the schema the description gives for its route,
//     method, status and content type (ajv). Fails on any mismatch, an
//     undocumented status, or after --timeout seconds (default 120).
//
// Exit status 0: passed; 1: failed; 2: bad usage.
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawn } = require("child_process");
const SwaggerParser = require("@apidevtools/swagger-parser");
const Ajv = require("ajv");
const addFormats = require("ajv-formats");

function usage() {
  process.stderr.write("usage: check_openapi.js validate SPEC\n" +
                       "       check_openapi.js responses SPEC --flowstate BIN [--timeout S]\n");
  process.exit(2);
}

async function validate(specPath) {
  const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
  const api = await SwaggerParser.validate(structuredClone(spec));
  let ops = 0;
  for (const item of Object.values(api.paths)) {
    for (const m of ["get", "put", "post", "delete", "patch"]) if (item[m]) ops++;
  }
  console.log(`valid OpenAPI ${api.openapi}: ${Object.keys(api.paths).length} paths, ${ops} operations, ` +
              `${Object.keys(spec.components.schemas).length} schemas`);
  // The validator must be able to fail: a dangling $ref.
  const broken = structuredClone(spec);
  broken.paths["/v1/jobs"].get.responses["200"].content["application/json"].schema.$ref =
      "#/components/schemas/NoSuchSchema";
  try {
    await SwaggerParser.validate(broken);
  } catch (e) {
    console.log("a broken copy is refused: " + String(e.message).split("\n")[0]);
    return;
  }
  throw new Error("the validator accepted a document with a dangling $ref");
}

// --- Responses of a real server.

class Checker {
  constructor(api) {
    this.api = api;  // dereferenced
    this.ajv = new Ajv({ strict: false, allErrors: true });
    addFormats(this.ajv);
    this.checked = 0;
    this.failures = [];
    this.seen = new Set();
  }
  // The operation of `method` on the description's path template that matches `target`.
  find(method, target) {
    const p = target.split("?")[0];
    for (const [template, item] of Object.entries(this.api.paths)) {
      const re = new RegExp("^" + template.replace(/\{[^}]+\}/g, "[^/]+") + "$");
      if (re.test(p) && item[method.toLowerCase()]) return { template, op: item[method.toLowerCase()] };
    }
    return null;
  }
  check(method, target, status, contentType, body) {
    const where = `${method} ${target} -> ${status}`;
    const found = this.find(method, target);
    if (!found) return this.fail(where, "no operation describes it");
    const resp = found.op.responses[String(status)] || found.op.responses.default;
    if (!resp) return this.fail(where, `status ${status} is not among the described ones (${Object.keys(found.op.responses)})`);
    const type = (contentType || "").split(";")[0].trim();
    if (!resp.content) return body.length ? this.fail(where, "a body where none is described") : this.pass(found, status);
    const media = resp.content[type];
    if (!media) return this.fail(where, `content type '${type}' is not described (${Object.keys(resp.content)})`);
    if (type === "application/json") {
      let doc;
      try { doc = JSON.parse(body.toString("utf8")); } catch (e) { return this.fail(where, "not JSON: " + e.message); }
      const validateFn = this.ajv.compile(media.schema);
      if (!validateFn(doc)) {
        return this.fail(where, this.ajv.errorsText(validateFn.errors, { separator: "\n    " }) +
                                "\n  body: " + body.toString("utf8").slice(0, 400));
      }
    }
    this.pass(found, status);
  }
  pass(found, status) {
    this.checked++;
    this.seen.add(`${found.op.operationId} ${status}`);
  }
  fail(where, why) {
    this.failures.push(`${where}: ${why}`);
  }
}

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

let serverProcess = null;  // the server `responses` started, until it is reaped

async function responses(specPath, flowstate, timeoutSeconds) {
  const api = await SwaggerParser.dereference(JSON.parse(fs.readFileSync(specPath, "utf8")));
  const c = new Checker(api);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "flowstate_openapi_"));
  const root = path.join(tmp, "root");
  fs.mkdirSync(root);
  // y = 2a - 3b: the job below learns it in a few steps.
  let csv = "a,b,target\n";
  for (let i = 0; i < 64; i++) {
    const a = (i % 8) / 8, b = Math.floor(i / 8) / 8;
    csv += `${a},${b},${2 * a - 3 * b}\n`;
  }
  fs.writeFileSync(path.join(root, "points.csv"), csv);
  const portFile = path.join(tmp, "ports.json");
  const log = fs.openSync(path.join(tmp, "server.log"), "w");
  const server = spawn(flowstate, ["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                                   "--port-file", portFile, "--data-dir", path.join(tmp, "data"),
                                   "--data-root", root], { stdio: ["ignore", log, log] });
  serverProcess = server;
  let exited = false;
  const exitPromise = new Promise((resolve) => server.on("exit", () => { exited = true; resolve(); }));
  const deadline = Date.now() + timeoutSeconds * 1000;
  const left = () => deadline - Date.now();
  // SIGTERM, then SIGKILL after 5 s; returns once the server is reaped.
  const cleanup = async () => {
    if (!exited) server.kill("SIGTERM");
    await Promise.race([exitPromise, sleep(5000)]);
    if (!exited) server.kill("SIGKILL");
    await exitPromise;
    serverProcess = null;
  };
  try {
    while (!fs.existsSync(portFile) || fs.statSync(portFile).size === 0) {
      if (exited) throw new Error("the server exited before writing its ports");
      if (left() < 0) throw new Error("no port file in time");
      await sleep(100);
    }
    await sleep(50);
    const base = `http://127.0.0.1:${JSON.parse(fs.readFileSync(portFile, "utf8")).http}`;
    // One request; its response is checked against the description, and its
    // status against `want` (the status this request must get).
    const call = async (want, method, target, body, contentType = "application/json") => {
      if (left() < 0) throw new Error(`deadline passed before ${method} ${target}`);
      const init = { method, signal: AbortSignal.timeout(Math.max(1000, left())) };
      if (body !== undefined) {
        init.body = body;
        init.headers = { "Content-Type": contentType };
      }
      const r = await fetch(base + target, init);
      const bytes = Buffer.from(await r.arrayBuffer());
      c.check(method, target, r.status, r.headers.get("content-type"), bytes);
      if (r.status !== want) c.fail(`${method} ${target}`, `status ${r.status}, want ${want}: ${bytes.toString("utf8").slice(0, 300)}`);
      return { status: r.status, headers: r.headers, bytes, json: () => JSON.parse(bytes.toString("utf8")) };
    };

    for (const t of ["/healthz", "/readyz", "/v1/openapi.json", "/v1/ops", "/v1/devices", "/v1/cluster", "/v1/jobs"]) {
      await call(200, "GET", t);
    }
    await call(200, "GET", "/metrics");

    // A session: create, extend, run (three encodings), errors, close.
    const graph = { nodes: [
      { name: "x", op: "Placeholder", attrs: { dtype: "float32", shape: [-1] } },
      { name: "two", op: "Const", attrs: { dtype: "float32", value: 2.0 } },
      { name: "y", op: "Mul", inputs: ["x", "two"] } ] };
    // Its gradients: dy/dx of the same graph, and a name it does not have.
    await call(200, "POST", "/v1/gradients", JSON.stringify({ graph, y: "y", xs: ["x"] }));
    await call(404, "POST", "/v1/gradients", JSON.stringify({ graph, y: "y", xs: ["nope"] }));
    await call(400, "POST", "/v1/gradients", JSON.stringify({ graph, y: "y" }));
    const created = await call(201, "POST", "/v1/sessions", JSON.stringify({ graph }));
    const sid = created.json().session_id;
    await call(200, "POST", `/v1/sessions/${sid}/extend`, JSON.stringify({ graph: { nodes: [
      { name: "z", op: "Add", inputs: ["y", "x"] } ] } }));
    for (const encoding of ["data", "b64", "nested"]) {
      await call(200, "POST", `/v1/sessions/${sid}/run`, JSON.stringify({ feeds: { x: [1.0, 2.5] }, fetches: ["y", "z"], encoding }));
    }
    await call(404, "POST", `/v1/sessions/${sid}/run`, JSON.stringify({ feeds: { x: { dtype: "float32", shape: [2], data: [1, 2] } }, fetches: ["nope"] }));
    await call(400, "POST", `/v1/sessions/${sid}/run`, "{not json");
    await call(200, "POST", `/v1/sessions/${sid}/cancel`, JSON.stringify({ step_tag: "none-running" }));
    await call(400, "POST", `/v1/sessions/${sid}/cancel`, JSON.stringify({}));
    await call(400, "POST", "/v1/sessions", JSON.stringify({ graph: { nodes: [{ name: "a", op: "NoSuchOp" }] } }));
    await call(200, "DELETE", `/v1/sessions/${sid}`);
    await call(404, "DELETE", `/v1/sessions/${sid}`);

    // A short job: submit, watch until it ends, checkpoints, export, predict, delete.
    const job = {
      name: "openapi-check",
      graph: { nodes: [
        { name: "x", op: "Placeholder", attrs: { dtype: "float32", shape: [-1, 2] } },
        { name: "y", op: "Placeholder", attrs: { dtype: "float32", shape: [-1] } },
        { name: "w", op: "Variable", attrs: { dtype: "float32", shape: [2, 1], init: "zeros" } },
        { name: "p", op: "MatMul", inputs: ["x", "w"] },
        { name: "flat", op: "Const", attrs: { dtype: "int32", value: [-1] } },
        { name: "pred", op: "Reshape", inputs: ["p", "flat"] },
        { name: "sq", op: "SquaredDifference", inputs: ["pred", "y"] },
        { name: "axes", op: "Const", attrs: { dtype: "int32", value: [] } },
        { name: "loss", op: "Mean", inputs: ["sq", "axes"] } ] },
      loss: "loss",
      optimizer: { type: "sgd", learning_rate: 0.1 },
      input: { format: "csv", files: { x: "points.csv", y: "points.csv" },
               columns: { x: ["a", "b"], y: ["target"] }, batch_size: 16, epochs: 2 },
      eval: { files: { x: "points.csv", y: "points.csv" }, metrics: ["loss"] },
      checkpoint: { every_steps: 3, keep: 2 },
    };
    const submitted = await call(201, "POST", "/v1/jobs", JSON.stringify(job));
    const id = submitted.json().job_id;
    let info = submitted.json();
    while (!["SUCCEEDED", "FAILED", "CANCELLED"].includes(info.state)) {
      await sleep(50);
      info = (await call(200, "GET", `/v1/jobs/${id}`)).json();
    }
    if (info.state !== "SUCCEEDED") c.fail(`job ${id}`, `ended ${info.state}: ${info.error}`);
    await call(200, "GET", `/v1/jobs/${id}/events?history=1`);
    await call(200, "GET", "/v1/jobs");
    await call(200, "GET", `/v1/jobs/${id}/checkpoints`);
    await call(201, "POST", `/v1/jobs/${id}/checkpoints`);
    const fsck = await call(200, "GET", `/v1/jobs/${id}/checkpoints/export`);
    const npz = await call(200, "GET", `/v1/jobs/${id}/checkpoints/export?format=npz`);
    if (npz.bytes.subarray(0, 4).toString("latin1") !== "PK\x03\x04") c.fail("export?format=npz", "not a zip archive");
    if (!/\.npz"$/.test(npz.headers.get("content-disposition") || "")) c.fail("export?format=npz", "Content-Disposition does not name an .npz");
    await call(400, "GET", `/v1/jobs/${id}/checkpoints/export?format=tar`);
    await call(404, "GET", `/v1/jobs/${id}/checkpoints/export?step=999`);
    await call(201, "POST", "/v1/checkpoints/import", fsck.bytes, "application/octet-stream");
    await call(400, "POST", "/v1/checkpoints/import", npz.bytes, "application/octet-stream");
    await call(200, "POST", `/v1/jobs/${id}/predict`, JSON.stringify({ inputs: { x: { dtype: "float32", shape: [2, 2], data: [1, 0, 0, 1] } }, fetches: ["pred"] }));
    await call(400, "POST", `/v1/jobs/${id}/predict`, JSON.stringify({ inputs: {} }));
    await call(400, "POST", `/v1/jobs/${id}/pause`);
    await call(400, "POST", `/v1/jobs/${id}/cancel`);
    await call(404, "GET", "/v1/jobs/job-404");
    await call(400, "POST", "/v1/jobs", JSON.stringify({ graph: { nodes: [] }, loss: "loss" }));
    await call(403, "POST", "/v1/jobs", JSON.stringify(Object.assign({}, job, { input: Object.assign({}, job.input, { files: { x: "../../etc/passwd", y: "points.csv" } }) })));
    await call(200, "DELETE", `/v1/jobs/${id}`);

    // Datasets: an .npy of two float32 in two chunks, a refused file, an offset out of order.
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    dict += " ".repeat((64 - ((10 + dict.length + 1) % 64)) % 64) + "\n";
    const npy = Buffer.concat([Buffer.from([0x93]), Buffer.from("NUMPY"), Buffer.from([1, 0, dict.length & 255, dict.length >> 8]),
                               Buffer.from(dict), Buffer.from(new Float32Array([1.5, -2]).buffer)]);
    const part = (await call(201, "POST", "/v1/datasets?final=false", npy.subarray(0, 20), "application/octet-stream")).json();
    await call(409, "POST", `/v1/datasets/${part.dataset_id}/append?offset=3`, npy.subarray(20), "application/octet-stream");
    await call(200, "POST", `/v1/datasets/${part.dataset_id}/append?offset=20`, npy.subarray(20), "application/octet-stream");
    await call(200, "GET", "/v1/datasets");
    await call(200, "GET", `/v1/datasets/${part.dataset_id}`);
    await call(400, "POST", "/v1/datasets", Buffer.from("a,b\n1,2\n"), "application/octet-stream");
    await call(200, "DELETE", `/v1/datasets/${part.dataset_id}`);
    await call(404, "GET", `/v1/datasets/${part.dataset_id}`);
  } finally {
    await cleanup();
    fs.closeSync(log);
  }
  const serverLog = fs.readFileSync(path.join(tmp, "server.log"), "utf8");
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`${c.checked} responses match the description (${[...c.seen].sort().join(", ")})`);
  if (c.failures.length) {
    process.stderr.write(`${c.failures.length} responses do not match api/openapi.json:\n  ` +
                         c.failures.join("\n  ") + "\n--- server log (tail)\n" + serverLog.slice(-3000) + "\n");
    throw new Error("responses differ from the description");
  }
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) usage();
  const [mode, spec] = args;
  if (mode === "validate") return validate(spec);
  if (mode !== "responses") usage();
  let flowstate = null, timeout = 120;
  for (let i = 2; i < args.length; i++) {
    if (args[i] === "--flowstate") flowstate = args[++i];
    else if (args[i] === "--timeout") timeout = Number(args[++i]);
    else usage();
  }
  if (!flowstate) usage();
  const timer = setTimeout(() => {
    process.stderr.write(`check_openapi.js: no result after ${timeout + 30} s\n`);
    if (serverProcess) serverProcess.kill("SIGKILL");
    process.exit(1);
  }, (timeout + 30) * 1000);
  timer.unref();
  return responses(spec, flowstate, timeout);
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write("FAIL: " + (e && e.stack || e) + "\n");
  process.exit(1);
});
