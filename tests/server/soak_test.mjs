// Soak: proof of flat memory. Rounds of a MIX of concurrent requests against `dspark serve` (with
// the DSpark drafter unless --no-spec), on loopback; every response is checked, RSS is measured
// after each round once the server is idle, and a least-squares line through RSS against the
// requests sent must be flat.
//
// A round is --round-size requests run by --clients concurrent workers. Request i of a round is
// slot i % 16 of this pattern:
//   0-11  good: streaming or not, chat or completions, greedy or seeded sampling (every
//         combination; 8-11 repeat 0-3 with other prompts), max_tokens --max-tokens
//   12    aborted stream: a completion that loops (the demo model never ends it), max_tokens
//         up to the context; the client aborts (AbortController) after its first content chunk
//   13,15 bad: malformed JSON, an unknown field or a prompt over --max-model-len, in turn; each
//         must get 400 and an OpenAI error object {error: {message, type, param, code}}
//   14    max-length: prompt + max_tokens = --max-model-len exactly (token-id completions and
//         chat, in turn); finish_reason "length" or "stop"
// Streams are checked as load_test.mjs checks them ([DONE] last, one finish_reason, usage within
// max_tokens); non-streaming answers must be 200 with usage.
//
// Memory. First two forced rounds (unless --no-burst 1): a high-water round (every slot prefilling
// a long prompt, then decoding together: buffers sized by the largest step reach their size) and a
// many-connections round (--burst-connections, 144, connections at once, one request of each kind
// on each). Then warm-up rounds run until RSS (VmRSS) is steady: --warmup-steady-rounds (1)
// round-to-round changes in a row under --warmup-tolerance (0.005), i.e. by default two consecutive
// rounds within 0.5%, after at least --warmup-min-rounds (2) and at most --warmup-max-rounds (40;
// not steady by then is noted and measured anyway). Then the measured rounds run (--rounds N, or
// until --duration seconds, default 60, have passed); after each, once the server is idle (no
// request running or waiting, KV usage at its idle value, no export pending) and --settle-ms (300)
// later, RSS is read. A least-squares line through RSS (bytes) against the cumulative number of
// requests sent (the point after warm-up is x = 0) gives the slope in bytes per request; FAIL when
// it exceeds --max-slope (16) or when RSS at the end grew more than --max-growth (0.02) over RSS
// after warm-up. One JSON summary line (prefixed "soak summary: ") is printed and, with --json
// FILE, written there. --rss-breakdown 1 prints RSS by kind of mapping after each round (files,
// heap, thread arenas, thread stacks, other anonymous memory); --server-env NAME=VALUE,... adds to
// the server's environment (the ctest sets glibc malloc options: tests/server/CMakeLists.txt says
// why).
//
// Counters over the measured rounds (/metrics after warm-up against after the run; see
// checkCounters):
//   vllm:request_success_total (all finished_reasons) grows by the requests the engine accepted
//     (good + aborted + max-length; bad requests are refused before the engine);
//   {finished_reason="stop"} by the completed requests that stopped; {finished_reason="length"}
//     by those that reached max_tokens plus the aborted streams that did too before the server
//     saw the client leave (at most --max-late-aborts, 10%, of them); {finished_reason="abort"}
//     by the other aborted streams;
//   vllm:generation_tokens_total by the completion tokens of the completed requests plus what
//     the aborted ones generated, which no client sees (bounded);
//   vllm:prompt_tokens_total by the prompt tokens of every accepted request (counted once, at
//     its first token, whether prefilled, prefilled again after a preemption, or cached).
//
// --connector 1: redis-server on a free loopback port (--save "" --appendonly no) and the server
// with a HiddenStatesConnector exporting every request (export_fraction 1.0), so the exporter's
// queues are busy. Nobody consumes the exports here, so the soak plays the consumer: after every
// round, once no export is pending, it deletes every committed sample (SCAN *:meta, then DEL of
// HANDLE:meta, HANDLE:hidden_states, HANDLE:token_ids: the keys src/connector/redis_store.cpp
// writes) and checks the database is then empty (DBSIZE 0), so redis stays bounded; redis-server's
// RSS, used_memory and the samples consumed are printed per round, and the exporter's outcomes
// (dspark:hidden_states_exports_total) must add up to the requests that ended by themselves.
//
//   node soak_test.mjs --dspark BIN --model DIR --drafter DIR [--threads N] [--duration 60 |
//        --rounds N] [--clients 16] [--round-size 256] [--max-tokens 8] [--max-model-len 512]
//        [--max-num-seqs 16] [--warmup-tolerance 0.005] [--warmup-steady-rounds 1]
//        [--warmup-min-rounds 2] [--warmup-max-rounds 40] [--no-burst 1]
//        [--burst-connections 144] [--max-slope 16]
//        [--max-growth 0.02] [--max-late-aborts 0.1] [--settle-ms 300] [--json FILE]
//        [--connector 1] [--no-spec 1] [--dtype f32|bf16] [--server-env NAME=VALUE,...]
//        [--rss-breakdown 1]
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

import {
  LOAD_PROMPTS, Checker, errorShape, getMetrics, metric, metricSum, parseArgs, pollMetrics, readSSE, request, rssKiB, run, sleep,
  specConfig, trunc,
} from "./lib.mjs";

