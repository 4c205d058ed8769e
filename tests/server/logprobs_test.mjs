// Log-probabilities through the official `openai` npm client against `dspark serve` with the
// DSpark drafter, at temperature 0:
// - chat logprobs with top_logprobs 3, non-streamed and streamed: OpenAI's shape, one entry per
//   generated token (per chunk: the chunk's tokens), top_logprobs sorted with the chosen (greedy)
//   token on top, the same values both ways, the entries' bytes spelling the text;
// - completions logprobs 2, both ways: the legacy shape, the chosen token in each top_logprobs;
// - echo with max_tokens 0 and logprobs 1 (lm-evaluation-harness's log-likelihood request): the
//   text is the prompt, the first token's logprob null, nothing generated; echo while generating;
// - vLLM's prompt_logprobs, agreeing with the echoed logprobs;
// - the bad values each refused with a 400 naming the field.
//   node logprobs_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Checker, authHeaders, parseArgs, request, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("logprobs_test");
const KEY = "sk-dspark-logprobs";
const NAME = "dspark-demo";
const MAX_TOKENS = 24;
const TOL = 1e-5;

const sorted = (a) => a.every((x, i) => i === 0 || x <= a[i - 1]);
const close = (a, b) => a.length === b.length && a.every((x, i) => x === b[i] || (x !== null && b[i] !== null && Math.abs(x - b[i]) <= TOL));

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter), "--api-key", KEY, "--served-model-name", NAME, "--max-model-len", "512"],
  });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, timeout: 60000, maxRetries: 0 });

  // --- chat: logprobs true, top_logprobs 3.
  const messages = [{ role: "user", content: "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?" }];
  const chatReq = { model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS, logprobs: true, top_logprobs: 3 };
  const chat = await client.chat.completions.create(chatReq);
  const choice = chat.choices[0];
  const content = choice.logprobs && choice.logprobs.content;
  t.check("chat: logprobs.content is an array", Array.isArray(content), trunc(JSON.stringify(choice)));
  if (!Array.isArray(content)) return;
  t.equal("chat: one entry per generated token", content.length, chat.usage.completion_tokens);
  checkChatEntries("chat", content);
  const spelled = Buffer.from(content.flatMap((e) => e.bytes)).toString("utf8");
  t.check("chat: the entries' bytes spell the text", spelled.startsWith(choice.message.content) && choice.message.content.length > 0,
    `${JSON.stringify(spelled)} vs ${JSON.stringify(choice.message.content)}`);

  const stream = await client.chat.completions.create({ ...chatReq, stream: true, return_token_ids: true });
  const streamed = [];
  let aligned = true, text = "";
  for await (const c of stream) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (typeof ch.delta.content === "string") text += ch.delta.content;
    const lp = ch.logprobs ? ch.logprobs.content : [];
    if (ch.token_ids && lp.length !== ch.token_ids.length) aligned = false;
    streamed.push(...lp);
  }
  t.check("chat stream: each chunk's logprobs are its tokens'", aligned);
  t.equal("chat stream: same text", text, choice.message.content);
  t.equal("chat stream: same tokens", streamed.map((e) => e.token), content.map((e) => e.token));
  t.check("chat stream: same logprobs", close(streamed.map((e) => e.logprob), content.map((e) => e.logprob)),
    `${JSON.stringify(streamed.map((e) => e.logprob))}\n  ${JSON.stringify(content.map((e) => e.logprob))}`);
  t.check("chat stream: same top_logprobs", streamed.length === content.length && streamed.every((e, i) =>
    JSON.stringify(e.top_logprobs.map((x) => x.token)) === JSON.stringify(content[i].top_logprobs.map((x) => x.token)) &&
    close(e.top_logprobs.map((x) => x.logprob), content[i].top_logprobs.map((x) => x.logprob))));

  // Without logprobs: null, as before.
  const plain = await client.chat.completions.create({ model: NAME, messages, temperature: 0, max_tokens: 4 });
  t.check("chat without logprobs: null", plain.choices[0].logprobs === null, JSON.stringify(plain.choices[0]));

  // --- completions: logprobs 2.
  const prompt = "The capital of France is";
  const cmplReq = { model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS, logprobs: 2 };
  const cmpl = await client.completions.create(cmplReq);
  const clp = cmpl.choices[0].logprobs;
  checkLegacy("completion", clp, cmpl.usage.completion_tokens, 0, 2);
  const cstream = await client.completions.create({ ...cmplReq, stream: true });
  const cs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let ctext = "";
  for await (const c of cstream) {
    const ch = c.choices[0];
    if (!ch) continue;
    ctext += ch.text;
    if (ch.logprobs) for (const k of Object.keys(cs)) cs[k].push(...ch.logprobs[k]);
  }
  t.equal("completion stream: same text", ctext, cmpl.choices[0].text);
  t.equal("completion stream: same tokens", cs.tokens, clp.tokens);
  t.check("completion stream: same token_logprobs", close(cs.token_logprobs, clp.token_logprobs));
  t.equal("completion stream: same text_offset", cs.text_offset, clp.text_offset);
  t.equal("completion stream: same top_logprobs keys", cs.top_logprobs.map((d) => Object.keys(d)), clp.top_logprobs.map((d) => Object.keys(d)));

  // --- echo, max_tokens 0, logprobs 1: score the prompt.
  const scoreReq = { model: NAME, prompt, echo: true, logprobs: 1, max_tokens: 0, temperature: 0 };
  const score = await client.completions.create(scoreReq);
  const sc = score.choices[0];
  t.check("echo, max_tokens 0: the text is the prompt", sc.text.startsWith(prompt) && sc.text === prompt, JSON.stringify(sc.text));
  t.equal("echo, max_tokens 0: nothing generated", score.usage.completion_tokens, 0);
  t.equal("echo, max_tokens 0: finish_reason", sc.finish_reason, "length");
  checkLegacy("echo, max_tokens 0", sc.logprobs, score.usage.prompt_tokens, 1, 1);

  // --- vLLM's prompt_logprobs beside echo: the same numbers.
  const both = await request(`${server.url}/v1/completions`, {
    headers: authHeaders(KEY), body: { ...scoreReq, prompt_logprobs: 2, return_token_ids: true },
  });
  const bc = both.json && both.json.choices && both.json.choices[0];
  const plp = bc && bc.prompt_logprobs;
  t.check("prompt_logprobs: a list, one per prompt token, the first null", both.status === 200 && Array.isArray(plp) &&
    plp.length === both.json.usage.prompt_tokens && plp[0] === null, trunc(both.text));
  if (Array.isArray(plp)) {
    const ids = bc.prompt_token_ids;
    const ok = plp.slice(1).every((d, i) => {
      const e = d[String(ids[i + 1])];
      return e && typeof e.logprob === "number" && Number.isInteger(e.rank) && e.rank >= 1 && typeof e.decoded_token === "string" &&
        Object.keys(d).length <= 3 && Math.abs(e.logprob - bc.logprobs.token_logprobs[i + 1]) <= TOL;
    });
    t.check("prompt_logprobs: each prompt token's entry equals the echoed logprob", ok, trunc(JSON.stringify(plp)));
  }
  const chatPlp = await request(`${server.url}/v1/chat/completions`, {
    headers: authHeaders(KEY), body: { model: NAME, messages, max_tokens: 2, temperature: 0, prompt_logprobs: 0 },
  });
  t.check("chat prompt_logprobs: at the top level", chatPlp.status === 200 && Array.isArray(chatPlp.json.prompt_logprobs) &&
    chatPlp.json.prompt_logprobs.length === chatPlp.json.usage.prompt_tokens && chatPlp.json.prompt_logprobs[0] === null,
  trunc(chatPlp.text));

  // --- echo while generating, both ways.
  const echoReq = { model: NAME, prompt, echo: true, logprobs: 1, max_tokens: 6, temperature: 0 };
  const echo = await client.completions.create(echoReq);
  const ec = echo.choices[0];
  t.check("echo: the text starts with the prompt", ec.text.startsWith(prompt) && ec.text.length > prompt.length, JSON.stringify(ec.text));
  checkLegacy("echo", ec.logprobs, echo.usage.prompt_tokens + echo.usage.completion_tokens, 1, 1);
  t.check("echo: the prompt's logprobs are the scored ones", close(ec.logprobs.token_logprobs.slice(0, echo.usage.prompt_tokens), sc.logprobs.token_logprobs));
  const estream = await client.completions.create({ ...echoReq, stream: true });
  let etext = "", etokens = [];
  for await (const c of estream) {
    const ch = c.choices[0];
    if (!ch) continue;
    etext += ch.text;
    if (ch.logprobs) etokens.push(...ch.logprobs.tokens);
  }
  t.equal("echo stream: same text", etext, ec.text);
  t.equal("echo stream: same tokens", etokens, ec.logprobs.tokens);

  // --- bad values: 400 naming the field.
  const bad = [
    ["/v1/completions", { prompt, logprobs: 21 }, "logprobs"],
    ["/v1/completions", { prompt, logprobs: -1 }, "logprobs"],
    ["/v1/completions", { prompt, logprobs: true }, "logprobs"],
    ["/v1/completions", { prompt, max_tokens: 0 }, "max_tokens"],
    ["/v1/completions", { prompt, prompt_logprobs: 21 }, "prompt_logprobs"],
    ["/v1/completions", { prompt, prompt_logprobs: 1, stream: true }, "prompt_logprobs"],
    ["/v1/chat/completions", { messages, top_logprobs: 2 }, "top_logprobs"],
    ["/v1/chat/completions", { messages, logprobs: true, top_logprobs: 21 }, "top_logprobs"],
    ["/v1/chat/completions", { messages, logprobs: "yes" }, "logprobs"],
    ["/v1/chat/completions", { messages, max_tokens: 0, logprobs: true }, "max_tokens"],
    ["/v1/chat/completions", { messages, echo: true }, "echo"],
  ];
  for (const [route, body, param] of bad) {
    const r = await request(server.url + route, { headers: authHeaders(KEY), body: { model: NAME, max_tokens: 2, ...body } });
    t.check(`${route} ${JSON.stringify(body)}: 400 naming ${param}`, r.status === 400 && r.json && r.json.error && r.json.error.param === param,
      `${r.status} ${trunc(r.text, 300)}`);
  }
  t.check("server still running", server.alive());
}, { deadlineMs: 170000 });

