// Connections that hold nothing up, against `dspark serve --idle-timeout 60`:
// - a completion is timed alone, then again with IDLE connections open that never send a byte and
//   SLOWLORIS connections that send one header line a second and never finish their request; it
//   must be answered within --max-delay-ms of its time alone, and the idle connections must stay
//   open (curl times it, from a process of its own, on a new connection);
// - STREAMS concurrent streaming requests (most of them waiting for one of 16 slots) must all
//   complete while /health answers within --max-delay-ms (a thread-per-connection server answers
//   it only when a stream ends: 58 s at 200 streams).
// The server's RSS at start, after the first requests, with the connections open, at the peak and
// after is printed (and, with --json FILE, written).
//   node connections_test.mjs --dspark BIN --model DIR [--threads N] [--idle 200]
//        [--slowloris 20] [--streams 200] [--max-tokens 8] [--max-delay-ms 1000] [--json FILE]
// scripts/serve_connections.sh runs it at 1,000 idle, 100 slowloris and 1,000 streams.
import fs from "node:fs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import net from "node:net";
import {
  Checker, getMetrics, metric, parseArgs, readSSE, request, rssKiB, run, sleep, trunc,
} from "./lib.mjs";

const opt = parseArgs();
const IDLE = opt.idle ?? 200;
const SLOW = opt.slowloris ?? 20;
const STREAMS = opt.streams ?? 200;
const MAX_TOKENS = opt.max_tokens || 8;
const MAX_DELAY_MS = opt.max_delay_ms || 1000;
const NAME = "dspark-demo";
const t = new Checker("connections_test");
const execFileP = promisify(execFile);

// Opens a TCP connection and resolves once it is connected; the socket is returned.
function connect(server) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: server.host, port: server.port });
    s.setNoDelay(true);
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
}

async function openMany(server, n) {
  const socks = [];
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(Array.from({ length: Math.min(50, n - i) }, () => connect(server)));
    for (const s of batch) {
      s.closedByServer = false;
      s.on("close", () => { s.closedByServer = true; });
      s.on("error", () => {});
      socks.push(s);
    }
  }
  return socks;
}

// A request timed by curl, a client of its own (this process holds the idle connections, and its
// event loop would add its own delays), on a new connection as a new client makes it.
async function curl(url, body) {
  const args = ["-s", "-w", "\n%{http_code} %{time_total}", "--max-time", "120"];
  if (body) args.push("-H", "Content-Type: application/json", "--data-binary", JSON.stringify(body));
  try {
    const { stdout } = await execFileP("curl", [...args, url]);
    const cut = stdout.lastIndexOf("\n");
    const [code, secs] = stdout.slice(cut + 1).split(" ");
    return { ms: Number(secs) * 1000, r: { status: Number(code), text: stdout.slice(0, cut) } };
  } catch (e) {
    return { ms: Infinity, r: { status: 0, text: `curl: ${e.message}` } };
  }
}
const timedCompletion = (server) =>
  curl(`${server.url}/v1/completions`, { model: NAME, prompt: "What is 12 times 7?", max_tokens: 4, temperature: 0 });

async function median(server, n) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const { ms: m, r } = await timedCompletion(server);
    t.check(`completion ${i}: 200`, r.status === 200, `${r.status} ${trunc(r.text)}`);
    ms.push(m);
  }
  ms.sort((a, b) => a - b);
  return ms[Math.floor(ms.length / 2)];
}