const opt = parseArgs();
const CLIENTS = opt.clients || 16;
const ROUND_SIZE = opt.round_size || 256;
const MAX_TOKENS = opt.max_tokens || 8;
const CTX = opt.max_model_len || 512;
const MAX_NUM_SEQS = opt.max_num_seqs || 16;
const ROUNDS = opt.rounds || 0;
const DURATION_S = ROUNDS ? 0 : (opt.duration || 60);
const WARMUP_TOL = opt.warmup_tolerance ?? 0.005;
const WARMUP_MAX = opt.warmup_max_rounds || 40;
const WARMUP_MIN = opt.warmup_min_rounds || 2;
const WARMUP_STEADY = opt.warmup_steady_rounds || 1;
const BURST_CONNECTIONS = opt.burst_connections || 144;
const MAX_SLOPE = opt.max_slope ?? 16;       // bytes per request
const MAX_GROWTH = opt.max_growth ?? 0.02;   // fraction of RSS after warm-up
const SETTLE_MS = opt.settle_ms ?? 300;
const MAX_LATE = opt.max_late_aborts ?? 0.1;  // see checkCounters
const CONNECTOR = Boolean(opt.connector);
const DTYPE = opt.dtype || "bf16";
if (DTYPE !== "f32" && DTYPE !== "bf16") throw new Error(`--dtype must be f32 or bf16, got ${JSON.stringify(DTYPE)}`);
if (ROUND_SIZE < 16) throw new Error("--round-size must be at least 16 (one of each kind)");
const NAME = "dspark-demo";
const lab = { model_name: NAME };
const t = new Checker("soak_test");

const prompts = LOAD_PROMPTS;
// Greedy, the demo model continues this without an end-of-sequence token (disconnect_test.mjs),
// so an aborted stream cannot end by itself before the client leaves.
const LOOP_PROMPT = "Once upon a time, in a town by the sea,";
const LONG_TEXT = "The quick brown fox jumps over the lazy dog while the river runs to the sea and the " +
  "children count the boats that pass under the old stone bridge. ";

// ---------------------------------------------------------------------------------------------
// Requests. Filled in before the first round: the token ids and chat contents of the max-length
// requests, and the aborted streams' prompt length and max_tokens.
const fixed = { ids: [], chats: [], loopPromptTokens: 0, abortMaxTokens: 0 };

function kindOf(i) {
  const slot = i % 16;
  if (slot < 12) return "good";
  if (slot === 12) return "abort";
  if (slot === 14) return "maxlen";
  return "bad";
}

// The request i of round r: { kind, path, body (object, or a string sent as is), stream, maxTokens }.
function plan(r, i) {
  const kind = kindOf(i);
  const C = "/v1/completions", CH = "/v1/chat/completions";
  const n = Math.floor(i / 16);  // which block of 16
  if (kind === "good") {
    const slot = i % 16, combo = slot % 8;
    const stream = (combo & 1) === 1, chat = (combo & 2) === 2, sampled = (combo & 4) === 4;
    const p = prompts[(slot + n + r) % prompts.length];
    const sampling = sampled ? { temperature: 0.9, top_p: 0.95, top_k: 40, seed: 1000 * r + i } : { temperature: 0 };
    const body = { model: NAME, max_tokens: MAX_TOKENS, stream, ...sampling,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
      ...(chat ? { messages: [{ role: "user", content: p }] } : { prompt: p }) };
    return { kind, path: chat ? CH : C, body, stream, maxTokens: MAX_TOKENS };
  }
  if (kind === "abort") {
    return { kind, path: C, stream: true, maxTokens: fixed.abortMaxTokens,
      body: { model: NAME, prompt: LOOP_PROMPT, max_tokens: fixed.abortMaxTokens, temperature: 0, stream: true,
        stream_options: { include_usage: true } } };
  }
  if (kind === "maxlen") {
    const chat = n % 2 === 1;
    if (chat) {
      const c = fixed.chats[n % fixed.chats.length];
      return { kind, path: CH, stream: n % 4 === 1, maxTokens: CTX - c.tokens, promptTokens: c.tokens,
        body: { model: NAME, messages: [{ role: "user", content: c.content }], max_tokens: CTX - c.tokens, temperature: 0,
          stream: n % 4 === 1, ...(n % 4 === 1 ? { stream_options: { include_usage: true } } : {}) } };
    }
    const k = 3 + (n * 5) % 14;  // max_tokens 3..16
    const stream = n % 4 === 2;
    return { kind, path: C, stream, maxTokens: k, promptTokens: CTX - k,
      body: { model: NAME, prompt: fixed.ids.slice(0, CTX - k), max_tokens: k, temperature: 0, stream,
        ...(stream ? { stream_options: { include_usage: true } } : {}) } };
  }
  // bad
  const which = (n + r) % 3;
  if (which === 0) return { kind, what: "malformed JSON", path: n % 2 ? CH : C, body: `{"model": "${NAME}", "prompt": "hi", "max_tokens": ` };
  if (which === 1) return { kind, what: "unknown field", path: CH,
    body: { model: NAME, messages: [{ role: "user", content: "hi" }], max_tokens: 2, frobnicate: true } };
  return { kind, what: "prompt over the context", path: C, body: { model: NAME, prompt: fixed.ids.slice(0, CTX + 8), max_tokens: 2 } };
}

const errText = (e) => `${e.name}: ${e.message}${e.cause ? ` (${e.cause.code || e.cause.message})` : ""}`;

