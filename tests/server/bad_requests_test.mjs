// Bad requests against `dspark serve --api-key`: each kind must get its exact 4xx status and an
// OpenAI error object ({"error": {"message", "type", "param", "code"}}, application/json), and
// after EACH the server must still answer a good request. Statuses follow OpenAI and vLLM:
// 400 for malformed or invalid bodies (vLLM turns validation errors into 400, not 422), 401 for a
// missing or wrong key on /v1, 404 for an unknown model or route, 405 for a known route with the
// wrong method, 413 for a body over the server's cap.
//   node bad_requests_test.mjs --dspark BIN --model DIR [--threads N]
import {
  Checker, authHeaders, errorShape, parseArgs, request, run, trunc,
} from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("bad_requests_test");
const KEY = "sk-bad-requests";
const NAME = "dspark-demo";
const CTX = 256;                     // --max-model-len
// Oversized body: over the cap the server is started with.
const BODY_CAP_MIB = 1;  // the server runs with --max-body-mib 1

const auth = authHeaders(KEY);
const C = "/v1/completions", CH = "/v1/chat/completions";
const msgs = [{ role: "user", content: "Say hi." }];
const cmpl = (extra) => ({ model: NAME, prompt: "Hello", max_tokens: 2, ...extra });
const chat = (extra) => ({ model: NAME, messages: msgs, max_tokens: 2, ...extra });
const ids = (n, id = 100) => Array.from({ length: n }, () => id);

