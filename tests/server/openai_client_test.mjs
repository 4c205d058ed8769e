// The official `openai` npm client against `dspark serve` with the DSpark drafter: a chat
// completion and a completion at temperature 0, each non-streamed and streamed (with
// stream_options.include_usage); the streamed text must equal the non-streamed text, usage and
// finish_reason must be present and agree. Also models.list(), the client's error classes for a
// 400 and a 401, x-request-id, /tokenize and /detokenize round trip, and /metrics after the
// requests (vLLM's names, the speculative counters moved).
//   node openai_client_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { pathToFileURL } from "node:url";
import {
  Checker, authHeaders, getMetrics, metric, metricSum, parseArgs, request, run, specConfig, trunc,
} from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("openai_client_test");
const KEY = "sk-dspark-test";
const NAME = "dspark-demo";
const MAX_TOKENS = 24;

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter), "--api-key", KEY, "--served-model-name", NAME,
      "--max-model-len", "512"],
  });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, timeout: 60000, maxRetries: 0 });

  // --- models.list()
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  t.equal("models.list() ids", models.map((m) => m.id), [NAME]);
  t.check("models.list() entries are model objects", models.every((m) => m.object === "model" && typeof m.created === "number" && typeof m.owned_by === "string"),
    JSON.stringify(models));
  t.check("models.list() max_model_len (vLLM)", models[0] && models[0].max_model_len === 512, JSON.stringify(models[0]));

  // --- chat completion, non-streamed then streamed.
  const messages = [{ role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "Tom has 15 apples and gives 6 to Ana. How many apples does Tom have left?" }];
  const chat = await client.chat.completions.create({ model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS });
  const chatText = chat.choices[0] && chat.choices[0].message && chat.choices[0].message.content;
  t.check("chat: object", chat.object === "chat.completion", JSON.stringify(chat));
  t.check("chat: model", chat.model === NAME, chat.model);
  t.check("chat: one choice", chat.choices.length === 1 && chat.choices[0].index === 0, JSON.stringify(chat.choices));
  t.check("chat: assistant role", chat.choices[0].message.role === "assistant", JSON.stringify(chat.choices[0].message));
  t.check("chat: non-empty content", typeof chatText === "string" && chatText.length > 0, JSON.stringify(chat));
  checkFinish("chat", chat.choices[0].finish_reason, chat.usage);

  const chatStream = await client.chat.completions.create({
    model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true },
  });
  const cs = await collect(chatStream, "chat");
  t.check("chat stream: chunk objects", cs.chunks.every((c) => c.object === "chat.completion.chunk"), trunc(JSON.stringify(cs.chunks)));
  t.check("chat stream: one id for all chunks", new Set(cs.chunks.map((c) => c.id)).size === 1, trunc(JSON.stringify(cs.chunks.map((c) => c.id))));
  t.check("chat stream: first delta has role assistant", cs.roles[0] === "assistant", JSON.stringify(cs.roles));
  t.equal("chat stream: text equals the non-streamed text", cs.text, chatText);
  t.equal("chat stream: finish_reason equals the non-streamed one", cs.finish, chat.choices[0].finish_reason);
  t.equal("chat stream: usage equals the non-streamed usage", cs.usage, pickUsage(chat.usage));
  t.check("chat stream: usage chunk is last with empty choices", cs.usageLast, trunc(JSON.stringify(cs.chunks.slice(-2))));
  t.check("chat stream: no usage before the last chunk", cs.usageEarly === 0, `${cs.usageEarly} earlier chunks carry usage`);

  // Without include_usage no chunk carries usage (OpenAI and vLLM).
  const plainStream = await client.chat.completions.create({ model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS, stream: true });
  const ps = await collect(plainStream, "chat (no include_usage)");
  t.check("chat stream without include_usage: no usage", ps.usage === null, JSON.stringify(ps.usage));
  t.equal("chat stream without include_usage: same text", ps.text, chatText);

  // --- completion, non-streamed then streamed.
  const prompt = "The capital of France is";
  const cmpl = await client.completions.create({ model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS });
  const cmplText = cmpl.choices[0] && cmpl.choices[0].text;
  t.check("completion: object", cmpl.object === "text_completion", JSON.stringify(cmpl));
  t.check("completion: non-empty text", typeof cmplText === "string" && cmplText.length > 0, JSON.stringify(cmpl));
  checkFinish("completion", cmpl.choices[0].finish_reason, cmpl.usage);
  const cmplStream = await client.completions.create({
    model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true },
  });
  const cps = await collect(cmplStream, "completion");
  t.check("completion stream: chunk objects", cps.chunks.every((c) => c.object === "text_completion"), trunc(JSON.stringify(cps.chunks)));
  t.equal("completion stream: text equals the non-streamed text", cps.text, cmplText);
  t.equal("completion stream: finish_reason equals the non-streamed one", cps.finish, cmpl.choices[0].finish_reason);
  t.equal("completion stream: usage equals the non-streamed usage", cps.usage, pickUsage(cmpl.usage));
  t.check("completion stream: usage chunk is last with empty choices", cps.usageLast, trunc(JSON.stringify(cps.chunks.slice(-2))));

  // A fixed seed at temperature > 0 gives the same text twice; max_completion_tokens is honoured.
  const sampled = [];
  for (let i = 0; i < 2; i++) {
    const r = await client.chat.completions.create({ model: NAME, messages, temperature: 0.9, top_p: 0.95, seed: 1234, max_completion_tokens: 12 });
    sampled.push(r);
  }
  t.equal("seeded sampling is reproducible", sampled[1].choices[0].message.content, sampled[0].choices[0].message.content);
  t.check("max_completion_tokens bounds the output", sampled[0].usage.completion_tokens <= 12 && sampled[0].usage.completion_tokens > 0,
    JSON.stringify(sampled[0].usage));

  // stop: the output ends before the stop string and finish_reason is "stop". Use a stop string
  // the greedy output is known to contain (a piece of the completion above, past its start).
  const words = cmplText.trim().split(/\s+/);
  if (words.length >= 3) {
    const stopWord = words[Math.floor(words.length / 2)];
    const cut = cmplText.indexOf(stopWord);
    const r = await client.completions.create({ model: NAME, prompt, temperature: 0, max_tokens: MAX_TOKENS, stop: [stopWord] });
    t.equal(`stop ${JSON.stringify(stopWord)}: text is cut before it`, r.choices[0].text, cmplText.slice(0, cut));
    t.equal(`stop ${JSON.stringify(stopWord)}: finish_reason`, r.choices[0].finish_reason, "stop");
  } else {
    t.check("completion long enough to test stop", false, JSON.stringify(cmplText));
  }

  // --- errors through the client's classes.
  try {
    await client.chat.completions.create({ model: NAME, messages, max_tokens: -3 });
    t.check("client: max_tokens -3 raises BadRequestError", false, "no error");
  } catch (e) {
    t.check("client: max_tokens -3 raises BadRequestError", e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.message === "string",
      `${e && e.constructor && e.constructor.name} ${e && e.status} ${e && e.message}`);
  }
  try {
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong-key", maxRetries: 0 });
    await bad.models.list();
    t.check("client: wrong key raises AuthenticationError", false, "no error");
  } catch (e) {
    t.check("client: wrong key raises AuthenticationError", e instanceof OpenAI.AuthenticationError && e.status === 401,
      `${e && e.constructor && e.constructor.name} ${e && e.status} ${e && e.message}`);
  }
  try {
    await client.completions.create({ model: "no-such-model", prompt, max_tokens: 4 });
    t.check("client: unknown model raises NotFoundError", false, "no error");
  } catch (e) {
    t.check("client: unknown model raises NotFoundError", e instanceof OpenAI.NotFoundError && e.status === 404,
      `${e && e.constructor && e.constructor.name} ${e && e.status} ${e && e.message}`);
  }

  // --- x-request-id: echoed in the response header, or used in the id as vLLM does.
  const { data: rid, response: ridRes } = await client.completions
    .create({ model: NAME, prompt, temperature: 0, max_tokens: 4 }, { headers: { "x-request-id": "test-rid-42" } })
    .withResponse();
  t.check("x-request-id echoed in the response header or used in the id",
    ridRes.headers.get("x-request-id") === "test-rid-42" || (typeof rid.id === "string" && rid.id.includes("test-rid-42")),
    `header ${ridRes.headers.get("x-request-id")}, id ${rid.id}`);

  // --- /tokenize and /detokenize (vLLM shapes) round trip, outside /v1 (still with the key).
  const tk = await request(`${server.url}/tokenize`, { body: { model: NAME, prompt }, headers: authHeaders(KEY) });
  t.check("/tokenize 200 with tokens, count, max_model_len",
    tk.status === 200 && Array.isArray(tk.json.tokens) && tk.json.tokens.length > 0 && tk.json.count === tk.json.tokens.length && tk.json.max_model_len === 512,
    `${tk.status} ${trunc(tk.text)}`);
  if (tk.status === 200) {
    t.equal("/tokenize count equals usage.prompt_tokens of the completion", tk.json.count, cmpl.usage.prompt_tokens);
    const dt = await request(`${server.url}/detokenize`, { body: { model: NAME, tokens: tk.json.tokens }, headers: authHeaders(KEY) });
    t.check("/detokenize 200", dt.status === 200, `${dt.status} ${trunc(dt.text)}`);
    t.equal("/detokenize(/tokenize(prompt)) is the prompt", dt.json && dt.json.prompt, prompt);
  }
  const tkChat = await request(`${server.url}/tokenize`, { body: { model: NAME, messages }, headers: authHeaders(KEY) });
  t.check("/tokenize with messages (chat template)", tkChat.status === 200 && tkChat.json.count === chat.usage.prompt_tokens,
    `${tkChat.status} ${trunc(tkChat.text)}; chat prompt_tokens ${chat.usage.prompt_tokens}`);

  // --- the small GET endpoints.
  for (const p of ["/health", "/ping"]) {
    const r = await request(`${server.url}${p}`, { method: "GET" });
    t.check(`GET ${p} without a key is 200`, r.status === 200, `${r.status} ${trunc(r.text)}`);
  }
  const v = await request(`${server.url}/version`, { method: "GET" });
  t.check("GET /version is {version: string}", v.status === 200 && v.json && typeof v.json.version === "string" && v.json.version.length > 0,
    `${v.status} ${trunc(v.text)}`);

  // --- /metrics after the requests above: format, names, labels, and values that moved.
  const m = await getMetrics(server);
  t.check("/metrics parses as Prometheus text", m.errors.length === 0, m.errors.slice(0, 10).join("\n"));
  const lab = { model_name: NAME };
  // As prometheus_client writes the Prometheus text format: a counter's TYPE line names the
  // sample (with _total), a histogram's names the family.
  const want = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens_total": "counter", "vllm:generation_tokens_total": "counter", "vllm:num_preemptions_total": "counter",
    "vllm:request_success_total": "counter",
    "vllm:spec_decode_num_drafts_total": "counter", "vllm:spec_decode_num_draft_tokens_total": "counter",
    "vllm:spec_decode_num_accepted_tokens_total": "counter", "vllm:spec_decode_num_accepted_tokens_per_pos_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
  };
  for (const [fam, type] of Object.entries(want)) {
    t.check(`/metrics: # TYPE ${fam} ${type}`, m.types[fam] === type, `TYPE is ${m.types[fam]}`);
  }
  t.check("/metrics: every vllm: sample has model_name", m.samples.filter((s) => s.name.startsWith("vllm:")).every((s) => s.labels.model_name === NAME),
    m.samples.filter((s) => s.name.startsWith("vllm:") && s.labels.model_name !== NAME).slice(0, 5).map((s) => `${s.name} ${JSON.stringify(s.labels)}`).join("\n"));
  t.equal("/metrics: nothing running", metric(m, "vllm:num_requests_running", lab), 0);
  t.equal("/metrics: nothing waiting", metric(m, "vllm:num_requests_waiting", lab), 0);
  const kv = metric(m, "vllm:kv_cache_usage_perc", lab);
  t.check("/metrics: kv_cache_usage_perc idle is in [0, 1) (a fraction)", kv >= 0 && kv < 1, String(kv));
  const drafts = metric(m, "vllm:spec_decode_num_drafts_total", lab);
  const draftTokens = metric(m, "vllm:spec_decode_num_draft_tokens_total", lab);
  const accepted = metric(m, "vllm:spec_decode_num_accepted_tokens_total", lab);
  t.check("/metrics: spec_decode drafts > 0 after speculative requests", drafts > 0, String(drafts));
  t.check("/metrics: draft tokens <= 8 per draft", draftTokens > 0 && draftTokens <= 8 * drafts, `${draftTokens} tokens, ${drafts} drafts`);
  t.check("/metrics: accepted <= drafted", accepted >= 0 && accepted <= draftTokens, `${accepted} accepted, ${draftTokens} drafted`);
  const perPos = m.samples.filter((s) => s.name === "vllm:spec_decode_num_accepted_tokens_per_pos_total");
  const positions = perPos.map((s) => s.labels.position).sort((a, b) => a - b);
  t.equal("/metrics: accepted per position 0..7", positions, ["0", "1", "2", "3", "4", "5", "6", "7"]);
  t.equal("/metrics: accepted per position sums to accepted", perPos.reduce((a, s) => a + s.value, 0), accepted);
  const perPosVals = [...perPos].sort((a, b) => a.labels.position - b.labels.position).map((s) => s.value);
  t.check("/metrics: acceptances do not grow with the position", perPosVals.every((v, i) => i === 0 || v <= perPosVals[i - 1]), JSON.stringify(perPosVals));
  const nReq = metricSum(m, "vllm:request_success_total", lab);
  const ttftCount = metric(m, "vllm:time_to_first_token_seconds_count", lab);
  const e2eCount = metric(m, "vllm:e2e_request_latency_seconds_count", lab);
  // 9 generations succeeded above: chat x3, completion x2, seeded x2, stop, x-request-id.
  t.equal("/metrics: request_success counts the 9 finished requests", nReq, 9);
  t.equal("/metrics: one TTFT observation per successful request", ttftCount, nReq);
  t.equal("/metrics: one e2e observation per successful request", e2eCount, nReq);
  const inf = metric(m, "vllm:time_to_first_token_seconds_bucket", { ...lab, le: "+Inf" });
  t.equal("/metrics: TTFT +Inf bucket equals its count", inf, ttftCount);
  const buckets = m.samples.filter((s) => s.name === "vllm:time_to_first_token_seconds_bucket").map((s) => s.value);
  t.check("/metrics: TTFT buckets are cumulative", buckets.length > 2 && buckets.every((v, i) => i === 0 || v >= buckets[i - 1]), JSON.stringify(buckets));
  const gen = metric(m, "vllm:generation_tokens_total", lab);
  t.check("/metrics: generation_tokens >= the completions above", gen >= chat.usage.completion_tokens * 3 + cmpl.usage.completion_tokens * 2, String(gen));
}, { deadlineMs: 150000 });