// A streamed response, checked as load_test.mjs checks it.
function streamProblems(s, ct, maxTokens) {
  const problems = [];
  if (!ct.startsWith("text/event-stream")) problems.push(`content-type ${ct}`);
  if (!s.done) problems.push("no [DONE]");
  if (s.afterDone) problems.push(`${s.afterDone} events after [DONE]`);
  if (s.bad.length) problems.push(`non-JSON data: ${trunc(s.bad[0], 100)}`);
  if (s.trailing) problems.push(`trailing bytes: ${trunc(s.trailing, 100)}`);
  if (s.finishReasons.length !== 1) problems.push(`${s.finishReasons.length} finish_reasons`);
  const last = s.events[s.events.length - 1];
  if (!last || !last.usage || (last.choices && last.choices.length)) problems.push("the usage chunk is not last");
  if (new Set(s.events.map((e) => e.id)).size !== 1) problems.push("chunk ids differ");
  return usageProblems(problems, s.finishReasons[0], s.usage, maxTokens);
}

function usageProblems(problems, fr, u, maxTokens) {
  if (fr !== "stop" && fr !== "length") problems.push(`finish_reason ${fr}`);
  if (!u) problems.push("no usage");
  else {
    if (!(u.completion_tokens >= 1 && u.completion_tokens <= maxTokens)) problems.push(`completion_tokens ${u.completion_tokens} (max_tokens ${maxTokens})`);
    if (fr === "length" && u.completion_tokens !== maxTokens) problems.push(`length with ${u.completion_tokens} tokens`);
    if (u.total_tokens !== u.prompt_tokens + u.completion_tokens) problems.push(`usage ${JSON.stringify(u)}`);
  }
  return problems;
}

// Runs request i of round r. Returns { kind, error, usage?, finish?, seenTokens? (aborted) }.
async function one(server, r, i) {
  const p = plan(r, i);
  const headers = { "Content-Type": "application/json", "x-request-id": `soak-${r}-${i}` };
  const body = typeof p.body === "string" ? p.body : JSON.stringify(p.body);
  const out = { i, kind: p.kind };
  if (p.kind === "bad") {
    const res = await request(server.url + p.path, { body, headers, timeoutMs: 60000 });
    const shape = errorShape(res);
    if (res.status !== 400 || shape) out.error = `${p.what}: ${res.status} ${shape || trunc(res.text, 200)}`;
    return out;
  }
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Error("time-out")), 180000);
  try {
    const res = await fetch(server.url + p.path, { method: "POST", headers, body, signal: ac.signal });
    if (res.status !== 200) {
      out.error = `${p.kind} ${p.path}: ${res.status} ${trunc(await res.text(), 300)}`;
      return out;
    }
    if (p.kind === "abort") {
      // Read to the first chunk with text, then leave: readSSE cancels the body, abort() closes
      // the connection. A stream that ended first is an error.
      let seen = 0, finished = false;
      const s = await readSSE(res, {
        onEvent: (j) => {
          for (const c of j.choices || []) {
            if (c.finish_reason) finished = true;
            if (typeof c.text === "string" && c.text.length) seen++;
          }
          return seen === 0 && !finished;
        },
      });
      ac.abort();
      if (!s.stopped || finished) out.error = `abort: the stream ended before the client left (finish_reason ${s.finishReasons[0]})`;
      out.seenTokens = seen;  // chunks with text: at least one token each
      return out;
    }
    let problems, fr, u;
    if (p.stream) {
      const s = await readSSE(res);
      problems = streamProblems(s, res.headers.get("content-type") || "", p.maxTokens);
      fr = s.finishReasons[0];
      u = s.usage;
    } else {
      const text = await res.text();
      let j;
      try { j = JSON.parse(text); } catch { j = null; }
      const c = j && Array.isArray(j.choices) && j.choices.length === 1 ? j.choices[0] : null;
      fr = c ? c.finish_reason : undefined;
      u = j ? j.usage : undefined;
      problems = c ? [] : [`no single choice: ${trunc(text, 200)}`];
      usageProblems(problems, fr, u, p.maxTokens);
    }
    if (p.kind === "maxlen" && u) {
      if (u.prompt_tokens !== p.promptTokens) problems.push(`max-length: prompt_tokens ${u.prompt_tokens}, expected ${p.promptTokens}`);
      if (u.prompt_tokens + p.maxTokens !== CTX) problems.push(`max-length: prompt ${u.prompt_tokens} + max_tokens ${p.maxTokens} != ${CTX}`);
    }
    out.usage = u;
    out.finish = fr;
    if (problems.length) out.error = `${p.kind} ${p.path}${p.stream ? " (stream)" : ""}: ${problems.join("; ")}`;
    return out;
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// redis-server and a minimal RESP client (no npm package needed).
class Resp {
  constructor(port) {
    this.port = port;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
  }
  connect() {
    return new Promise((resolve, reject) => {
      this.sock = net.connect(this.port, "127.0.0.1", () => resolve(this));
      this.sock.once("error", reject);
      this.sock.on("data", (d) => { this.buf = Buffer.concat([this.buf, d]); this.drain(); });
      this.sock.on("close", () => { for (const w of this.waiting.splice(0)) w.reject(new Error("redis connection closed")); });
    });
  }
  close() { if (this.sock) this.sock.destroy(); }
  // Parses one reply at `at`; returns [value, next] or null when incomplete.
  parse(at) {
    const nl = this.buf.indexOf("\r\n", at);
    if (nl < 0) return null;
    const type = String.fromCharCode(this.buf[at]), line = this.buf.toString("utf8", at + 1, nl);
    if (type === "+") return [line, nl + 2];
    if (type === "-") return [new Error(line), nl + 2];
    if (type === ":") return [Number(line), nl + 2];
    if (type === "$") {
      const n = Number(line);
      if (n < 0) return [null, nl + 2];
      if (this.buf.length < nl + 2 + n + 2) return null;
      return [this.buf.toString("utf8", nl + 2, nl + 2 + n), nl + 2 + n + 2];
    }
    if (type === "*") {
      const n = Number(line);
      if (n < 0) return [null, nl + 2];
      const arr = [];
      let pos = nl + 2;
      for (let k = 0; k < n; k++) {
        const e = this.parse(pos);
        if (!e) return null;
        arr.push(e[0]);
        pos = e[1];
      }
      return [arr, pos];
    }
    throw new Error(`redis: unexpected reply type ${JSON.stringify(type)}`);
  }
  drain() {
    while (this.waiting.length) {
      const r = this.parse(0);
      if (!r) return;
      this.buf = this.buf.subarray(r[1]);
      const w = this.waiting.shift();
      if (r[0] instanceof Error) w.reject(r[0]); else w.resolve(r[0]);
    }
  }
  // Sends commands (arrays of strings) in one write; resolves with their replies in order.
  pipeline(cmds) {
    const parts = [];
    const ps = cmds.map((args) => {
      parts.push(`*${args.length}\r\n`);
      for (const a of args) parts.push(`$${Buffer.byteLength(String(a))}\r\n${a}\r\n`);
      return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
    });
    this.sock.write(parts.join(""));
    return Promise.all(ps);
  }
  async cmd(...args) { return (await this.pipeline([args]))[0]; }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

let redisProc = null;
process.on("exit", () => { if (redisProc) try { process.kill(redisProc.pid, "SIGKILL"); } catch { /* gone */ } });

async function startRedis() {
  const bin = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].find((b) => fs.existsSync(b)) || "redis-server";
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-soak-redis-"));
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir];
    const setpriv = "/usr/bin/setpriv";
    const proc = fs.existsSync(setpriv)
      ? spawn(setpriv, ["--pdeathsig", "KILL", bin, ...args], { stdio: ["ignore", "pipe", "pipe"] })
      : spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "", exited = false;
    proc.stdout.on("data", (d) => { log += d; });
    proc.stderr.on("data", (d) => { log += d; });
    proc.on("exit", () => { exited = true; });
    proc.on("error", (e) => { exited = true; log += String(e); });
    redisProc = proc;
    for (let k = 0; k < 100 && !exited; k++) {
      try {
        const c = await new Resp(port).connect();
        if ((await c.cmd("PING")) === "PONG") return { proc, port, client: c, dir, log: () => log };
        c.close();
      } catch { /* not yet */ }
      await sleep(100);
    }
    try { process.kill(proc.pid, "SIGKILL"); } catch { /* gone */ }
    console.log(`note: redis-server on port ${port} did not start (${trunc(log, 300)}); trying another port`);
  }
  throw new Error("cannot start redis-server");
}