// [kind, status, method, path, body, headers]. A body that is a string or a Buffer is sent as is;
// an object is JSON-encoded. Headers default to the key and Content-Type: application/json.
const cases = [
  // --- the body is not a JSON object
  ["malformed JSON", 400, "POST", C, '{"model": "x", "prompt": "hi", '],
  ["malformed JSON (chat)", 400, "POST", CH, '{"messages": [{"role": "user", "content": "hi"}'],
  ["empty body", 400, "POST", C, ""],
  ["trailing garbage after the JSON", 400, "POST", C, JSON.stringify(cmpl()) + " x"],
  ["body is a JSON array", 400, "POST", C, "[1, 2]"],
  ["body is a JSON string", 400, "POST", CH, '"hello"'],
  ["body is JSON null", 400, "POST", C, "null"],
  ["bad UTF-8 bytes in the body", 400, "POST", C,
    Buffer.concat([Buffer.from(`{"model": "${NAME}", "max_tokens": 2, "prompt": "caf`), Buffer.from([0xc3, 0x28, 0xff, 0xfe]), Buffer.from('"}')])],
  ["lone surrogate escape in a string", 400, "POST", C, `{"model": "${NAME}", "max_tokens": 2, "prompt": "a\\ud800b"}`],
  ["deeply nested JSON (100000 levels)", 400, "POST", C, `{"model": "${NAME}", "max_tokens": 2, "prompt": ${"[".repeat(100000)}${"]".repeat(100000)}}`],
  ["unterminated deep nesting", 400, "POST", C, "[".repeat(200000)],
  // --- wrong types
  ["max_tokens is a string", 400, "POST", C, cmpl({ max_tokens: "ten" })],
  ["max_tokens is fractional", 400, "POST", C, cmpl({ max_tokens: 2.5 })],
  ["max_tokens is 1e30", 400, "POST", C, cmpl({ max_tokens: 1e30 })],
  ["max_completion_tokens is a string", 400, "POST", CH, chat({ max_tokens: undefined, max_completion_tokens: "two" })],
  ["temperature is a string", 400, "POST", C, cmpl({ temperature: "hot" })],
  ["top_p is a string", 400, "POST", C, cmpl({ top_p: "high" })],
  ["top_k is fractional", 400, "POST", C, cmpl({ top_k: 2.5 })],
  ["top_k is a string", 400, "POST", CH, chat({ top_k: "five" })],
  ["min_p is a string", 400, "POST", C, cmpl({ min_p: "low" })],
  ["min_p is an array", 400, "POST", CH, chat({ min_p: [0.1] })],
  ["seed is a string", 400, "POST", C, cmpl({ seed: "abc" })],
  ["seed is fractional", 400, "POST", C, cmpl({ seed: 1.5 })],
  ["seed beyond int64", 400, "POST", C, `{"model": "${NAME}", "prompt": "Hello", "max_tokens": 2, "seed": 1180591620717411303424}`],
  ["stop is a number", 400, "POST", C, cmpl({ stop: 42 })],
  ["stop holds numbers", 400, "POST", CH, chat({ stop: [1, 2] })],
  ["stream is a string", 400, "POST", C, cmpl({ stream: "maybe" })],
  ["stream is a number", 400, "POST", CH, chat({ stream: 2 })],
  ["stream_options is a string", 400, "POST", C, cmpl({ stream: true, stream_options: "yes" })],
  ["stream_options.include_usage is a string", 400, "POST", CH, chat({ stream: true, stream_options: { include_usage: "x" } })],
  ["n is a string", 400, "POST", C, cmpl({ n: "one" })],
  // --- hidden-state export and drafter reload on a server without a connector or drafter
  ["kv_transfer_params without a connector", 400, "POST", C, cmpl({ kv_transfer_params: { include_output_tokens: true } })],
  ["kv_transfer_params is a string", 400, "POST", CH, chat({ kv_transfer_params: "yes" })],
  // (runtime drafter loading is off without --enable-drafter-reload: drafter_reload_test.mjs)
  ["load_drafter without a path, reloading off", 404, "POST", "/v1/load_drafter", {}],
  ["load_drafter of a directory, reloading off", 404, "POST", "/v1/load_drafter", { path: "/nonexistent/drafter" }],
  ["load_drafter without the key", 401, "POST", "/v1/load_drafter", { path: "/x" }, { "Content-Type": "application/json" }],
  ["model is a number", 400, "POST", C, cmpl({ model: 5 })],
  ["messages is a string", 400, "POST", CH, chat({ messages: "hello" })],
  ["messages holds a string", 400, "POST", CH, chat({ messages: ["hello"] })],
  ["message content is a number", 400, "POST", CH, chat({ messages: [{ role: "user", content: 5 }] })],
  ["message role is a number", 400, "POST", CH, chat({ messages: [{ role: 1, content: "hi" }] })],
  ["prompt is a number", 400, "POST", C, cmpl({ prompt: 42 })],
  ["prompt is an object", 400, "POST", C, cmpl({ prompt: { text: "hi" } })],
  ["prompt mixes strings and numbers", 400, "POST", C, cmpl({ prompt: ["a", 5] })],
  ["prompt token ids hold a fraction", 400, "POST", C, cmpl({ prompt: [100, 1.5] })],
  // --- fields OpenAI refuses
  ["unknown top-level field", 400, "POST", C, cmpl({ frobnicate: 1 })],
  ["unknown top-level field (chat)", 400, "POST", CH, chat({ temprature: 0.5 })],
  ["prompt sent to chat", 400, "POST", CH, { model: NAME, prompt: "hi", max_tokens: 2 }],
  ["messages sent to completions", 400, "POST", C, { model: NAME, messages: msgs, max_tokens: 2 }],
  // --- values out of range
  ["negative max_tokens", 400, "POST", C, cmpl({ max_tokens: -1 })],
  ["zero max_tokens", 400, "POST", CH, chat({ max_tokens: 0 })],
  ["negative max_completion_tokens", 400, "POST", CH, chat({ max_tokens: undefined, max_completion_tokens: -5 })],
  ["huge max_tokens (over the context)", 400, "POST", C, cmpl({ max_tokens: 1000000 })],
  ["max_tokens past the room left by the prompt", 400, "POST", C, cmpl({ prompt: ids(CTX - 6), max_tokens: 7 })],
  ["n = 129 (OpenAI's most is 128)", 400, "POST", C, cmpl({ n: 129 })],
  ["n = 129 (chat)", 400, "POST", CH, chat({ n: 129 })],
  ["n = 0", 400, "POST", C, cmpl({ n: 0 })],
  ["negative temperature", 400, "POST", C, cmpl({ temperature: -0.5 })],
  ["top_p > 1", 400, "POST", C, cmpl({ top_p: 1.5 })],
  ["top_p = 0", 400, "POST", CH, chat({ top_p: 0 })],
  ["negative top_p", 400, "POST", C, cmpl({ top_p: -0.2 })],
  ["min_p > 1", 400, "POST", C, cmpl({ min_p: 1.5 })],
  ["negative min_p", 400, "POST", CH, chat({ min_p: -0.1 })],
  ["top_k = -5", 400, "POST", C, cmpl({ top_k: -5 })],
  // --- logprobs, echo, prompt_logprobs
  ["logprobs > 20", 400, "POST", C, cmpl({ logprobs: 21 })],
  ["negative logprobs", 400, "POST", C, cmpl({ logprobs: -1 })],
  ["logprobs true on completions (an integer is expected)", 400, "POST", C, cmpl({ logprobs: true })],
  ["logprobs is a string (chat)", 400, "POST", CH, chat({ logprobs: "yes" })],
  ["top_logprobs without logprobs", 400, "POST", CH, chat({ top_logprobs: 2 })],
  ["top_logprobs > 20", 400, "POST", CH, chat({ logprobs: true, top_logprobs: 21 })],
  ["top_logprobs is fractional", 400, "POST", CH, chat({ logprobs: true, top_logprobs: 1.5 })],
  ["max_tokens 0 without echo", 400, "POST", C, cmpl({ max_tokens: 0 })],
  ["echo is a string", 400, "POST", C, cmpl({ echo: "yes" })],
  ["echo on chat", 400, "POST", CH, chat({ echo: true })],
  ["prompt_logprobs > 20", 400, "POST", C, cmpl({ prompt_logprobs: 21 })],
  ["prompt_logprobs with stream", 400, "POST", C, cmpl({ prompt_logprobs: 1, stream: true })],
  // --- messages
  ["empty messages", 400, "POST", CH, chat({ messages: [] })],
  ["bad role", 400, "POST", CH, chat({ messages: [{ role: "wizard", content: "hi" }] })],
  ["message without content", 400, "POST", CH, chat({ messages: [{ role: "user" }] })],
  ["message without role", 400, "POST", CH, chat({ messages: [{ content: "hi" }] })],
  ["message with null content (user)", 400, "POST", CH, chat({ messages: [{ role: "user", content: null }] })],
  ["missing messages", 400, "POST", CH, { model: NAME, max_tokens: 2 }],
  // --- prompts
  ["missing prompt", 400, "POST", C, { model: NAME, max_tokens: 2 }],
  ["empty prompt", 400, "POST", C, cmpl({ prompt: "" })],
  ["empty token-id prompt", 400, "POST", C, cmpl({ prompt: [] })],
  ["prompt over the context length (text)", 400, "POST", C, cmpl({ prompt: "one two three four five six seven eight nine ten ".repeat(100) })],
  ["prompt over the context length (chat)", 400, "POST", CH, chat({ messages: [{ role: "user", content: "apples and pears ".repeat(300) }] })],
  ["prompt over the context length (token ids)", 400, "POST", C, cmpl({ prompt: ids(CTX + 44) })],
  ["prompt that fills the context exactly", 400, "POST", C, cmpl({ prompt: ids(CTX), max_tokens: 1 })],
  ["prompt token id past the vocabulary", 400, "POST", C, cmpl({ prompt: [100, 99999999] })],
  ["negative prompt token id", 400, "POST", C, cmpl({ prompt: [-1, 100] })],
  ["stream_options without stream", 400, "POST", C, cmpl({ stream_options: { include_usage: true } })],
  ["stream_options with stream false", 400, "POST", CH, chat({ stream: false, stream_options: { include_usage: true } })],
  // --- the body size cap
  ["oversized body", 413, "POST", C, Buffer.concat([Buffer.from(`{"model": "${NAME}", "max_tokens": 2, "prompt": "`),
    Buffer.alloc((BODY_CAP_MIB + 1) * 1048576, "a"), Buffer.from('"}')])],
  ["oversized chunked body (no Content-Length)", 413, "POST", CH, () => chunkedBody((BODY_CAP_MIB + 1) * 1048576)],
  // --- the API key
  ["missing API key", 401, "POST", C, cmpl(), { "Content-Type": "application/json" }],
  ["missing API key (chat)", 401, "POST", CH, chat(), { "Content-Type": "application/json" }],
  ["missing API key (models)", 401, "GET", "/v1/models", undefined, {}],
  ["wrong API key", 401, "POST", C, cmpl(), { Authorization: "Bearer sk-wrong", "Content-Type": "application/json" }],
  ["API key with a suffix", 401, "POST", C, cmpl(), { Authorization: `Bearer ${KEY}x`, "Content-Type": "application/json" }],
  ["API key prefix only", 401, "POST", C, cmpl(), { Authorization: `Bearer ${KEY.slice(0, -1)}`, "Content-Type": "application/json" }],
  ["Basic instead of Bearer", 401, "POST", CH, chat(), { Authorization: `Basic ${Buffer.from(`u:${KEY}`).toString("base64")}`, "Content-Type": "application/json" }],
  ["empty Bearer", 401, "GET", "/v1/models", undefined, { Authorization: "Bearer " }],
  ["missing API key on an unknown /v1 route", 401, "GET", "/v1/nothing", undefined, {}],
  // --- unknown model, route, method
  ["unknown model", 404, "POST", C, cmpl({ model: "gpt-4o" })],
  ["unknown model (chat)", 404, "POST", CH, chat({ model: "no-such-model" })],
  ["unknown /v1 route", 404, "POST", "/v1/nothing", cmpl()],
  ["unknown route", 404, "GET", "/nothing/here", undefined],
  ["unknown /v1/models/ID", 404, "GET", "/v1/models/no-such-model", undefined],
  ["GET on /v1/completions", 405, "GET", C, undefined],
  ["DELETE on /v1/chat/completions", 405, "DELETE", CH, undefined],
  ["POST on /v1/models", 405, "POST", "/v1/models", "{}"],
  ["GET on /tokenize", 405, "GET", "/tokenize", undefined],
  ["PUT on /detokenize", 405, "PUT", "/detokenize", '{"tokens": [1]}'],
  // --- /tokenize and /detokenize
  ["/tokenize malformed JSON", 400, "POST", "/tokenize", "{"],
  ["/tokenize prompt is a number", 400, "POST", "/tokenize", { model: NAME, prompt: 5 }],
  ["/tokenize without prompt or messages", 400, "POST", "/tokenize", { model: NAME }],
  ["/tokenize unknown model", 404, "POST", "/tokenize", { model: "nope", prompt: "hi" }],
  ["/detokenize negative token id", 400, "POST", "/detokenize", { model: NAME, tokens: [-1] }],
  ["/detokenize token id past the vocabulary", 400, "POST", "/detokenize", { model: NAME, tokens: [5, 99999999] }],
  ["/detokenize tokens is a string", 400, "POST", "/detokenize", { model: NAME, tokens: "abc" }],
  ["/detokenize token is fractional", 400, "POST", "/detokenize", { model: NAME, tokens: [1.5] }],
  ["/detokenize without tokens", 400, "POST", "/detokenize", { model: NAME }],
];

