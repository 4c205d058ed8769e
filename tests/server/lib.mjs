// Shared helpers for the `dspark serve` tests: start a server on a free loopback port and always
// stop it (even when a test throws or is killed), read SSE streams, parse /metrics, read RSS, and
// count checks.
//
// Every test takes the same flags:
//   --dspark BIN      the dspark binary
//   --model DIR       the target (models/demo)
//   --drafter DIR     its DSpark drafter (models/demo-dspark), for --speculative-config
//   --npm-dir DIR     where server_npm_install put the `openai` package (openai_client_test)
//   --threads N       engine threads for the server (default 1)
// and test-specific ones (see each file).
import { spawn } from "node:child_process";
import fs from "node:fs";

// ---------------------------------------------------------------------------------------------
// Flags.
export function parseArgs(argv = process.argv.slice(2)) {
  const out = { threads: 1 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${JSON.stringify(a)}`);
    const key = a.slice(2).replace(/-/g, "_");
    const v = argv[i + 1];
    if (v === undefined || v.startsWith("--")) throw new Error(`${a} needs a value`);
    out[key] = /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
    i++;
  }
  for (const k of ["dspark", "model"]) if (!out[k]) throw new Error(`--${k} is required`);
  if (!fs.existsSync(out.dspark)) throw new Error(`--dspark ${out.dspark}: no such file`);
  return out;
}

// vLLM's --speculative-config for the demo's DSpark drafter (the Makefile's DEMO_SPEC without the
// int8 option, which needs AVX512-BF16).
export function specConfig(drafter) {
  if (!drafter) throw new Error("--drafter is required for the speculative server");
  return JSON.stringify({
    model: drafter, method: "dspark", num_speculative_tokens: 8,
    draft_sample_method: "probabilistic", rejection_sample_method: "block",
  });
}

// The prompts of the load and soak tests' requests.
export const LOAD_PROMPTS = [
  "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?",
  "Write a short poem about the sea.",
  "What is 12 times 7?",
  "Explain what a compiler does in one sentence.",
  "List three colours.",
  "A train travels 60 km in 1.5 hours. What is its average speed?",
  "Name a famous river in Europe.",
  "Describe the smell of rain.",
];

// ---------------------------------------------------------------------------------------------
// Servers. Every server started here is SIGKILLed when this process exits for any reason; on
// Linux it also gets PR_SET_PDEATHSIG (through setpriv), so a test killed by CTest's time-out
// cannot leave a server behind.
const live = new Set();
function killAll() {
  for (const s of live) {
    try { process.kill(s.pid, "SIGKILL"); } catch { /* already gone */ }
  }
}
process.on("exit", killAll);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    killAll();
    process.exit(128 + (sig === "SIGINT" ? 2 : sig === "SIGTERM" ? 15 : 1));
  });
}

const SETPRIV = "/usr/bin/setpriv";

// Starts `dspark serve --model MODEL --host 127.0.0.1 --port 0 --threads N ...args` and waits for
// its "listening on http://HOST:PORT" line on stderr. Returns a handle:
//   url, host, port, pid, proc, log() (its stdout+stderr so far), alive(), exited (a promise of
//   {code, signal}), waitExit(ms), stop() (SIGTERM, then SIGKILL after a grace period).
export async function startServer({ dspark, model, threads = 1, args = [], readyTimeoutMs = 120000, env } = {}) {
  const argv = ["serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--threads", String(threads), ...args];
  let cmd = dspark, cargs = argv;
  if (fs.existsSync(SETPRIV)) {
    cmd = SETPRIV;
    cargs = ["--pdeathsig", "KILL", dspark, ...argv];
  }
  const proc = spawn(cmd, cargs, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...(env || {}) } });
  const server = { proc, pid: proc.pid, cmdline: [dspark, ...argv].join(" ") };
  live.add(server);
  let logText = "";
  const LOG_CAP = 1 << 20;
  const append = (s) => {
    logText += s;
    if (logText.length > LOG_CAP) logText = logText.slice(-LOG_CAP / 2);
  };
  let exitInfo = null;
  server.exited = new Promise((resolve) => {
    proc.on("exit", (code, signal) => {
      exitInfo = { code, signal };
      live.delete(server);
      resolve(exitInfo);
    });
  });
  server.alive = () => exitInfo === null;
  server.exitInfo = () => exitInfo;
  server.log = () => logText;
  server.waitExit = (ms) => Promise.race([server.exited, sleepUnref(ms).then(() => null)]);
  server.stop = async (graceMs = 15000) => {
    if (!server.alive()) return exitInfo;
    try { process.kill(server.pid, "SIGTERM"); } catch { /* gone */ }
    const r = await server.waitExit(graceMs);
    if (r) return r;
    console.log(`note: server ${server.pid} did not exit ${graceMs / 1000} s after SIGTERM; SIGKILL`);
    try { process.kill(server.pid, "SIGKILL"); } catch { /* gone */ }
    return server.exited;
  };

  const ready = new Promise((resolve, reject) => {
    let pending = "";
    const onData = (chunk) => {
      const s = chunk.toString("utf8");
      append(s);
      pending += s;
      const m = pending.match(/listening on http:\/\/(\[[^\]]+\]|[^\s:/]+):(\d+)/);
      if (m) resolve({ host: m[1], port: Number(m[2]) });
      if (pending.length > 65536) pending = pending.slice(-4096);
    };
    proc.stderr.on("data", onData);
    proc.stdout.on("data", (c) => append(c.toString("utf8")));
    proc.on("error", (e) => reject(new Error(`cannot start ${cmd}: ${e.message}`)));
    server.exited.then((e) => reject(new Error(
      `server exited (code ${e.code}, signal ${e.signal}) before listening; output:\n${tail(logText)}`)));
    sleepUnref(readyTimeoutMs).then(() => reject(new Error(
      `server printed no "listening on" line in ${readyTimeoutMs / 1000} s; output:\n${tail(logText)}`)));
  });
  try {
    const { host, port } = await ready;
    server.host = host;
    server.port = port;
    server.url = `http://${host}:${port}`;
  } catch (e) {
    try { process.kill(server.pid, "SIGKILL"); } catch { /* gone */ }
    throw e;
  }
  if (server.host !== "127.0.0.1") throw new Error(`server listens on ${server.host}, asked for 127.0.0.1`);
  return server;
}