// ---------------------------------------------------------------------------------------------
function pickUsage(u) {
  return u ? { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens } : u;
}

function checkFinish(what, reason, usage) {
  t.check(`${what}: finish_reason stop or length`, reason === "stop" || reason === "length", String(reason));
  t.check(`${what}: usage present and consistent`,
    usage && usage.prompt_tokens > 0 && usage.completion_tokens > 0 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens,
    JSON.stringify(usage));
  if (usage) {
    t.check(`${what}: completion_tokens <= max_tokens`, usage.completion_tokens <= MAX_TOKENS, JSON.stringify(usage));
    if (reason === "length") t.equal(`${what}: length means max_tokens tokens`, usage.completion_tokens, MAX_TOKENS);
  }
}

async function collect(stream, what) {
  const out = { chunks: [], text: "", finish: null, usage: null, roles: [], usageLast: false, usageEarly: 0 };
  let finishes = 0;
  for await (const c of stream) {
    out.chunks.push(c);
    for (const ch of c.choices || []) {
      if (ch.delta) {
        if (typeof ch.delta.content === "string") out.text += ch.delta.content;
        if (ch.delta.role) out.roles.push(ch.delta.role);
      } else if (typeof ch.text === "string") {
        out.text += ch.text;
      }
      if (ch.finish_reason) { out.finish = ch.finish_reason; finishes++; }
    }
    if (c.usage) out.usage = pickUsage(c.usage);
  }
  const last = out.chunks[out.chunks.length - 1];
  out.usageLast = !!(last && last.usage && Array.isArray(last.choices) && last.choices.length === 0);
  out.usageEarly = out.chunks.slice(0, -1).filter((c) => c.usage).length;
  t.equal(`${what} stream: exactly one finish_reason`, finishes, 1);
  t.check(`${what} stream: several chunks`, out.chunks.length >= 3, `${out.chunks.length} chunks`);
  return out;
}
