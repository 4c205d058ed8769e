// Request options over HTTP that the other tests only refuse when malformed, and the server's
// idle time-out. A speculative server in f32, where the speculative greedy text is the target's:
//   - stop_token_ids: the text ends at the first listed token (its text left out, as vLLM does),
//     completion_tokens count it, finish_reason "stop" and stop_reason the id, streamed or not;
//     a stop string gives stop_reason the string; a length stop gives null;
//   - min_p = 1 and top_k = 1 at temperature 1 keep only the most likely token, so the text is the
//     greedy text; min_p = 0.3 with a seed gives the same text twice;
//   - --idle-timeout 1: a connection that sends nothing, and a kept-alive one after its response,
//     are closed by the server within a few seconds.
//   node options_test.mjs --dspark BIN --model DIR --drafter DIR [--threads N]
import net from "node:net";

import { Checker, parseArgs, readSSE, request, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("options_test");
const NAME = "dspark-demo";
const PROMPT = "Once upon a time";
const N = 24;

// Resolves with the milliseconds until the server closes a socket that sent `send` (or nothing),
// or with null when it is still open after `limitMs`.
function closedAfter(server, send, limitMs) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const sock = net.connect(server.port, server.host);
    let settled = false;
    const done = (v) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(null), limitMs);
    sock.on("connect", () => { if (send) sock.write(send); });
    sock.on("data", () => {});
    sock.on("close", () => done(Date.now() - t0));
    sock.on("error", () => done(Date.now() - t0));
  });
}

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--served-model-name", NAME, "--dtype", "f32", "--idle-timeout", "1",
      "--speculative-config", specConfig(opt.drafter)],
  });
  const cmpl = (extra) => request(`${server.url}/v1/completions`,
    { body: { model: NAME, prompt: PROMPT, max_tokens: N, temperature: 0, ...extra } });

  const greedy = await cmpl({});
  t.check("greedy: 200", greedy.status === 200, `${greedy.status} ${trunc(greedy.text)}`);
  const full = greedy.json.choices[0].text;
  t.equal("greedy: length stop", greedy.json.choices[0].finish_reason, "length");
  t.equal("greedy: stop_reason null", greedy.json.choices[0].stop_reason, null);

  // --- stop_token_ids: a token of the greedy text whose first occurrence is at index j >= 3.
  const tok = await request(`${server.url}/tokenize`, { body: { model: NAME, prompt: full, add_special_tokens: false } });
  t.check("tokenize: 200", tok.status === 200, trunc(tok.text));
  const ids = tok.json.tokens;
  let j = -1;
  for (let i = 3; i < ids.length - 2 && j < 0; i++) if (ids.indexOf(ids[i]) === i) j = i;
  t.check("a stop token candidate", j >= 3, JSON.stringify(ids));
  const stopId = ids[j];
  const before = await request(`${server.url}/detokenize`, { body: { model: NAME, tokens: ids.slice(0, j) } });
  const s = await cmpl({ stop_token_ids: [stopId] });
  const c = s.json.choices[0];
  t.equal("stop_token_ids: finish_reason", c.finish_reason, "stop");
  t.equal("stop_token_ids: stop_reason is the id", c.stop_reason, stopId);
  t.equal("stop_token_ids: the text before the token", c.text, before.json.prompt);
  t.equal("stop_token_ids: completion_tokens count the stop token", s.json.usage.completion_tokens, j + 1);
  t.check("stop_token_ids: a prefix of the greedy text", full.startsWith(c.text), `${JSON.stringify(c.text)} / ${JSON.stringify(full)}`);

  const res = await fetch(`${server.url}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: NAME, prompt: PROMPT, max_tokens: N, temperature: 0, stop_token_ids: [stopId], stream: true }),
  });
  const sse = await readSSE(res);
  const last = sse.events[sse.events.length - 1];
  t.equal("stream, stop_token_ids: same text", sse.text, c.text);
  t.equal("stream, stop_token_ids: finish_reason", last.choices[0].finish_reason, "stop");
  t.equal("stream, stop_token_ids: stop_reason on the last chunk", last.choices[0].stop_reason, stopId);

  // --- a stop string.
  const word = full.trim().split(/\s+/)[2];
  const ss = await cmpl({ stop: ["zzqq", word] });
  t.equal("stop string: finish_reason", ss.json.choices[0].finish_reason, "stop");
  t.equal("stop string: stop_reason is the string", ss.json.choices[0].stop_reason, word);
  t.equal("stop string: the text before it", ss.json.choices[0].text, full.slice(0, full.indexOf(word)));
  const chat = await request(`${server.url}/v1/chat/completions`, {
    body: { model: NAME, messages: [{ role: "user", content: PROMPT }], max_tokens: N, temperature: 0 },
  });
  const cw = chat.json.choices[0].message.content.trim().split(/\s+/)[1];
  const chs = await request(`${server.url}/v1/chat/completions`, {
    body: { model: NAME, messages: [{ role: "user", content: PROMPT }], max_tokens: N, temperature: 0, stop: cw },
  });
  t.equal("chat stop string: stop_reason", chs.json.choices[0].stop_reason, cw);

  // --- min_p and top_k at temperature 1.
  for (const [name, extra] of [["min_p 1", { min_p: 1 }], ["top_k 1", { top_k: 1 }]]) {
    const r = await cmpl({ temperature: 1, seed: 7, ...extra });
    t.equal(`${name} at T=1: the greedy text`, r.json.choices[0].text, full);
  }
  const m1 = await cmpl({ temperature: 1, min_p: 0.3, seed: 11 });
  const m2 = await cmpl({ temperature: 1, min_p: 0.3, seed: 11 });
  t.check("min_p 0.3, seeded: 200", m1.status === 200 && m2.status === 200, trunc(m1.text));
  t.equal("min_p 0.3, seeded: the same text twice", m2.json.choices[0].text, m1.json.choices[0].text);
  t.check("min_p 0.3: ends by length or a stop", ["length", "stop"].includes(m1.json.choices[0].finish_reason),
    m1.json.choices[0].finish_reason);

  // --- --idle-timeout 1.
  const silent = await closedAfter(server, null, 8000);
  t.check("idle: a silent connection is closed", silent !== null && silent >= 500, `closed after ${silent} ms`);
  const partial = await closedAfter(server, "GET /health HTTP/1.1\r\nHost: x\r\n", 8000);
  t.check("idle: a stalled request head is closed", partial !== null && partial < 5000, `closed after ${partial} ms`);
  const kept = await closedAfter(server, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", 8000);
  t.check("idle: a kept-alive connection is closed after its response", kept !== null && kept >= 500, `closed after ${kept} ms`);
  const ok = await request(`${server.url}/health`, { method: "GET" });
  t.equal("the server still answers", ok.status, 200);
}, { deadlineMs: 150000 });