// Deletes every committed sample; returns how many samples and keys went. Error manifests have
// only HANDLE:meta (DEL of the absent tensor keys counts nothing).
async function consumeExports(redis) {
  let cursor = "0", samples = 0, keys = 0;
  do {
    const [next, found] = await redis.cmd("SCAN", cursor, "MATCH", "*:meta", "COUNT", "1000");
    cursor = next;
    if (found.length) {
      const dels = found.map((k) => { const h = k.slice(0, -":meta".length); return ["DEL", `${h}:meta`, `${h}:hidden_states`, `${h}:token_ids`]; });
      const n = await redis.pipeline(dels);
      samples += found.length;
      keys += n.reduce((a, x) => a + x, 0);
    }
  } while (cursor !== "0");
  return { samples, keys };
}

// ---------------------------------------------------------------------------------------------
const exportTotals = (m) => ({
  written: metric(m, "dspark:hidden_states_exports_total", { ...lab, result: "written" }) || 0,
  outcomes: metricSum(m, "dspark:hidden_states_exports_total", lab),
  dropped: (metric(m, "dspark:hidden_states_exports_total", { ...lab, result: "dropped_pending_full" }) || 0) +
    (metric(m, "dspark:hidden_states_exports_total", { ...lab, result: "dropped_store_full" }) || 0) +
    (metric(m, "dspark:hidden_states_exports_total", { ...lab, result: "failed" }) || 0),
  bytes: metric(m, "dspark:hidden_states_export_bytes_total", lab) || 0,
});
const totals = (m) => ({
  success: metricSum(m, "vllm:request_success_total", lab),
  abort: metric(m, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0,
  stop: metric(m, "vllm:request_success_total", { ...lab, finished_reason: "stop" }) || 0,
  length: metric(m, "vllm:request_success_total", { ...lab, finished_reason: "length" }) || 0,
  gen: metric(m, "vllm:generation_tokens_total", lab),
  prompt: metric(m, "vllm:prompt_tokens_total", lab),
  preempt: metric(m, "vllm:num_preemptions_total", lab),
  ...(CONNECTOR ? { exports: exportTotals(m) } : {}),
});

// Least squares y = a + b x; returns b.
function slope(xs, ys) {
  const n = xs.length;
  const mx = xs.reduce((a, x) => a + x, 0) / n, my = ys.reduce((a, y) => a + y, 0) / n;
  let sxy = 0, sxx = 0;
  for (let k = 0; k < n; k++) { sxy += (xs[k] - mx) * (ys[k] - my); sxx += (xs[k] - mx) ** 2; }
  return sxx > 0 ? sxy / sxx : 0;
}

const mib = (kib) => (kib / 1024).toFixed(1);

// --rss-breakdown 1: RSS (KiB) by kind of mapping, from /proc/PID/smaps: files (the binary and
// libraries), brk heap, glibc's thread arenas (anonymous, 64 MiB aligned), thread stacks
// (anonymous, the 8 MiB default size), and other anonymous memory (large allocations, which
// malloc maps one by one).
function rssBreakdown(pid) {
  const out = { file: 0, heap: 0, arenas: 0, stacks: 0, anon: 0 };
  let kind = null;
  for (const line of fs.readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const h = line.match(/^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/);
    if (h) {
      const start = BigInt(`0x${h[1]}`), size = BigInt(`0x${h[2]}`) - start, name = h[3];
      kind = name.startsWith("/") ? "file" : name === "[heap]" ? "heap" : name.startsWith("[") ? "file"
        : start % 67108864n === 0n ? "arenas" : size === 8388608n ? "stacks" : "anon";
      continue;
    }
    const m = line.match(/^Rss:\s+(\d+) kB/);
    if (m && kind) out[kind] += Number(m[1]);
  }
  return out;
}

await run(t, async (start) => {
  let redis = null;
  const args = ["--served-model-name", NAME, "--max-num-seqs", String(MAX_NUM_SEQS), "--max-model-len", String(CTX), "--dtype", DTYPE];
  if (!opt.no_spec) args.push("--speculative-config", specConfig(opt.drafter));
  if (CONNECTOR) {
    redis = await startRedis();
    console.log(`redis-server pid ${redis.proc.pid} on 127.0.0.1:${redis.port}`);
    args.push("--kv-transfer-config", JSON.stringify({
      kv_connector: "HiddenStatesConnector", kv_role: "kv_producer",
      kv_connector_extra_config: { store: `redis://127.0.0.1:${redis.port}/0`, export_fraction: 1.0 },
    }));
  }
  try {
    // --server-env "NAME=VALUE,...": the server's environment on top of this one (allocator
    // settings, an LD_PRELOAD for a demonstration).
    const env = {};
    for (const kv of String(opt.server_env || "").split(",").filter(Boolean)) {
      const eq = kv.indexOf("=");
      if (eq <= 0) throw new Error(`--server-env: ${JSON.stringify(kv)} is not NAME=VALUE`);
      env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    const server = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args, env });
    await body(server, redis);
  } finally {
    if (redis) {
      redis.client.close();
      try { process.kill(redis.proc.pid, "SIGTERM"); } catch { /* gone */ }
      fs.rmSync(redis.dir, { recursive: true, force: true });
    }
  }
}, { deadlineMs: (DURATION_S + 600 + (ROUNDS + WARMUP_MAX + 2) * 120) * 1000 });

