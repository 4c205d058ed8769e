// SIGTERM drains: with a stream running and a second request waiting for its slot
// (--max-num-seqs 1) and an idle keep-alive connection open, SIGTERM must let both requests
// finish normally ([DONE], finish_reason, full usage), refuse new work meanwhile (a new connection
// is refused or gets 503, never a completion), then exit with status 0; afterwards connections are
// refused. An idle server exits 0 promptly on SIGTERM.
//   node drain_test.mjs --dspark BIN --model DIR [--threads N]
import http from "node:http";
import {
  Checker, getMetrics, metric, parseArgs, pollMetrics, readSSE, run, sleep, tail, trunc,
} from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("drain_test");
const NAME = "dspark-demo";
const lab = { model_name: NAME };
// Greedy, the demo model loops on this prompt without an end-of-sequence token, so both requests
// run to max_tokens (finish_reason "length").
const PROMPT = "Once upon a time, in a town by the sea,";
const A_TOKENS = 400, B_TOKENS = 60;

// A request on a new connection (no keep-alive pool): { status, body } or { error: code }.
function fresh(server, method, path, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: server.host, port: server.port, method, path, agent: false, timeout: 10000,
      headers: body ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } : {} }, (res) => {
      let data = "";
      res.on("data", (c) => { data += c; });
      res.on("end", () => resolve({ status: res.statusCode, body: data }));
      res.on("error", (e) => resolve({ error: e.code || e.message }));
    });
    req.on("timeout", () => { req.destroy(new Error("timeout")); });
    req.on("error", (e) => resolve({ error: e.code || e.message }));
    if (body) req.write(body);
    req.end();
  });
}
const refusedOr503 = (r) => (r.error !== undefined && r.error !== "timeout") || r.status === 503;

function stream(server, maxTokens) {
  return fetch(`${server.url}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" }, signal: AbortSignal.timeout(90000),
    body: JSON.stringify({ model: NAME, prompt: PROMPT, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
}

await run(t, async (start) => {
  // --- draining with work in flight.
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--served-model-name", NAME, "--max-num-seqs", "1", "--max-model-len", "1024"],
  });
  const h = await fetch(`${server.url}/health`);  // leaves an idle keep-alive connection in fetch's pool
  t.check("/health before", h.status === 200, String(h.status));
  await h.text();

  let aEvents = 0, aActive = true;
  let firstA;
  const aFirst = new Promise((r) => { firstA = r; });
  const aRes = await stream(server, A_TOKENS);
  t.check("stream A: 200", aRes.status === 200, String(aRes.status));
  const aDone = readSSE(aRes, { onEvent: () => { if (++aEvents === 3) firstA(); } }).finally(() => { aActive = false; firstA(); });
  const bRes = stream(server, B_TOKENS);
  const waiting = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_waiting", lab) === 1 && metric(m, "vllm:num_requests_running", lab) === 1,
    { timeoutMs: 10000, intervalMs: 20 });
  t.check("A runs and B waits before SIGTERM", waiting.ok,
    `running ${metric(waiting.m, "vllm:num_requests_running", lab)}, waiting ${metric(waiting.m, "vllm:num_requests_waiting", lab)}`);
  await aFirst;
  t.check("stream A is under way at SIGTERM", aActive && aEvents >= 3, `${aEvents} events, active ${aActive}`);

  const tTerm = Date.now();
  process.kill(server.pid, "SIGTERM");
  await sleep(200);
  // New work during the drain: refused, or 503.
  const during = [];
  for (const [method, path, body] of [
    ["POST", "/v1/completions", JSON.stringify({ model: NAME, prompt: "Hi", max_tokens: 2 })],
    ["POST", "/v1/chat/completions", JSON.stringify({ model: NAME, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 })],
    ["GET", "/health"],
  ]) {
    const r = await fresh(server, method, path, body);
    during.push([`${method} ${path}`, r, aActive]);
  }
  for (const [what, r, active] of during) {
    t.check(`during the drain: ${what} on a new connection is refused or 503`, refusedOr503(r), trunc(JSON.stringify(r)));
    t.check(`during the drain: ${what} was tried while stream A still ran`, active, "stream A had already ended: the check proves nothing");
  }

  const a = await aDone;
  t.check("stream A: [DONE] after SIGTERM", a.done && a.afterDone === 0 && a.bad.length === 0, JSON.stringify({ done: a.done, bad: a.bad.slice(0, 2) }));
  t.equal("stream A: finish_reason", a.finishReasons, ["length"]);
  t.equal("stream A: all its tokens", a.usage && a.usage.completion_tokens, A_TOKENS);
  let b;
  try {
    const br = await bRes;
    t.check("request B (queued at SIGTERM): 200", br.status === 200, `${br.status}`);
    b = br.status === 200 ? await readSSE(br) : null;
  } catch (e) {
    t.check("request B (queued at SIGTERM): a response", false, `${e.name} ${e.message} ${e.cause ? e.cause.code || "" : ""}`);
  }
  if (b) {
    t.check("request B: [DONE]", b.done, JSON.stringify(b.finishReasons));
    t.equal("request B: finish_reason", b.finishReasons, ["length"]);
    t.equal("request B: all its tokens", b.usage && b.usage.completion_tokens, B_TOKENS);
  }
  const ex = await server.waitExit(30000);
  t.check("exits after the drain", ex !== null, `still running 30 s after SIGTERM; output:\n${tail(server.log())}`);
  if (ex) {
    t.equal("exit status 0 after SIGTERM", ex, { code: 0, signal: null });
    console.log(`drained and exited ${((Date.now() - tTerm) / 1000).toFixed(2)} s after SIGTERM`);
    const after = await fresh(server, "GET", "/health");
    t.check("after exit: connections refused", after.error === "ECONNREFUSED", JSON.stringify(after));
  }
  t.check("no crash report in the output", !/terminate called|Segmentation|AddressSanitizer|Aborted/.test(server.log()), tail(server.log(), 1500));

  // --- an idle server.
  const idle = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args: ["--served-model-name", NAME] });
  const m = await getMetrics(idle);
  t.equal("idle server: nothing running", metric(m, "vllm:num_requests_running", lab), 0);
  const t1 = Date.now();
  process.kill(idle.pid, "SIGTERM");
  const ex2 = await idle.waitExit(10000);
  t.check("idle server: exits within 10 s of SIGTERM", ex2 !== null, "still running");
  if (ex2) {
    t.equal("idle server: exit status 0", ex2, { code: 0, signal: null });
    console.log(`idle server exited ${((Date.now() - t1) / 1000).toFixed(2)} s after SIGTERM`);
  }
}, { deadlineMs: 120000 });
