// Penalties and logit_bias through the official `openai` npm client, against `dspark serve` with
// the DSpark drafter and against a server without one:
// - at temperature 0 the penalties change the text, and the speculative server's text equals the
//   plain server's (chat and completions, streamed and not);
// - logit_bias -100 on the first token of the plain answer bans it: it appears in no output;
//   +100 on a token makes the answer that token repeated (frequency_penalty 0);
// - a seed with temperature 0.8 and penalties repeats its text;
// - bad values are refused with a 400 naming the field, and the server keeps serving.
//   node penalties_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Checker, authHeaders, parseArgs, request, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("penalties_test");
const KEY = "sk-dspark-penalties";
const NAME = "dspark-demo";
const MAX_TOKENS = 32;

await run(t, async (start) => {
  const common = ["--api-key", KEY, "--served-model-name", NAME, "--max-model-len", "512"];
  const spec = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args: ["--speculative-config", specConfig(opt.drafter), ...common] });
  const plain = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args: common });
  const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: KEY, timeout: 60000, maxRetries: 0 });
  const sc = client(spec), pc = client(plain);

  const messages = [{ role: "user", content: "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?" }];
  const prompt = "Question: What is 12 plus 30? Answer:";
  const penalties = { frequency_penalty: 0.8, presence_penalty: 0.5, repetition_penalty: 1.3 };

  // --- temperature 0: penalties change the text; speculative equals plain.
  const chat = async (c, extra = {}) => (await c.chat.completions.create({ model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS, ...extra })).choices[0].message.content;
  const comp = async (c, extra = {}) => (await c.completions.create({ model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS, ...extra })).choices[0].text;
  const chatNone = await chat(pc);
  const chatPen = await chat(pc, penalties);
  t.check("chat: the penalties change the greedy text", chatPen !== chatNone, `${JSON.stringify(chatPen)} both ways`);
  t.equal("chat: DSpark's text with penalties equals plain decoding's", await chat(sc, penalties), chatPen);
  const compPen = await comp(pc, penalties);
  t.check("completions: the penalties change the greedy text", compPen !== (await comp(pc)), JSON.stringify(compPen));
  t.equal("completions: DSpark's text with penalties equals plain decoding's", await comp(sc, penalties), compPen);
  for (const [name, p] of [["frequency", { frequency_penalty: 1.5 }], ["presence", { presence_penalty: 1.5 }], ["repetition", { repetition_penalty: 1.8 }]]) {
    t.equal(`chat: ${name} penalty alone, DSpark equals plain`, await chat(sc, p), await chat(pc, p));
  }
  let streamed = "";
  for await (const c of await sc.chat.completions.create({ model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS, stream: true, ...penalties })) {
    const ch = c.choices[0];
    if (ch && typeof ch.delta.content === "string") streamed += ch.delta.content;
  }
  t.equal("chat: streamed with penalties equals non-streamed", streamed, chatPen);

  // --- logit_bias: -100 bans the plain answer's first token; +100 forces a token.
  const ids = async (c, extra) => {
    const r = await request(`${c === sc ? spec.url : plain.url}/v1/completions`, { headers: authHeaders(KEY),
      body: { model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS, return_token_ids: true, ...extra } });
    return r.json && r.json.choices ? r.json.choices[0].token_ids : null;
  };
  const first = (await ids(pc, {}))[0];
  const banned = await ids(sc, { logit_bias: { [String(first)]: -100 } });
  t.check("logit_bias -100: the token is never emitted", Array.isArray(banned) && banned.length > 0 && !banned.includes(first),
    `first ${first}, got ${JSON.stringify(banned)}`);
  t.equal("logit_bias -100: DSpark equals plain", banned, await ids(pc, { logit_bias: { [String(first)]: -100 } }));
  const forced = await ids(sc, { logit_bias: { "100": 100 }, max_tokens: 8 });
  t.equal("logit_bias +100: the token every time", forced, Array(8).fill(100));

  // --- a seed repeats a sampled text with penalties.
  const sampled = async () => (await sc.chat.completions.create({ model: NAME, messages, temperature: 0.8, seed: 7, max_tokens: MAX_TOKENS, ...penalties })).choices[0].message.content;
  const s1 = await sampled();
  t.equal("seeded sampling with penalties repeats", await sampled(), s1);

  // --- bad values: 400 naming the field.
  const bad = [
    [{ presence_penalty: 2.5 }, "presence_penalty"],
    [{ presence_penalty: "1" }, "presence_penalty"],
    [{ frequency_penalty: -3 }, "frequency_penalty"],
    [{ repetition_penalty: 0 }, "repetition_penalty"],
    [{ repetition_penalty: -1 }, "repetition_penalty"],
    [{ logit_bias: [1, 2] }, "logit_bias"],
    [{ logit_bias: { abc: 1 } }, "logit_bias"],
    [{ logit_bias: { "99999999": 1 } }, "logit_bias"],
    [{ logit_bias: { "5": 101 } }, "logit_bias"],
    [{ logit_bias: { "5": "1" } }, 'logit_bias["5"]'],
  ];
  for (const [route, extra] of [["/v1/completions", { prompt }], ["/v1/chat/completions", { messages }]])
    for (const [body, param] of bad) {
      const r = await request(spec.url + route, { headers: authHeaders(KEY), body: { model: NAME, max_tokens: 2, ...extra, ...body } });
      t.check(`${route} ${JSON.stringify(body)}: 400 naming ${param}`, r.status === 400 && r.json && r.json.error && r.json.error.param === param,
        `${r.status} ${trunc(r.text, 300)}`);
    }
  t.equal("still serving after the refusals", await chat(sc, penalties), chatPen);
}, { deadlineMs: 170000 });