await run(t, async (start) => {
  const server = await start({
    dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--api-key", KEY, "--served-model-name", NAME, "--max-model-len", String(CTX), "--max-body-mib", String(BODY_CAP_MIB)],
  });
  const kinds = new Set();
  let i = 0;
  for (const [kind, status, method, path, body, headers] of cases) {
    i++;
    kinds.add(kind);
    const h = headers || { ...auth, "Content-Type": "application/json" };
    let r;
    try {
      r = await request(server.url + path, { method, body: body === undefined ? undefined : encode(body), headers: h, timeoutMs: 30000 });
    } catch (e) {
      t.check(`${kind}: a response`, false, `${method} ${path}: ${e.cause ? e.cause.code || e.cause.message : ""} ${e.message}`);
      r = null;
    }
    if (r) {
      const ok = t.check(`${kind}: status ${status}`, r.status === status, `${method} ${path} ${trunc(describe(body), 200)}\n  got ${r.status} ${trunc(r.text, 400)}`);
      const shape = errorShape(r);
      t.check(`${kind}: OpenAI error object`, shape === null, shape);
      const ct = r.headers.get("content-type") || "";
      t.check(`${kind}: JSON content type`, ct.startsWith("application/json"), ct);
      if (ok && r.json && r.json.error && r.json.error.message) {
        if (process.env.VERBOSE) console.log(`  ${status} ${kind}: ${r.json.error.type}: ${r.json.error.message}`);
      }
    }
    t.check(`${kind}: server still running`, server.alive(), `exited: ${JSON.stringify(server.exitInfo())}`);
    if (!server.alive()) break;
    await good(server, `after "${kind}"`);
  }
  t.check("at least 30 kinds of bad request", kinds.size >= 30, String(kinds.size));

  // Boundary requests that must succeed: the prompt plus max_tokens fill the context exactly.
  const edge = await request(server.url + C, { body: cmpl({ prompt: ids(CTX - 6), max_tokens: 6, temperature: 0 }), headers: auth });
  t.check("prompt + max_tokens = max_model_len is accepted", edge.status === 200 && edge.json.usage.prompt_tokens === CTX - 6 && edge.json.usage.completion_tokens <= 6,
    `${edge.status} ${trunc(edge.text)}`);
  const noMax = await request(server.url + C, { body: { model: NAME, prompt: ids(CTX - 3), temperature: 0 }, headers: auth });
  t.check("max_tokens omitted: bounded by the room left", noMax.status === 200 && noMax.json.usage.completion_tokens <= 3,
    `${noMax.status} ${trunc(noMax.text)}`);
  // A key is not needed outside /v1.
  const health = await request(server.url + "/health", { method: "GET" });
  t.check("/health needs no key", health.status === 200, `${health.status} ${trunc(health.text)}`);
  const metricsRes = await request(server.url + "/metrics", { method: "GET" });
  t.check("/metrics needs no key", metricsRes.status === 200, `${metricsRes.status}`);
  console.log(`${cases.length} bad requests (${kinds.size} kinds), a good request after each`);
}, { deadlineMs: 170000 });

