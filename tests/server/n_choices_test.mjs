// `n` and prompt lists through the official `openai` npm client (and raw HTTP where the client
// cannot say it: a 64-bit seed, the SSE framing) against `dspark serve` with the DSpark drafter:
// - n=3 with a seed at temperature 0.8: choices 0..2, the same texts on a repeat, not all equal;
//   at temperature 0 three copies of the n=1 text (completions and chat);
// - streamed n=3 equals non-streamed per index, each index ends with its own finish_reason, one
//   usage chunk after all of them, [DONE] once;
// - a list of 2 prompts with n=2: 4 choices in OpenAI's order (prompt * n + choice), each the
//   single-prompt request with the choice's seed (choice_seed: splitmix64(seed + i), the seed
//   itself for choice 0), echo per prompt; usage sums (prompt tokens once per prompt);
// - cached_tokens and vLLM's counters for shared prompts (printed); a client that leaves aborts
//   every choice; the bad values of n and of prompt lists get 400 naming the field, and the
//   server serves afterwards.
//   node n_choices_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { pathToFileURL } from "node:url";
import {
  Checker, authHeaders, getMetrics, metric, parseArgs, pollMetrics, readSSE, request, run, specConfig, trunc,
} from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("n_choices_test");
const KEY = "sk-dspark-n";
const NAME = "dspark-demo";
const BLOCK = 16;  // KV block (kKvBlock)
const lab = { model_name: NAME };
const auth = authHeaders(KEY);

