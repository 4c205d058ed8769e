// A long prompt prefills in chunks (--max-num-batched-tokens) beside the decoding requests, so
// the short requests already streaming keep getting tokens while it prefills, and the long one
// completes: its prompt takes many steps, and every one of those steps also advanced the short
// streams. (Counted in tokens received, not timed: timing belongs to the benchmarks.)
//   node long_prompt_test.mjs --dspark BIN --model DIR --drafter DIR [--threads N]
import { Checker, parseArgs, readSSE, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("long_prompt_test");
const CHUNK = 64;

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter), "--max-num-batched-tokens", String(CHUNK),
      "--no-enable-prefix-caching"],
  });
  const tok = await fetch(`${server.url}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "The store sells apples and pears. ".repeat(200) }) }).then((r) => r.json());
  const longPrompt = "The store sells apples and pears. ".repeat(Math.floor(200 * 1500 / tok.count));

  const events = [];  // [time, who]
  const stream = async (who, body) => {
    const res = await fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true }, temperature: 0, ignore_eos: true }) });
    const out = await readSSE(res, { onEvent: (j) => { if ((j.choices || []).length) events.push([performance.now(), who]); } });
    return { status: res.status, ...out };
  };
  // Three short streams first; once each has its first tokens, the long prompt.
  const shorts = [0, 1, 2].map((i) => stream(`short${i}`, { prompt: `Count to ten, take ${i}:`, max_tokens: 400 }));
  while (new Set(events.map((e) => e[1])).size < 3) await new Promise((r) => setTimeout(r, 5));
  const sent = performance.now();
  const long = await stream("long", { prompt: longPrompt, max_tokens: 4 });
  const all = await Promise.all(shorts);

  t.equal("the long request: 200", long.status, 200);
  t.check("the long request: complete", long.done && long.usage && long.usage.prompt_tokens >= 1200,
    JSON.stringify(long.usage));
  const steps = Math.ceil((long.usage ? long.usage.prompt_tokens : 0) / CHUNK);
  const firstLong = events.find((e) => e[1] === "long");
  const during = events.filter((e) => e[0] > sent && firstLong && e[0] < firstLong[0] && e[1] !== "long");
  for (let i = 0; i < 3; i++) {
    const n = during.filter((e) => e[1] === `short${i}`).length;
    console.log(`short${i}: ${n} chunks during the long prefill (${steps} steps)`);
    t.check(`short${i}: streamed while the long prompt prefilled (${n} chunks over a prefill of >= ${steps} steps)`,
      n >= Math.floor(steps / 2), `${n} chunks`);
    t.check(`short${i}: complete`, all[i].done && all[i].usage && all[i].usage.completion_tokens === 400,
      trunc(JSON.stringify(all[i].usage)));
  }
});