async function body(server, redis) {
  const t0 = Date.now();
  // The max-length prompts: token ids of a long text, and chat contents of a few lengths that
  // leave 3..16 tokens of the context.
  const tok = async (b) => {
    const r = await request(`${server.url}/tokenize`, { body: { model: NAME, ...b } });
    if (r.status !== 200) throw new Error(`/tokenize: ${r.status} ${trunc(r.text)}`);
    return r.json.count;
  };
  {
    const r = await request(`${server.url}/tokenize`, { body: { model: NAME, prompt: LONG_TEXT.repeat(Math.ceil(CTX / 8) + 4), add_special_tokens: false } });
    if (r.status !== 200) throw new Error(`/tokenize: ${r.status} ${trunc(r.text)}`);
    fixed.ids = r.json.tokens;
    if (fixed.ids.length < CTX + 8) throw new Error(`the long text has only ${fixed.ids.length} tokens`);
    const words = LONG_TEXT.repeat(Math.ceil(CTX / 8) + 4).split(" ").filter(Boolean);
    for (const room of [3, 9, 16]) {
      // The most words whose chat prompt leaves at least `room` tokens.
      let lo = 1, hi = words.length;
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        const n = await tok({ messages: [{ role: "user", content: words.slice(0, mid).join(" ") }], add_generation_prompt: true });
        if (n <= CTX - room) lo = mid; else hi = mid - 1;
      }
      const content = words.slice(0, lo).join(" ");
      fixed.chats.push({ content, tokens: await tok({ messages: [{ role: "user", content }], add_generation_prompt: true }) });
    }
    fixed.loopPromptTokens = await tok({ prompt: LOOP_PROMPT });
    fixed.abortMaxTokens = CTX - fixed.loopPromptTokens;
    console.log(`max-length chat prompts: ${fixed.chats.map((c) => `${c.tokens} + ${CTX - c.tokens}`).join(", ")} tokens; ` +
      `aborted streams: ${fixed.loopPromptTokens}-token prompt, max_tokens ${fixed.abortMaxTokens}`);
  }

  const m0 = await getMetrics(server);
  const kvIdle = metric(m0, "vllm:kv_cache_usage_perc", lab);
  t.check("idle KV usage is a number", typeof kvIdle === "number" && kvIdle >= 0 && kvIdle < 1, String(kvIdle));

  // Waits until the server is idle: nothing running or waiting, KV usage back to idle, no export
  // pending; then reads RSS (and, with the connector, consumes the exports).
  const settle = async (what) => {
    const r = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_running", lab) === 0 &&
      metric(m, "vllm:num_requests_waiting", lab) === 0 && metric(m, "vllm:kv_cache_usage_perc", lab) <= kvIdle &&
      (!CONNECTOR || metric(m, "dspark:hidden_states_exports_pending", lab) === 0), { timeoutMs: 60000, intervalMs: 50 });
    t.check(`${what}: server idle (running 0, waiting 0, KV usage ${kvIdle}${CONNECTOR ? ", no export pending" : ""})`, r.ok,
      `running ${metric(r.m, "vllm:num_requests_running", lab)}, waiting ${metric(r.m, "vllm:num_requests_waiting", lab)}, ` +
      `kv ${metric(r.m, "vllm:kv_cache_usage_perc", lab)}` + (CONNECTOR ? `, exports pending ${metric(r.m, "dspark:hidden_states_exports_pending", lab)}` : ""));
    let red = null;
    if (redis) {
      const c = await consumeExports(redis.client);
      const left = await redis.client.cmd("DBSIZE");
      t.check(`${what}: redis empty after the soak consumed the exports`, left === 0, `DBSIZE ${left}`);
      const info = await redis.client.cmd("INFO", "memory");
      const used = Number((info.match(/^used_memory:(\d+)/m) || [])[1]);
      red = { samples: c.samples, keys: c.keys, rssKiB: rssKiB(redis.proc.pid), usedMemory: used, left };
    }
    await sleep(SETTLE_MS);
    return { m: r.m, rss: rssKiB(server.pid), red, parts: opt.rss_breakdown ? rssBreakdown(server.pid) : null };
  };

  const stats = { good: 0, abort: 0, bad: 0, maxlen: 0 };
  const roundOf = async (r, label) => {
    const tr = Date.now();
    const results = new Array(ROUND_SIZE);
    let next = 0;
    await Promise.all(Array.from({ length: Math.min(CLIENTS, ROUND_SIZE) }, async () => {
      for (;;) {
        const i = next++;
        if (i >= ROUND_SIZE) return;
        results[i] = await one(server, r, i).catch((e) => ({ i, kind: kindOf(i), error: errText(e) }));
      }
    }));
    const failed = results.filter((x) => x.error);
    t.check(`${label}: all ${ROUND_SIZE} requests answered as they should`, failed.length === 0,
      `${failed.length} failed:\n${failed.slice(0, 8).map((x) => `#${x.i} ${x.kind}: ${x.error}`).join("\n")}`);
    const by = { good: 0, abort: 0, bad: 0, maxlen: 0 };
    for (const x of results) by[x.kind]++;
    const tokens = results.reduce((a, x) => a + (x.usage ? x.usage.completion_tokens : 0), 0);
    return { results, by, tokens, s: (Date.now() - tr) / 1000 };
  };

  // --- the high-water round: buffers sized by the largest step (the forward pass's workspace and
  // logits rows, the drafter's) grow to what the largest batches need, and then stay: RSS may
  // step up by MiBs at once (10-20 MiB before commit 467b2f9). A mixed round meets such a batch
  // only by chance, sometimes
  // well after the warm-up, so it is forced here: 2 x --max-num-seqs max-length requests and
  // --max-num-seqs streams at once (every slot prefilling a long prompt: full
  // --max-num-batched-tokens steps).
  let r = 0;
  if (!opt.no_burst) {
    const tb = Date.now();
    const idx = [];
    for (let i = 14; idx.length < 2 * MAX_NUM_SEQS; i += 16) idx.push(i);  // max-length slots
    for (let i = 1; idx.length < 3 * MAX_NUM_SEQS; i += 2) idx.push(i);    // streams
    // And --max-num-seqs long greedy completions, which decode together: full speculative rounds
    // (every slot verifying its drafts) for dozens of steps.
    const long = Array.from({ length: MAX_NUM_SEQS }, (_, k) => request(`${server.url}/v1/completions`, {
      body: { model: NAME, prompt: LOOP_PROMPT, max_tokens: Math.min(64, fixed.abortMaxTokens), temperature: 0 }, timeoutMs: 180000,
    }).then((x) => (x.status === 200 ? { i: `long ${k}` } : { i: `long ${k}`, kind: "long", error: `${x.status} ${trunc(x.text, 200)}` }),
      (e) => ({ i: `long ${k}`, kind: "long", error: errText(e) })));
    const res = await Promise.all([...idx.map((i) => one(server, r, i).catch((e) => ({ i, kind: kindOf(i), error: errText(e) }))), ...long]);
    const failed = res.filter((x) => x.error);
    t.check(`high-water round: all ${res.length} requests complete`, failed.length === 0,
      failed.slice(0, 8).map((x) => `#${x.i} ${x.kind}: ${x.error}`).join("\n"));
    const st = await settle("after the high-water round");
    console.log(`high-water round: ${2 * MAX_NUM_SEQS} max-length requests, ${MAX_NUM_SEQS} streams and ${MAX_NUM_SEQS} long completions at once in ` +
      `${((Date.now() - tb) / 1000).toFixed(1)} s; RSS ${mib(st.rss)} MiB`);
  }
  // --- the many-connections round: --burst-connections (144) connections at once, each running
  // one request of every kind but max-length. Connection state (buffers, and in a
  // thread-per-connection front end such as cpp-httplib's 128-thread pool before commit 2cf3702,
  // each thread's stack, arena and thread cache) grows to what that many connections need, once;
  // the rounds' --clients keep-alive connections would reach it only by chance.
  if (!opt.no_burst) {
    const tb = Date.now();
    const conns = BURST_CONNECTIONS;
    const slots = [...Array(16).keys()].filter((k) => kindOf(k) !== "maxlen");
    const res = await Promise.all(Array.from({ length: conns }, async (_, c) => {
      const out = [];
      for (const k of slots) out.push(await one(server, r, c * 16 + k).catch((e) => ({ i: c * 16 + k, kind: kindOf(k), error: errText(e) })));
      return out;
    }));
    const failed = res.flat().filter((x) => x.error);
    t.check(`many-connections round: all ${conns * slots.length} requests answered as they should`, failed.length === 0,
      failed.slice(0, 8).map((x) => `#${x.i} ${x.kind}: ${x.error}`).join("\n"));
    const st = await settle("after the many-connections round");
    console.log(`many-connections round: ${conns} connections x ${slots.length} requests in ${((Date.now() - tb) / 1000).toFixed(1)} s; RSS ${mib(st.rss)} MiB`);
  }

  // --- warm-up until RSS is steady.
  // Steady: the last WARMUP_STEADY round-to-round changes all within WARMUP_TOL (by default one:
  // two consecutive rounds), after at least WARMUP_MIN rounds.
  let warm = null, w = 0;
  const warmRss = [];
  for (w = 1; w <= WARMUP_MAX; w++) {
    const rr = await roundOf(++r, `warm-up ${w}`);
    const st = await settle(`after warm-up ${w}`);
    warmRss.push(st.rss);
    console.log(`warm-up ${w}: ${ROUND_SIZE} requests, ${rr.tokens} tokens in ${rr.s.toFixed(1)} s; RSS ${mib(st.rss)} MiB` +
      (w > 1 ? ` (${st.rss - warmRss[w - 2] >= 0 ? "+" : ""}${st.rss - warmRss[w - 2]} KiB)` : "") +
      (st.red ? `; redis RSS ${mib(st.red.rssKiB)} MiB, ${st.red.samples} samples consumed` : ""));
    const last = warmRss.slice(-(WARMUP_STEADY + 1));
    if (w >= WARMUP_MIN && last.length === WARMUP_STEADY + 1 &&
        last.every((x, k) => k === 0 || Math.abs(x - last[k - 1]) / last[k - 1] < WARMUP_TOL)) { warm = st; break; }
  }
  // Not steady by the cap: measured anyway (a leak keeps RSS from settling; the slope and the
  // growth then decide).
  if (!warm) console.log(`note: RSS not steady (${WARMUP_STEADY + 1} consecutive warm-up rounds within ${(WARMUP_TOL * 100).toFixed(3)}% ` +
    `of each other) after ${WARMUP_MAX} warm-up rounds; measuring from here`);
  if (!warm) warm = await settle("after warm-up");
  const warmupRounds = Math.min(w, WARMUP_MAX);
  const before = totals(warm.m);

  // --- measured rounds.
  const xs = [0], ys = [warm.rss * 1024], perRound = [], redisPerRound = [];
  const all = [];
  let sent = 0;
  const tm = Date.now();
  for (let k = 1; ROUNDS ? k <= ROUNDS : (Date.now() - tm) / 1000 < DURATION_S; k++) {
    const rr = await roundOf(++r, `round ${k}`);
    for (const kind of Object.keys(stats)) stats[kind] += rr.by[kind];
    all.push(...rr.results);
    sent += ROUND_SIZE;
    const st = await settle(`after round ${k}`);
    xs.push(sent);
    ys.push(st.rss * 1024);
    perRound.push(st.rss);
    if (st.red) redisPerRound.push(st.red);
    console.log(`round ${k}: ${ROUND_SIZE} requests (${rr.by.good} good, ${rr.by.abort} aborted, ${rr.by.bad} bad, ${rr.by.maxlen} max-length), ` +
      `${rr.tokens} tokens in ${rr.s.toFixed(1)} s; RSS ${mib(st.rss)} MiB (${st.rss - warm.rss >= 0 ? "+" : ""}${st.rss - warm.rss} KiB)` +
      (st.red ? `; redis RSS ${mib(st.red.rssKiB)} MiB, used_memory ${mib(st.red.usedMemory / 1024)} MiB, ${st.red.samples} samples consumed, DBSIZE ${st.red.left}` : "") +
      (st.parts ? `\n  RSS by mapping (KiB, change since warm-up): ${Object.entries(st.parts).map(([k, v]) => `${k} ${v} (${v - warm.parts[k] >= 0 ? "+" : ""}${v - warm.parts[k]})`).join(", ")}` : ""));
  }
  const measured = perRound.length;
  t.check("at least two measured rounds", measured >= 2, `${measured}`);
  const end = { m: (await pollMetrics(server, () => true)).m, rss: perRound[measured - 1] ?? warm.rss };
  const after = totals(end.m);

  // --- flat memory.
  const b = measured >= 1 ? slope(xs, ys) : 0;
  const growth = (end.rss - warm.rss) / warm.rss;
  console.log(`RSS per round (KiB): warm-up ${warm.rss} | ${perRound.join(" ")}`);
  console.log(`RSS after warm-up ${mib(warm.rss)} MiB (${warmupRounds} warm-up rounds), at the end ${mib(end.rss)} MiB ` +
    `(${(growth * 100).toFixed(3)}%); least-squares slope ${b.toFixed(2)} bytes/request over ${sent} requests in ${measured} rounds`);
  t.check(`RSS slope ${b.toFixed(2)} bytes/request <= ${MAX_SLOPE}`, b <= MAX_SLOPE, `slope ${b.toFixed(2)} B/request over ${sent} requests`);
  t.check(`RSS growth ${(growth * 100).toFixed(3)}% <= ${(MAX_GROWTH * 100).toFixed(2)}%`, growth <= MAX_GROWTH,
    `${warm.rss} KiB -> ${end.rss} KiB`);
  if (redis && redisPerRound.length) {
    const rs = redisPerRound.map((x) => x.rssKiB);
    console.log(`redis RSS per round (KiB): ${rs.join(" ")}; slope ${slope(xs.slice(1), rs.map((k) => k * 1024)).toFixed(2)} bytes/request (not checked)`);
  }

  // --- counters.
  checkCounters(before, after, all);

  const summary = {
    rounds: measured, requests: sent, slope_bytes_per_request: Number(b.toFixed(3)),
    rss_warm_kib: warm.rss, rss_end_kib: end.rss, rss_per_round_kib: perRound,
    duration_s: Number(((Date.now() - t0) / 1000).toFixed(1)),
    warmup_rounds: warmupRounds, growth: Number(growth.toFixed(6)), requests_by_kind: stats,
    max_slope: MAX_SLOPE, max_growth: MAX_GROWTH, spec: !opt.no_spec, dtype: DTYPE, connector: CONNECTOR,
    ...(redis ? { redis_rss_per_round_kib: redisPerRound.map((x) => x.rssKiB), redis_samples_consumed: redisPerRound.reduce((a, x) => a + x.samples, 0) } : {}),
    pass: t.failed === 0,
  };
  console.log(`soak summary: ${JSON.stringify(summary)}`);
  if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(summary) + "\n");
  const h = await request(`${server.url}/health`, { method: "GET" });
  t.check("/health after the soak", h.status === 200, `${h.status}`);
}

