// Fault case: clients that go away mid-request. A long streaming request is started, a few chunks
// are read, then the client aborts (AbortController closes the socket). The server must abort the
// request and free its KV blocks: /metrics must show vllm:num_requests_running back to 0,
// vllm:kv_cache_usage_perc back to its idle value, and the request counted with
// finished_reason "abort", well before it could have finished by itself. The same for several
// streams at once, and for a non-streaming request whose client gives up. The server still
// answers afterwards.
//   node disconnect_test.mjs --dspark BIN --model DIR [--drafter DIR] [--threads N]
import {
  Checker, getMetrics, metric, parseArgs, pollMetrics, request, run, sleep, sleepUnref, specConfig, trunc,
} from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("disconnect_test");
const NAME = "dspark-demo";
const CTX = 2048;
const LONG = 1900;  // max_tokens of the requests that get cut: far longer than the test waits
const lab = { model_name: NAME };

// Greedy, this prompt makes the demo model loop without an end-of-sequence token for all LONG
// tokens (`dspark generate` gives finish_reason "length"), so the request cannot end by itself
// while the test cuts it.
const longBody = (stream) => ({
  model: NAME, prompt: "Once upon a time, in a town by the sea,", max_tokens: LONG, temperature: 0, stream,
  ...(stream ? { stream_options: { include_usage: true } } : {}),
});