function encode(body) {
  if (typeof body === "function") return body();
  return typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body);
}
// A JSON body of about `bytes` bytes sent with Transfer-Encoding: chunked, 64 KiB a chunk.
function chunkedBody(bytes) {
  const head = Buffer.from(`{"model": "${NAME}", "max_tokens": 2, "messages": [{"role": "user", "content": "`);
  const piece = Buffer.alloc(65536, "b");
  let sent = 0;
  return new ReadableStream({
    pull(c) {
      if (sent === 0) c.enqueue(head);
      if (sent < bytes) { c.enqueue(piece); sent += piece.length; return; }
      c.enqueue(Buffer.from('"}]}'));
      c.close();
    },
  });
}
function describe(body) {
  if (body === undefined) return "(no body)";
  if (body instanceof Uint8Array) return `(${body.length} bytes)`;
  if (typeof body === "function") return "(a chunked body)";
  return typeof body === "string" ? body : JSON.stringify(body);
}

// A good completion: 200, text, usage within max_tokens.
async function good(server, when) {
  let r;
  try {
    r = await request(server.url + C, { body: cmpl({ temperature: 0 }), headers: auth, timeoutMs: 30000 });
  } catch (e) {
    t.check(`good request ${when}`, false, `${e.cause ? e.cause.code || e.cause.message : ""} ${e.message}`);
    return;
  }
  t.check(`good request ${when}`,
    r.status === 200 && r.json && r.json.choices && typeof r.json.choices[0].text === "string" &&
    r.json.usage && r.json.usage.completion_tokens >= 1 && r.json.usage.completion_tokens <= 2,
    `${r.status} ${trunc(r.text, 400)}`);
}