// docs/serving.md: choice i > 0 of a request seeded S samples with splitmix64(S + i).
const M64 = (1n << 64n) - 1n;
function choiceSeed(seed, i) {
  if (i === 0) return BigInt(seed);
  let z = (BigInt.asUintN(64, BigInt(seed)) + BigInt(i) + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return BigInt.asIntN(64, z ^ (z >> 31n));  // the server takes seeds as int64
}
// A body with a 64-bit seed written exactly (a JS number would round it).
const withSeed = (body, seed) => JSON.stringify({ ...body, seed: 0 }).replace('"seed":0', `"seed":${seed.toString()}`);

const sum = (a) => a.reduce((x, y) => x + y, 0);
const cached = (u) => (u && u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : undefined);

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter), "--api-key", KEY, "--served-model-name", NAME, "--max-model-len", "512"],
  });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, timeout: 60000, maxRetries: 0 });
  const C = `${server.url}/v1/completions`;
  const post = (body) => request(C, { body, headers: auth });

  // --- n=3, seeded, temperature 0.8.
  const P = "Write a short poem about the sea.";
  const sampled = { model: NAME, prompt: P, max_tokens: 16, temperature: 0.8, seed: 1234, n: 3 };
  const a = await client.completions.create(sampled);
  t.equal("n=3 seeded: indices 0..2", a.choices.map((c) => c.index), [0, 1, 2]);
  const texts = a.choices.map((c) => c.text);
  const again = await client.completions.create(sampled);
  t.equal("n=3 seeded: the same texts on a repeat", again.choices.map((c) => c.text), texts);
  t.check("n=3 seeded: not all equal", new Set(texts).size > 1, JSON.stringify(texts));
  t.check("n=3 seeded: each choice has a finish_reason", a.choices.every((c) => c.finish_reason === "stop" || c.finish_reason === "length"),
    JSON.stringify(a.choices.map((c) => c.finish_reason)));
  // Choice 0 keeps the seed: it is the n=1 request's text.
  const one = await client.completions.create({ ...sampled, n: 1 });
  t.equal("n=3 seeded: choice 0 is the n=1 request's text", texts[0], one.choices[0].text);
  t.equal("n=3: prompt_tokens counts the prompt once", a.usage.prompt_tokens, one.usage.prompt_tokens);
  console.log(`n=3 seeded usage ${JSON.stringify(a.usage)}; its repeat ${JSON.stringify(again.usage)}; n=1 ${JSON.stringify(one.usage)}`);

  // --- temperature 0: three copies of the n=1 text.
  const greedy = { model: NAME, prompt: P, max_tokens: 16, temperature: 0 };
  const g1 = await client.completions.create(greedy);
  const g3 = await client.completions.create({ ...greedy, n: 3 });
  t.equal("n=3 greedy: three copies of the n=1 text", g3.choices.map((c) => c.text), [0, 1, 2].map(() => g1.choices[0].text));
  t.equal("n=3 greedy: completion_tokens sums the choices", g3.usage.completion_tokens, 3 * g1.usage.completion_tokens);
  const chatReq = { model: NAME, messages: [{ role: "user", content: "What is 12 times 7?" }], max_tokens: 12, temperature: 0 };
  const c1 = await client.chat.completions.create(chatReq);
  const c2 = await client.chat.completions.create({ ...chatReq, n: 2 });
  t.equal("chat n=2 greedy: two copies of the n=1 message", c2.choices.map((c) => [c.index, c.message.content]),
    [[0, c1.choices[0].message.content], [1, c1.choices[0].message.content]]);
  t.equal("chat n=2: usage", [c2.usage.prompt_tokens, c2.usage.completion_tokens], [c1.usage.prompt_tokens, 2 * c1.usage.completion_tokens]);

  // --- streamed n=3 equals non-streamed per index (openai client), and the SSE framing (raw).
  const s = await client.completions.create({ ...sampled, stream: true, stream_options: { include_usage: true } });
  const st = ["", "", ""], fin = [[], [], []];
  let usage = null, usageChunks = 0;
  for await (const ch of s) {
    for (const c of ch.choices || []) {
      st[c.index] += c.text || "";
      if (c.finish_reason) fin[c.index].push(c.finish_reason);
    }
    if (ch.usage) { usage = ch.usage; usageChunks++; }
  }
  t.equal("stream n=3: texts per index equal the non-streamed ones", st, texts);
  t.equal("stream n=3: one finish_reason per index", fin.map((f) => f.length), [1, 1, 1]);
  t.equal("stream n=3: finish_reasons equal the non-streamed ones", fin.map((f) => f[0]), a.choices.map((c) => c.finish_reason));
  t.equal("stream n=3: one usage chunk", usageChunks, 1);
  t.equal("stream n=3: usage tokens equal the non-streamed ones", usage && [usage.prompt_tokens, usage.completion_tokens],
    [a.usage.prompt_tokens, a.usage.completion_tokens]);
  const chatStream = await client.chat.completions.create({ ...chatReq, n: 2, stream: true });
  const cs = ["", ""];
  for await (const ch of chatStream) for (const c of ch.choices || []) cs[c.index] += c.delta.content || "";
  t.equal("chat stream n=2: texts per index", cs, c2.choices.map((c) => c.message.content));
  {
    const res = await fetch(C, { method: "POST", headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ ...sampled, stream: true, stream_options: { include_usage: true } }) });
    const sse = await readSSE(res);
    t.check("stream n=3 (raw): [DONE] once, at the end", sse.done && sse.afterDone === 0 && sse.bad.length === 0, JSON.stringify(sse.bad));
    const last = sse.events[sse.events.length - 1];
    t.check("stream n=3 (raw): the usage chunk is last, with no choices", last && last.usage && last.choices.length === 0, trunc(JSON.stringify(last)));
    t.check("stream n=3 (raw): every chunk holds one choice with its index", sse.events.slice(0, -1).every((e) => e.choices.length === 1 &&
      [0, 1, 2].includes(e.choices[0].index)), "");
    const lastFinish = sse.events.map((e, i) => (e.choices[0] && e.choices[0].finish_reason ? i : -1));
    t.check("stream n=3 (raw): the usage chunk follows every finish_reason", Math.max(...lastFinish) < sse.events.length - 1, "");
  }

  // --- a list of 2 prompts with n=2.
  const prompts = ["Name a famous river in Europe.", "List three colours."];
  const SEED = 987654321n;
  const listBody = { model: NAME, prompt: prompts, n: 2, max_tokens: 12, temperature: 0.8 };
  const list = await request(C, { body: withSeed(listBody, SEED), headers: auth });
  t.check("prompt list: 200", list.status === 200, `${list.status} ${trunc(list.text)}`);
  const lc = list.json ? list.json.choices : [];
  t.equal("prompt list: 4 choices, indices 0..3", lc.map((c) => c.index), [0, 1, 2, 3]);
  const singles = [];
  for (let p = 0; p < 2; p++) {
    for (let c = 0; c < 2; c++) {
      const seed = choiceSeed(SEED, c);
      const r = await request(C, { body: withSeed({ ...listBody, prompt: prompts[p], n: 1 }, seed), headers: auth });
      singles.push(r.json);
      t.equal(`prompt list: choice ${p * 2 + c} is prompt ${p} with seed ${seed}`, lc[p * 2 + c] && lc[p * 2 + c].text, r.json.choices[0].text);
    }
  }
  if (list.json) {
    const u = list.json.usage;
    t.equal("prompt list: prompt_tokens sums the prompts once each", u.prompt_tokens, singles[0].usage.prompt_tokens + singles[2].usage.prompt_tokens);
    t.equal("prompt list: completion_tokens sums the choices", u.completion_tokens, sum(singles.map((x) => x.usage.completion_tokens)));
    t.equal("prompt list: total_tokens", u.total_tokens, u.prompt_tokens + u.completion_tokens);
    console.log(`prompt list (2 prompts, n=2) usage ${JSON.stringify(u)}`);
  }
  // Greedy, a list of token-id prompts: each choice is the single prompt's greedy text.
  const tok = async (text) => (await request(`${server.url}/tokenize`, { body: { model: NAME, prompt: text }, headers: auth })).json.tokens;
  const ids = [await tok(prompts[0]), await tok(prompts[1])];
  const gl = await client.completions.create({ model: NAME, prompt: ids, n: 2, max_tokens: 12, temperature: 0 });
  const gs = [];
  for (const p of prompts) gs.push((await client.completions.create({ model: NAME, prompt: p, max_tokens: 12, temperature: 0 })).choices[0].text);
  t.equal("token-id prompt list, greedy: each choice is its prompt's text", gl.choices.map((c) => c.text), [gs[0], gs[0], gs[1], gs[1]]);
  const echo = await client.completions.create({ model: NAME, prompt: prompts, n: 2, max_tokens: 4, temperature: 0, echo: true });
  t.check("prompt list with echo: each choice is its own prompt, then the start of its greedy text",
    echo.choices.length === 4 && echo.choices.every((c, i) => c.text.startsWith(prompts[Math.floor(i / 2)]) &&
      gs[Math.floor(i / 2)].startsWith(c.text.slice(prompts[Math.floor(i / 2)].length))),
    JSON.stringify(echo.choices.map((c) => c.text)));
  const streamedList = await post({ ...listBody, prompt: prompts, temperature: 0, stream: true });
  t.check("prompt list, streamed: 200", streamedList.status === 200, trunc(streamedList.text));

  // --- the prefix cache: a prompt shared by n choices (printed; the choices are admitted together,
  // before any of them has committed a block), then the same request again.
  let doc = "";
  for (let i = 0; i < 6; i++) doc += `Line ${i}: the store sells ${3 + i} apples for ${2 * i + 1} dollars. `;
  // The counters move when the engine retires a request, just after its last output: poll for
  // an idle engine before the baseline, and for the counts after.
  const idle = (m) => metric(m, "vllm:num_requests_running", lab) === 0 && metric(m, "vllm:num_requests_waiting", lab) === 0;
  const m0 = (await pollMetrics(server, idle, { timeoutMs: 10000 })).m;
  const first = await client.completions.create({ model: NAME, prompt: doc, n: 4, max_tokens: 8, temperature: 0 });
  const second = await client.completions.create({ model: NAME, prompt: doc, n: 4, max_tokens: 8, temperature: 0 });
  const m1 = await getMetrics(server);
  const pt = first.usage.prompt_tokens;
  console.log(`shared prompt, n=4: first usage ${JSON.stringify(first.usage)}, again ${JSON.stringify(second.usage)}; ` +
    `prefix_cache_queries +${metric(m1, "vllm:prefix_cache_queries_total", lab) - metric(m0, "vllm:prefix_cache_queries_total", lab)}, ` +
    `hits +${metric(m1, "vllm:prefix_cache_hits_total", lab) - metric(m0, "vllm:prefix_cache_hits_total", lab)}`);
  t.check("shared prompt: cached_tokens is whole blocks within the prompt", [first, second].every((r) =>
    Number.isInteger(cached(r.usage)) && cached(r.usage) % BLOCK === 0 && cached(r.usage) < r.usage.prompt_tokens), "");
  t.equal("shared prompt again: every whole block below the last token is cached", cached(second.usage), Math.floor((pt - 1) / BLOCK) * BLOCK);
  t.equal("vllm:prefix_cache_queries_total counts every choice's prompt", metric(m1, "vllm:prefix_cache_queries_total", lab) -
    metric(m0, "vllm:prefix_cache_queries_total", lab), 8 * pt);
  const done = (m) => ["stop", "length"].map((f) => metric(m, "vllm:request_success_total", { ...lab, finished_reason: f }) || 0);
  const d0 = done(m0);
  const counted = await pollMetrics(server, (m) => sum(done(m)) - sum(d0) === 8, { timeoutMs: 10000 });
  t.check("vllm:request_success_total counts each choice (8 for two requests of n=4)", counted.ok,
    `${sum(done(counted.m)) - sum(d0)}`);

  // --- a client that leaves aborts every choice.
  const abort0 = metric(await getMetrics(server), "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0;
  {
    const ac = new AbortController();
    const res = await fetch(C, { method: "POST", signal: ac.signal, headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ model: NAME, prompt: "Once upon a time, in a town by the sea,", n: 3, max_tokens: 400, temperature: 0, ignore_eos: true, stream: true }) });
    await readSSE(res, { onEvent: (e, i) => i < 2 });
    ac.abort();
  }
  const freed = await pollMetrics(server, (m) => metric(m, "vllm:num_requests_running", lab) === 0 &&
    (metric(m, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0) - abort0 === 3, { timeoutMs: 20000 });
  t.check("a client that leaves: its 3 choices aborted, nothing left running", freed.ok,
    `running ${metric(freed.m, "vllm:num_requests_running", lab)}, aborted ${(metric(freed.m, "vllm:request_success_total", { ...lab, finished_reason: "abort" }) || 0) - abort0}`);

  // --- bad values: 400 naming the field, and the server serves afterwards.
  const cmpl = (extra) => ({ model: NAME, prompt: "Hello", max_tokens: 2, ...extra });
  const bad = [
    ["n=0", cmpl({ n: 0 }), "n"],
    ["n=129", cmpl({ n: 129 }), "n"],
    ["n=1.5", cmpl({ n: 1.5 }), "n"],
    ['n="2"', cmpl({ n: "2" }), "n"],
    ["n=129 (chat)", { model: NAME, messages: [{ role: "user", content: "hi" }], max_tokens: 2, n: 129 }, "n", "/v1/chat/completions"],
    ["an empty prompt list", cmpl({ prompt: [] }), "prompt"],
    ["a list mixing strings and id arrays", cmpl({ prompt: ["a", [100, 101]] }), "prompt"],
    ["a list mixing id arrays and strings", cmpl({ prompt: [[100, 101], "a"] }), "prompt"],
    ["an empty string in the list", cmpl({ prompt: ["Hello", ""] }), "prompt"],
    ["an empty id array in the list", cmpl({ prompt: [[100], []] }), "prompt"],
    ["a list holding an array of strings", cmpl({ prompt: [["a"]] }), "prompt"],
    ["a prompt of the list over the context", cmpl({ prompt: ["Hello", "apples and pears ".repeat(300)] }), "prompt"],
    ["kv_transfer_params with n=2", cmpl({ n: 2, kv_transfer_params: {} }), "kv_transfer_params"],
  ];
  for (const [what, body, field, route] of bad) {
    const r = await request(route ? `${server.url}${route}` : C, { body, headers: auth });
    t.check(`${what}: 400 naming '${field}'`, r.status === 400 && r.json && r.json.error && r.json.error.param === field,
      `${r.status} ${trunc(r.text)}`);
  }
  const after = await client.completions.create({ ...greedy, n: 2 });
  t.equal("after the bad requests: the server serves", after.choices.map((c) => c.text), [g1.choices[0].text, g1.choices[0].text]);
}, { deadlineMs: 170000 });