async function stream(server, i) {
  const body = i % 2
    ? { model: NAME, prompt: `Count to ${i % 10}:`, max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } }
    : { model: NAME, messages: [{ role: "user", content: `Name ${i % 7} colours.` }], max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } };
  const res = await fetch(`${server.url}${i % 2 ? "/v1/completions" : "/v1/chat/completions"}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(600000),
  });
  if (res.status !== 200) return `status ${res.status} ${trunc(await res.text(), 200)}`;
  const s = await readSSE(res);
  if (!s.done) return "no [DONE]";
  if (s.finishReasons.length !== 1) return `${s.finishReasons.length} finish_reasons`;
  if (!s.usage || s.usage.completion_tokens < 1 || s.usage.completion_tokens > MAX_TOKENS) return `usage ${JSON.stringify(s.usage)}`;
  return null;
}

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--served-model-name", NAME, "--idle-timeout", "60", "--max-num-seqs", "16", "--max-model-len", "512"],
  });
  const rss0 = rssKiB(server.pid);
  const base = await median(server, 5);
  console.log(`baseline: a completion in ${base.toFixed(1)} ms (median of 5)`);
  const rssBase = rssKiB(server.pid);

  // --- idle and slowloris connections
  const idle = await openMany(server, IDLE);
  const slow = await openMany(server, SLOW);
  for (const [i, s] of slow.entries()) s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ${i}\r\n`);
  const drip = setInterval(() => { for (const s of slow) if (!s.destroyed) s.write(`X-Drip: ${Date.now()}\r\n`); }, 1000);
  await sleep(1500);  // every slowloris has sent a few lines
  const loaded = await median(server, 5);
  const delay = loaded - base;
  console.log(`with ${IDLE} idle and ${SLOW} slowloris connections: ${loaded.toFixed(1)} ms (median of 5), ` +
    `${delay.toFixed(1)} ms over the baseline`);
  t.check(`a request with ${IDLE} idle and ${SLOW} slowloris connections open is not delayed over ${MAX_DELAY_MS} ms`,
    delay <= MAX_DELAY_MS, `${delay.toFixed(1)} ms`);
  const h = await request(`${server.url}/health`, { method: "GET", timeoutMs: 10000 });
  t.equal("/health with the connections open", h.status, 200);
  const stillOpen = idle.filter((s) => !s.closedByServer).length;
  t.equal("the idle connections are still open (within --idle-timeout)", stillOpen, IDLE);
  const rssIdle = rssKiB(server.pid);
  console.log(`RSS: ${(rss0 / 1024).toFixed(1)} MiB at start, ${(rssBase / 1024).toFixed(1)} MiB after the first requests, ` +
    `${(rssIdle / 1024).toFixed(1)} MiB with ${IDLE + SLOW} connections open`);
  clearInterval(drip);
  for (const s of [...idle, ...slow]) s.destroy();

  // --- many streams at once, most waiting for a slot
  let peak = rssKiB(server.pid), healthWorst = 0, watching = true;
  const watcher = (async () => {
    while (watching) {
      const { ms, r } = await curl(`${server.url}/health`);
      healthWorst = Math.max(healthWorst, r.status === 200 ? ms : Infinity);
      peak = Math.max(peak, rssKiB(server.pid));
      await sleep(200);
    }
  })();
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(server, i).catch((e) => `${e.name}: ${e.message}`)));
  watching = false;
  await watcher;
  const failed = results.map((e, i) => [i, e]).filter(([, e]) => e);
  t.check(`all ${STREAMS} concurrent streams complete`, failed.length === 0,
    `${failed.length} failed: ${failed.slice(0, 5).map(([i, e]) => `#${i} ${e}`).join("; ")}`);
  const m = await getMetrics(server);
  const waitingNow = metric(m, "vllm:num_requests_waiting", { model_name: NAME });
  t.equal("nothing left waiting", waitingNow, 0);
  await sleep(500);
  const rssAfter = rssKiB(server.pid);
  const s = (performance.now() - t0) / 1000;
  console.log(`${STREAMS} streams in ${s.toFixed(1)} s; /health answered within ${healthWorst.toFixed(1)} ms throughout; ` +
    `RSS peak ${(peak / 1024).toFixed(1)} MiB, after ${(rssAfter / 1024).toFixed(1)} MiB`);
  t.check(`/health answered within ${MAX_DELAY_MS} ms while the streams ran`, healthWorst <= MAX_DELAY_MS,
    `${healthWorst.toFixed(1)} ms`);
  const summary = {
    idle: IDLE, slowloris: SLOW, streams: STREAMS, baseline_ms: base, loaded_ms: loaded, delay_ms: delay,
    health_worst_ms: healthWorst, rss_start_kib: rss0, rss_served_kib: rssBase, rss_connections_kib: rssIdle, rss_peak_kib: peak, rss_after_kib: rssAfter,
  };
  console.log(JSON.stringify(summary));
  if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(summary, null, 2) + "\n");
}, { deadlineMs: 900000 });