await run(t, async (start) => {
  const args = ["--served-model-name", NAME, "--max-model-len", String(CTX), "--kv-cache-memory", "0.25"];
  if (opt.drafter) args.push("--speculative-config", specConfig(opt.drafter));
  const server = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args });

  const m0 = await getMetrics(server);
  const kvIdle = metric(m0, "vllm:kv_cache_usage_perc", lab);
  const abort0 = metric(m0, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0;
  t.check("idle: kv_cache_usage_perc is a fraction", typeof kvIdle === "number" && kvIdle >= 0 && kvIdle < 1, String(kvIdle));
  t.equal("idle: nothing running", metric(m0, "vllm:num_requests_running", lab), 0);

  // --- one stream, cut after a few chunks.
  await cut(server, 1, kvIdle, abort0, "one stream");
  // --- four streams at once, cut together.
  const abort1 = metric(await getMetrics(server), "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0;
  await cut(server, 4, kvIdle, abort1, "four streams");

  // --- a non-streaming request whose client gives up 0.2 s after it runs. Its prompt repeats the
  // streams' and the demo text loops, so with the drafter's context parked by the streams it
  // speculates from its first step: on an idle 2-core Zen 5 all LONG tokens took under 1.5 s.
  const abort2 = metric(await getMetrics(server), "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0;
  const ac = new AbortController();
  const p = fetch(`${server.url}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(longBody(false)), signal: ac.signal,
  }).then((r) => r.text()).then((x) => ({ done: x }), (e) => ({ aborted: e.name }));
  const running = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_running", lab) === 1, { timeoutMs: 10000, intervalMs: 50 });
  t.check("non-streaming: the request runs", running.ok, `running ${metric(running.m, "vllm:num_requests_running", lab)}`);
  await sleep(200);
  ac.abort();
  const pr = await p;
  t.check("non-streaming: the client aborted before the response", pr.aborted === "AbortError", trunc(JSON.stringify(pr)));
  const tAbort = Date.now();
  const freed = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_running", lab) === 0 &&
    metric(m, "vllm:kv_cache_usage_perc", lab) <= kvIdle, { timeoutMs: 15000 });
  const abortN = metric(freed.m, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0;
  t.check("non-streaming: running 0 and KV usage back to idle after the client left", freed.ok,
    `running ${metric(freed.m, "vllm:num_requests_running", lab)}, kv ${metric(freed.m, "vllm:kv_cache_usage_perc", lab)} (idle ${kvIdle}) after 15 s`);
  t.equal("non-streaming: counted as aborted", abortN - abort2, 1);
  console.log(`non-streaming: freed ${((Date.now() - tAbort) / 1000).toFixed(2)} s after the client left`);

  // --- the server still answers.
  const ok = await request(`${server.url}/v1/completions`, { body: { model: NAME, prompt: "Hello", max_tokens: 4, temperature: 0 } });
  t.check("a good request afterwards", ok.status === 200 && ok.json.usage.completion_tokens >= 1, `${ok.status} ${trunc(ok.text)}`);
  // The gauges move when the engine retires the request, at the end of the step that sent its
  // last token, which may come just after the response: poll, as a dashboard would.
  const { m: mEnd } = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_running", lab) === 0 &&
    metric(m, "vllm:kv_cache_usage_perc", lab) <= kvIdle, { timeoutMs: 5000, intervalMs: 20 });
  t.equal("end: nothing running", metric(mEnd, "vllm:num_requests_running", lab), 0);
  t.check("end: KV usage at idle", metric(mEnd, "vllm:kv_cache_usage_perc", lab) <= kvIdle, String(metric(mEnd, "vllm:kv_cache_usage_perc", lab)));
}, { deadlineMs: 120000 });

// Starts n long streams, reads a few chunks of each, checks they hold KV blocks, aborts them all,
// then waits for the server to free everything.
async function cut(server, n, kvIdle, abortBefore, what) {
  const acs = [], firsts = [];
  const streams = [];
  for (let i = 0; i < n; i++) {
    const ac = new AbortController();
    acs.push(ac);
    let gotChunks;
    firsts.push(new Promise((r) => { gotChunks = r; }));
    streams.push(fetch(`${server.url}/v1/completions`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(longBody(true)), signal: ac.signal,
    }).then(async (res) => {
      if (res.status !== 200) { gotChunks(`status ${res.status}`); return `status ${res.status} ${await res.text()}`; }
      // Read 5 events, then hold the socket open without reading until the test aborts it.
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let text = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) { gotChunks(`stream ended: ${trunc(text.slice(-300), 300)}`); return "ended"; }
        text += dec.decode(value, { stream: true });
        if ((text.match(/\n\n/g) || []).length >= 5) break;
      }
      gotChunks(text.includes("[DONE]") ? "done early" : "ok");
      await new Promise((_, rej) => ac.signal.addEventListener("abort", () => rej(new DOMException("aborted", "AbortError"))));
      return "unreachable";
    }).catch((e) => (e.name === "AbortError" ? "cut" : `error ${e.name} ${e.message}`)));
  }
  const got = await Promise.race([Promise.all(firsts), sleepUnref(60000).then(() => null)]);
  t.check(`${what}: each stream sent 5 chunks`, got && got.every((g) => g === "ok"), JSON.stringify(got));
  const m = await getMetrics(server);
  const kvBusy = metric(m, "vllm:kv_cache_usage_perc", lab);
  t.equal(`${what}: running while streaming`, metric(m, "vllm:num_requests_running", lab), n);
  t.check(`${what}: KV usage above idle while streaming`, kvBusy > kvIdle, `${kvBusy} (idle ${kvIdle})`);
  // The client goes away: abort() destroys the socket.
  for (const ac of acs) ac.abort();
  const ends = await Promise.all(streams);
  t.check(`${what}: streams were cut, not finished`, ends.every((e) => e === "cut"), JSON.stringify(ends));
  const tAbort = Date.now();
  const freed = await pollMetrics(server, (mm) => metric(mm, "vllm:num_requests_running", lab) === 0 &&
    metric(mm, "vllm:kv_cache_usage_perc", lab) <= kvIdle, { timeoutMs: 15000 });
  const secs = (Date.now() - tAbort) / 1000;
  t.check(`${what}: running 0 and KV usage back to idle after the disconnect`, freed.ok,
    `after 15 s: running ${metric(freed.m, "vllm:num_requests_running", lab)}, waiting ${metric(freed.m, "vllm:num_requests_waiting", lab)}, ` +
    `kv ${metric(freed.m, "vllm:kv_cache_usage_perc", lab)} (idle ${kvIdle})`);
  const aborted = (metric(freed.m, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0) - abortBefore;
  t.equal(`${what}: counted with finished_reason "abort"`, aborted, n);
  console.log(`${what}: freed ${secs.toFixed(2)} s after the disconnect`);
}