// Chat entries: token, logprob <= 0, bytes, top_logprobs sorted with the greedy token on top.
function checkChatEntries(what, content) {
  const shape = content.every((e) => typeof e.token === "string" && typeof e.logprob === "number" && e.logprob <= 0 &&
    Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256) &&
    Array.isArray(e.top_logprobs) && e.top_logprobs.length === 3 &&
    e.top_logprobs.every((x) => typeof x.token === "string" && typeof x.logprob === "number" && Array.isArray(x.bytes)));
  t.check(`${what}: entry shape`, shape, trunc(JSON.stringify(content)));
  t.check(`${what}: top_logprobs sorted`, content.every((e) => sorted(e.top_logprobs.map((x) => x.logprob))));
  t.check(`${what}: the chosen token's logprob <= the top one's`, content.every((e) => e.logprob <= e.top_logprobs[0].logprob + TOL));
  t.check(`${what}: greedy picks the top token`, content.every((e) => e.token === e.top_logprobs[0].token &&
    Math.abs(e.logprob - e.top_logprobs[0].logprob) <= TOL), trunc(JSON.stringify(content.map((e) => [e.token, e.top_logprobs[0]]))));
}

// The legacy shape: `n` entries, the first `nulls` with null logprobs; each top_logprobs a dict of
// at most top + 1 entries that holds the chosen token (whose logprob is at most the dict's best);
// text_offset counting the token strings' characters.
function checkLegacy(what, lp, n, nulls, top) {
  const ok = lp && Array.isArray(lp.tokens) && Array.isArray(lp.token_logprobs) && Array.isArray(lp.top_logprobs) && Array.isArray(lp.text_offset);
  t.check(`${what}: legacy logprobs shape`, ok, trunc(JSON.stringify(lp)));
  if (!ok) return;
  t.check(`${what}: ${n} entries`, [lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset].every((a) => a.length === n),
    `${lp.tokens.length} tokens, want ${n}`);
  t.check(`${what}: the first ${nulls} null`, lp.token_logprobs.slice(0, nulls).every((x) => x === null) &&
    lp.top_logprobs.slice(0, nulls).every((x) => x === null));
  const rest = lp.token_logprobs.slice(nulls);
  t.check(`${what}: logprobs are numbers <= 0`, rest.every((x) => typeof x === "number" && x <= 0), JSON.stringify(rest));
  t.check(`${what}: top_logprobs hold the chosen token, at most ${top + 1} entries, none above the best`,
    lp.top_logprobs.slice(nulls).every((d, i) => {
      const keys = Object.keys(d), j = i + nulls;
      const best = Math.max(...Object.values(d));
      return keys.length >= 1 && keys.length <= top + 1 && Math.abs(d[lp.tokens[j]] - lp.token_logprobs[j]) <= TOL &&
        lp.token_logprobs[j] <= best + TOL;
    }), trunc(JSON.stringify(lp.top_logprobs)));
  let off = 0;
  const offsets = lp.tokens.map((s) => { const o = off; off += [...s].length; return o; });
  t.equal(`${what}: text_offset`, lp.text_offset, offsets);
}