// The counters add up over the measured rounds.
function checkCounters(before, after, all) {
  const done = all.filter((x) => (x.kind === "good" || x.kind === "maxlen") && !x.error);
  const aborted = all.filter((x) => x.kind === "abort" && !x.error);
  const accepted = all.filter((x) => x.kind !== "bad").length;
  const d = (k) => after[k] - before[k];
  const fin = (reason) => done.filter((x) => x.finish === reason).length;
  console.log(`request_success_total grew by stop ${d("stop")} (completed requests that stopped: ${fin("stop")}), ` +
    `length ${d("length")} (${fin("length")}), abort ${d("abort")} (aborted streams: ${aborted.length})`);
  t.equal("request_success_total grew by the requests the engine accepted (good + aborted + max-length)", d("success"), accepted);
  t.equal('request_success_total{finished_reason="stop"} grew by the completed requests that stopped', d("stop"), fin("stop"));
  // An aborted stream is counted under "abort" when the engine sees the abort before the request
  // ends by itself. The server learns that a client left from its socket, a step or more after
  // the client closed (the thread-per-connection server before commit 2cf3702 only at its next
  // failed write); a request that reaches max_tokens first is counted under "length" (the loop
  // prompt has no end-of-sequence token, so never "stop"). Those `late` ones are classified
  // exactly from the counters: "length" grew by the completed requests' lengths plus `late`,
  // "abort" by the aborted streams less `late`. With the aborted streams' max_tokens filling the
  // context (hundreds of tokens, dozens of steps) `late` is rare: 0 to 2 of 128-480 aborted
  // streams in the runs measured on a loaded 2-core machine. More than --max-late-aborts (10%)
  // of the aborted streams means the server is slow to notice clients leave, and fails.
  const late = d("length") - fin("length");
  t.check(`aborted streams that ended "length" before the server saw the client leave: ${late} (0 <= late <= ` +
    `${(MAX_LATE * 100).toFixed(0)}% of ${aborted.length})`, late >= 0 && late <= MAX_LATE * aborted.length,
  `"length" grew by ${d("length")}, the completed requests that ended "length": ${fin("length")}`);
  t.equal('request_success_total{finished_reason="abort"} grew by the aborted streams the engine aborted', d("abort"), aborted.length - late);
  // The engine counts a token in generation_tokens when it emits it (src/runtime/engine.cpp
  // emit()), so an aborted request's tokens are counted up to the step that saw the abort, and
  // nobody learns how many: the server sends no usage to a client that left. The aborted streams'
  // share is therefore bounded, not exact: `late` ones exactly max_tokens each, the others at
  // least the chunks with text the client read (one token or more each) and fewer than
  // max_tokens each (one that reached max_tokens ended "length").
  const doneTokens = done.reduce((a, x) => a + x.usage.completion_tokens, 0);
  const abortedTokens = d("gen") - doneTokens;
  const M = fixed.abortMaxTokens, seen = aborted.map((x) => x.seenTokens).sort((a, b) => a - b);
  const lo = late * M + seen.slice(0, aborted.length - late).reduce((a, x) => a + x, 0);
  const hi = late * M + (aborted.length - late) * (M - 1);
  t.check(`generation_tokens_total grew by the completed requests' completion tokens (${doneTokens}) plus the aborted streams' ` +
    `(${abortedTokens}, within [${lo}, ${hi}])`, abortedTokens >= lo && abortedTokens <= hi,
  `generation_tokens grew by ${d("gen")}`);
  console.log(`aborted streams: ${aborted.length} (${late} ended "length" first), ${abortedTokens} tokens generated for them ` +
    `(${aborted.length ? (abortedTokens / aborted.length).toFixed(1) : 0} each, max_tokens ${M})`);
  // Prompt tokens: every aborted stream had its whole prompt prefilled (it sent a token). A
  // request preempted before its first token is prefilled (and counted) again.
  const wantPrompt = done.reduce((a, x) => a + x.usage.prompt_tokens, 0) + aborted.length * fixed.loopPromptTokens;
  t.equal(`prompt_tokens_total grew by the accepted requests' prompt tokens (${d("preempt")} preemptions)`, d("prompt"), wantPrompt);
  if (CONNECTOR) {
    // Every request that ended by itself is exported (export_fraction 1.0; an aborted one is not:
    // nobody was given its handle), and each export ends as written, error manifest, or
    // dropped/failed.
    const e0 = before.exports, e1 = after.exports;
    t.equal("exports: the outcomes grew by the requests that ended by themselves", e1.outcomes - e0.outcomes, done.length + late);
    console.log(`exports: ${e1.written - e0.written} written, ${e1.dropped - e0.dropped} dropped or failed, ` +
      `${((e1.bytes - e0.bytes) / 1048576).toFixed(1)} MiB`);
  }
}
