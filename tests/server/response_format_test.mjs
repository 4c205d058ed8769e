// Structured output (response_format) through the official `openai` npm client, against
// `dspark serve` with the DSpark drafter and against a server without one, at temperature 0:
// - json_schema on chat: a text that JSON.parse accepts and that matches the schema, equal to the
//   plain server's; streamed equal to non-streamed;
// - json_object on completions: an object, equal to the plain server's;
// - seeded sampling under a schema still parses and repeats;
// - bad response_format values are refused with a 400 naming the field, and the server keeps serving.
//   node response_format_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Checker, authHeaders, parseArgs, request, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("response_format_test");
const KEY = "sk-dspark-response-format";
const NAME = "dspark-demo";
const MAX_TOKENS = 160;

const schema = {
  type: "object",
  properties: { answer: { type: "integer" }, unit: { type: "string" }, sure: { type: "boolean" },
    steps: { type: "array", items: { type: "string" }, maxItems: 2 }, kind: { enum: ["sum", "product"] } },
  required: ["answer"],
};
const matches = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && Number.isInteger(v.answer) &&
  Object.entries(v).every(([k, x]) => (k === "answer") || (k === "unit" && typeof x === "string") ||
    (k === "sure" && typeof x === "boolean") || (k === "kind" && (x === "sum" || x === "product")) ||
    (k === "steps" && Array.isArray(x) && x.length <= 2 && x.every((s) => typeof s === "string")));
const parse = (s) => { try { return JSON.parse(s); } catch { return undefined; } };

await run(t, async (start) => {
  const common = ["--api-key", KEY, "--served-model-name", NAME, "--max-model-len", "512"];
  const spec = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args: ["--speculative-config", specConfig(opt.drafter), ...common] });
  const plain = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args: common });
  const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: KEY, timeout: 60000, maxRetries: 0 });
  const sc = client(spec), pc = client(plain);
  const rf = { type: "json_schema", json_schema: { name: "answer", schema, strict: true } };

  // --- json_schema on chat.
  const prompts = ["What is 7 times 8?", "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?", "List three colours."];
  let parsed = 0;
  for (const p of prompts) {
    const req = { model: NAME, messages: [{ role: "user", content: p }], temperature: 0, max_tokens: MAX_TOKENS, response_format: rf };
    const got = (await sc.chat.completions.create(req)).choices[0];
    const want = (await pc.chat.completions.create(req)).choices[0];
    t.equal(`schema "${p}": DSpark's text equals plain decoding's`, got.message.content, want.message.content);
    if (got.finish_reason === "stop") {
      const v = parse(got.message.content);
      t.check(`schema "${p}": JSON.parse accepts it and it matches the schema`, matches(v), JSON.stringify(got.message.content));
      parsed++;
    }
    let streamed = "";
    for await (const c of await sc.chat.completions.create({ ...req, stream: true })) {
      const ch = c.choices[0];
      if (ch && typeof ch.delta.content === "string") streamed += ch.delta.content;
    }
    t.equal(`schema "${p}": streamed equals non-streamed`, streamed, got.message.content);
  }
  t.check("schema: at least one document finished", parsed > 0);

  // --- json_object on completions.
  const creq = { model: NAME, prompt: "Question: What is 12 plus 30? Answer:", temperature: 0, max_tokens: MAX_TOKENS, response_format: { type: "json_object" } };
  const c1 = (await sc.completions.create(creq)).choices[0];
  t.equal("json_object: DSpark's text equals plain decoding's", c1.text, (await pc.completions.create(creq)).choices[0].text);
  t.check("json_object: starts an object", c1.text.trimStart().startsWith("{"), JSON.stringify(c1.text));
  if (c1.finish_reason === "stop") {
    const v = parse(c1.text);
    t.check("json_object: an object", v !== null && typeof v === "object" && !Array.isArray(v), JSON.stringify(c1.text));
  }
  // { "type": "text" } changes nothing.
  const textReq = { ...creq, response_format: { type: "text" }, max_tokens: 16 };
  t.equal("text: the unconstrained text", (await sc.completions.create(textReq)).choices[0].text,
    (await sc.completions.create({ ...textReq, response_format: undefined })).choices[0].text);

  // --- seeded sampling under the schema.
  const sreq = { model: NAME, messages: [{ role: "user", content: prompts[0] }], temperature: 0.8, seed: 11, max_tokens: MAX_TOKENS, response_format: rf };
  const s1 = (await sc.chat.completions.create(sreq)).choices[0];
  t.equal("sampled: a seed repeats the text", (await sc.chat.completions.create(sreq)).choices[0].message.content, s1.message.content);
  if (s1.finish_reason === "stop") t.check("sampled: matches the schema", matches(parse(s1.message.content)), JSON.stringify(s1.message.content));

  // --- bad values: 400 naming the field.
  const messages = [{ role: "user", content: "hi" }];
  const bad = [
    [{ response_format: "json" }, "response_format"],
    [{ response_format: {} }, "response_format.type"],
    [{ response_format: { type: "xml" } }, "response_format.type"],
    [{ response_format: { type: "json_schema" } }, "response_format.json_schema"],
    [{ response_format: { type: "json_schema", json_schema: { name: "x" } } }, "response_format.json_schema.schema"],
    [{ response_format: { type: "json_schema", json_schema: { schema: { type: "string", pattern: "^a" } } } }, "response_format.json_schema.schema"],
    [{ response_format: { type: "json_schema", json_schema: { schema: { type: "object", required: "a" } } } }, "response_format.json_schema.schema"],
  ];
  for (const [body, param] of bad) {
    const r = await request(spec.url + "/v1/chat/completions", { headers: authHeaders(KEY), body: { model: NAME, max_tokens: 2, messages, ...body } });
    t.check(`${JSON.stringify(body)}: 400 naming ${param}`, r.status === 400 && r.json && r.json.error && r.json.error.param === param,
      `${r.status} ${trunc(r.text, 300)}`);
  }
  const pat = await request(spec.url + "/v1/chat/completions", { headers: authHeaders(KEY),
    body: { model: NAME, max_tokens: 2, messages, response_format: { type: "json_schema", json_schema: { schema: { type: "object", properties: { a: { type: "string", pattern: "x" } } } } } } });
  t.check("an unsupported keyword is named with its path", pat.status === 400 && /properties\/a/.test(pat.text) && /pattern/.test(pat.text), trunc(pat.text, 300));
  t.check("still serving", (await sc.chat.completions.create({ model: NAME, messages, max_tokens: 4, temperature: 0 })).choices.length === 1);
}, { deadlineMs: 170000 });