export function tail(s, n = 4000) {
  return s.length > n ? "...\n" + s.slice(-n) : s;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A timer that does not keep the process alive (time-outs that usually never fire).
export const sleepUnref = (ms) => new Promise((r) => setTimeout(r, ms).unref());

// ---------------------------------------------------------------------------------------------
// Checks. `t.check(name, ok, detail)` counts; `t.finish()` prints the summary and sets the exit
// status. `run(t, body)` runs a test body with its servers and always stops them.
export class Checker {
  constructor(name) {
    this.name = name;
    this.passed = 0;
    this.failed = 0;
    this.t0 = Date.now();
  }
  check(name, ok, detail = "") {
    if (ok) {
      this.passed++;
    } else {
      this.failed++;
      console.log(`FAIL ${name}${detail ? `\n  ${String(detail).replace(/\n/g, "\n  ")}` : ""}`);
    }
    return ok;
  }
  equal(name, got, want) {
    const g = JSON.stringify(got), w = JSON.stringify(want);
    return this.check(name, g === w, `want ${trunc(w)}\n  got  ${trunc(g)}`);
  }
  finish() {
    const s = ((Date.now() - this.t0) / 1000).toFixed(1);
    console.log(`${this.name}: ${this.passed} passed, ${this.failed} failed (${s} s)`);
    if (this.failed > 0 || this.passed === 0) process.exitCode = 1;
  }
}

export function trunc(s, n = 600) {
  s = String(s);
  return s.length > n ? s.slice(0, n) + `... (${s.length} chars)` : s;
}

// Runs body(servers) where `servers` collects what startServer returned; on an exception the test
// fails with the servers' output; every server is stopped at the end.
export async function run(t, body, { deadlineMs } = {}) {
  const servers = [];
  const start = async (opts) => {
    const s = await startServer(opts);
    servers.push(s);
    return s;
  };
  let timer;
  try {
    const work = body(start, servers);
    const guard = deadlineMs
      ? new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`test did not finish in ${deadlineMs / 1000} s`)), deadlineMs); })
      : null;
    await (guard ? Promise.race([work, guard]) : work);
  } catch (e) {
    const cause = e && e.cause ? `\ncause: ${e.cause.code || ""} ${e.cause.message || e.cause}` : "";
    t.check("test body", false, (e && e.stack ? e.stack : String(e)) + cause);
    for (const s of servers) console.log(`--- server ${s.pid} (${s.cmdline}) output:\n${tail(s.log())}`);
  } finally {
    clearTimeout(timer);
    for (const s of servers) {
      const r = await s.stop();
      if (r && r.signal && r.signal !== "SIGKILL" && r.signal !== "SIGTERM") {
        t.check(`server ${s.pid} ended normally`, false, `killed by ${r.signal}; output:\n${tail(s.log())}`);
      }
    }
    t.finish();
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP.
export function authHeaders(key) {
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// POSTs JSON (or raw bytes/strings as given) and returns { status, headers, text, json }.
export async function request(url, { method = "POST", body, headers = {}, timeoutMs = 60000, signal } = {}) {
  const h = { ...headers };
  let b = body;
  const streamed = body instanceof ReadableStream;
  if (body !== undefined && typeof body !== "string" && !(body instanceof Uint8Array) && !streamed) {
    b = JSON.stringify(body);
  }
  if (b !== undefined && !Object.keys(h).some((k) => k.toLowerCase() === "content-type")) h["Content-Type"] = "application/json";
  const res = await fetch(url, { method, body: b, headers: h, signal: signal || AbortSignal.timeout(timeoutMs), ...(streamed ? { duplex: "half" } : {}) });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

// Reads an SSE response body. Returns { events (parsed JSON of each data line before [DONE]),
// done (saw [DONE]), afterDone (events after [DONE]), bad (data that was not JSON), text (the
// concatenated delta.content / text), finishReasons, usage (the last non-null usage) }.
// `onEvent(json, index)` is called as events arrive; returning false stops reading.
export async function readSSE(res, { onEvent } = {}) {
  const out = { events: [], done: false, afterDone: 0, bad: [], text: "", finishReasons: [], usage: null, roles: [] };
  const dec = new TextDecoder("utf-8", { fatal: true });
  let buf = "";
  const handle = (block) => {
    const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
    if (data === "") return true;  // a comment or keep-alive
    if (out.done) { out.afterDone++; return true; }
    if (data === "[DONE]") { out.done = true; return true; }
    let j;
    try { j = JSON.parse(data); } catch { out.bad.push(data); return true; }
    out.events.push(j);
    if (j.usage) out.usage = j.usage;
    for (const c of j.choices || []) {
      if (c.delta) {
        if (typeof c.delta.content === "string") out.text += c.delta.content;
        if (c.delta.role) out.roles.push(c.delta.role);
      } else if (typeof c.text === "string") {
        out.text += c.text;
      }
      if (c.finish_reason !== null && c.finish_reason !== undefined) out.finishReasons.push(c.finish_reason);
    }
    if (onEvent) return onEvent(j, out.events.length - 1) !== false;
    return true;
  };
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let m;
      while ((m = buf.match(/\r?\n\r?\n/))) {
        const block = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (!handle(block)) {
          await reader.cancel();
          out.stopped = true;
          return out;
        }
      }
    }
    buf += dec.decode();
    if (buf.trim() !== "") out.trailing = buf;
  } finally {
    try { reader.releaseLock(); } catch { /* cancelled */ }
  }
  return out;
}

// Checks an OpenAI error response: the status, a JSON body {"error": {message, type, param, code}}.
export function errorShape(r) {
  const e = r.json && r.json.error;
  if (!r.json || typeof r.json !== "object") return `body is not JSON: ${trunc(r.text, 300)}`;
  if (!e || typeof e !== "object") return `no "error" object: ${trunc(r.text, 300)}`;
  if (typeof e.message !== "string" || e.message.length === 0) return `error.message is not a non-empty string: ${trunc(r.text, 300)}`;
  if (typeof e.type !== "string" || e.type.length === 0) return `error.type is not a non-empty string: ${trunc(r.text, 300)}`;
  if (!("param" in e) || !("code" in e)) return `error lacks "param" or "code": ${trunc(r.text, 300)}`;
  return null;
}

// ---------------------------------------------------------------------------------------------
// /metrics (Prometheus text exposition format 0.0.4). parseMetrics checks every line and returns
// { samples: [{name, labels, value}], types: {family: type}, errors: [...] }.
export function parseMetrics(text) {
  const samples = [], types = {}, errors = [];
  const nameRe = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
  text.split("\n").forEach((line, i) => {
    if (line === "") return;
    if (line.startsWith("#")) {
      const m = line.match(/^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (.*))?$/);
      if (!m) { if (!/^# /.test(line)) errors.push(`line ${i + 1}: bad comment ${line}`); return; }
      if (m[1] === "TYPE") {
        if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(m[3])) errors.push(`line ${i + 1}: bad TYPE ${line}`);
        if (types[m[2]]) errors.push(`line ${i + 1}: second TYPE for ${m[2]}`);
        types[m[2]] = m[3];
      }
      return;
    }
    const nm = line.match(nameRe);
    if (!nm) { errors.push(`line ${i + 1}: no metric name: ${line}`); return; }
    const name = nm[0];
    let rest = line.slice(name.length);
    const labels = {};
    if (rest.startsWith("{")) {
      rest = rest.slice(1);
      for (;;) {
        const lm = rest.match(/^\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"\s*(,?)/);
        if (!lm) break;
        labels[lm[1]] = lm[2].replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
        rest = rest.slice(lm[0].length);
        if (!lm[3]) break;
      }
      if (!rest.startsWith("}")) { errors.push(`line ${i + 1}: bad labels: ${line}`); return; }
      rest = rest.slice(1);
    }
    const vm = rest.match(/^ +(\S+)(?: +(-?\d+))?\s*$/);
    if (!vm) { errors.push(`line ${i + 1}: bad value: ${line}`); return; }
    const v = vm[1];
    const value = v === "+Inf" ? Infinity : v === "-Inf" ? -Infinity : v === "NaN" ? NaN : Number(v);
    if (!/^(\+Inf|-Inf|NaN|[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)$/.test(v)) { errors.push(`line ${i + 1}: bad number: ${line}`); return; }
    samples.push({ name, labels, value });
  });
  // Every sample belongs to a family with a TYPE line.
  for (const s of samples) {
    const fam = [s.name, s.name.replace(/_(total|bucket|sum|count|created)$/, "")].find((f) => types[f]);
    if (!fam) errors.push(`sample ${s.name} has no # TYPE line`);
  }
  return { samples, types, errors };
}

// The value of the one sample `name` whose labels include `labels`; undefined if none; throws if
// several match.
export function metric(parsed, name, labels = {}) {
  const m = parsed.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (m.length > 1) throw new Error(`${m.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return m.length ? m[0].value : undefined;
}
// The sum of every sample `name` whose labels include `labels` (0 if none).
export function metricSum(parsed, name, labels = {}) {
  return parsed.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}

export async function getMetrics(server) {
  const res = await fetch(`${server.url}/metrics`, { signal: AbortSignal.timeout(30000) });
  if (res.status !== 200) throw new Error(`GET /metrics: ${res.status} ${await res.text()}`);
  return parseMetrics(await res.text());
}

// Polls /metrics until pred(parsed) is true; returns the last parsed metrics and whether it held.
export async function pollMetrics(server, pred, { timeoutMs = 30000, intervalMs = 100 } = {}) {
  const end = Date.now() + timeoutMs;
  let m;
  for (;;) {
    m = await getMetrics(server);
    if (pred(m)) return { ok: true, m };
    if (Date.now() > end) return { ok: false, m };
    await sleep(intervalMs);
  }
}

// ---------------------------------------------------------------------------------------------
// Resident set size of a process, in KiB (VmRSS in /proc/PID/status).
export function rssKiB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const m = s.match(/^VmRSS:\s+(\d+) kB/m);
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}

// The served model's id from /v1/models.
export async function servedModel(server, key) {
  const r = await request(`${server.url}/v1/models`, { method: "GET", headers: authHeaders(key) });
  if (r.status !== 200 || !r.json || !Array.isArray(r.json.data) || !r.json.data.length) {
    throw new Error(`GET /v1/models: ${r.status} ${trunc(r.text)}`);
  }
  return r.json.data[0].id;
}
