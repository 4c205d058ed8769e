// Automatic prefix caching over HTTP, with the official `openai` client and the DSpark drafter:
//   - a second question about one document, a chat's next turn and a repeated prompt report the
//     cached part of their prompt in usage.prompt_tokens_details.cached_tokens (whole KV blocks,
//     never the last prompt token), streamed (include_usage) or not; a new prompt reports 0;
//   - their texts equal those of a server started with --no-enable-prefix-caching, which reports
//     0 cached tokens and leaves vLLM's prefix-cache counters at 0;
//   - vllm:prefix_cache_queries_total and _hits_total grow by the prompt tokens and the cached
//     tokens the responses report;
//   - --enable-prefix-caching with --no-enable-prefix-caching is refused at start, naming both.
//   node prefix_cache_test.mjs --dspark BIN --model DIR --drafter DIR --npm-dir DIR [--threads N]
import path from "node:path";
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import { Checker, getMetrics, metric, parseArgs, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
if (!opt.npm_dir) throw new Error("--npm-dir is required");
const { default: OpenAI } = await import(pathToFileURL(path.join(opt.npm_dir, "node_modules", "openai", "index.mjs")).href);

const t = new Checker("prefix_cache_test");
const NAME = "dspark-demo";
const BLOCK = 16;  // KV block (kKvBlock)

{
  const r = spawnSync(opt.dspark, ["serve", "--model", opt.model, "--port", "0", "--enable-prefix-caching",
    "--no-enable-prefix-caching"], { encoding: "utf8", timeout: 60000 });
  t.check("contradicting flags: exit non-zero", r.status !== 0 && r.status !== null, `status ${r.status}`);
  t.check("contradicting flags: both named", (r.stderr || "").includes("--enable-prefix-caching") &&
    (r.stderr || "").includes("--no-enable-prefix-caching"), trunc(r.stderr || ""));
}

let doc = "";
for (let i = 0; i < 10; i++) doc += `Line ${i}: the store sells ${3 + i} apples for ${2 * i + 1} dollars. `;
const turn1 = [{ role: "user", content: "What is 7 times 8?" }];

// The requests, in order; each returns { text, usage }.
async function session(client) {
  const out = [];
  const cmpl = async (prompt, stream = false) => {
    if (!stream) {
      const r = await client.completions.create({ model: NAME, prompt, temperature: 0, max_tokens: 16 });
      return { text: r.choices[0].text, usage: r.usage };
    }
    const s = await client.completions.create({ model: NAME, prompt, temperature: 0, max_tokens: 16, stream: true,
      stream_options: { include_usage: true } });
    let text = "", usage = null;
    for await (const c of s) {
      if (c.choices && c.choices[0]) text += c.choices[0].text || "";
      if (c.usage) usage = c.usage;
    }
    return { text, usage };
  };
  out.push(await cmpl(doc + "How many apples are on line 3?"));
  out.push(await cmpl(doc + "What do the apples on line 7 cost?"));
  out.push(await cmpl(doc + "How many apples are on line 3?", true));
  const c1 = await client.chat.completions.create({ model: NAME, messages: turn1, temperature: 0, max_tokens: 16 });
  out.push({ text: c1.choices[0].message.content, usage: c1.usage });
  const c2 = await client.chat.completions.create({ model: NAME, temperature: 0, max_tokens: 16,
    messages: [...turn1, { role: "assistant", content: c1.choices[0].message.content }, { role: "user", content: "And 7 times 9?" }] });
  out.push({ text: c2.choices[0].message.content, usage: c2.usage });
  return out;
}
const cached = (u) => (u && u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : undefined);
const lab = { model_name: NAME };

await run(t, async (start) => {
  const args = ["--speculative-config", specConfig(opt.drafter), "--served-model-name", NAME, "--max-model-len", "512"];
  const on = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads, args });
  const off = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: [...args, "--no-enable-prefix-caching"] });
  const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", timeout: 60000, maxRetries: 0 });

  const got = await session(client(on));
  const ref = await session(client(off));
  const names = ["document, question 1", "document, question 2", "question 1 again, streamed", "chat turn 1", "chat turn 2"];
  for (let i = 0; i < names.length; i++) {
    t.equal(`${names[i]}: text equals the uncached server's`, got[i].text, ref[i].text);
    t.equal(`${names[i]}: uncached server reports 0 cached tokens`, cached(ref[i].usage), 0);
    const c = cached(got[i].usage), n = got[i].usage.prompt_tokens;
    t.check(`${names[i]}: cached_tokens is whole blocks below the prompt's last token`,
      Number.isInteger(c) && c % BLOCK === 0 && c <= n - 1, JSON.stringify(got[i].usage));
  }
  console.log("cached of prompt tokens: " + names.map((n, i) => `${n} ${cached(got[i].usage)}/${got[i].usage.prompt_tokens}`).join(", "));
  t.equal("a new prompt: 0 cached tokens", cached(got[0].usage), 0);
  const docBlocks = Math.floor(got[0].usage.prompt_tokens / BLOCK) - 2;
  t.check(`the second question: the document's blocks are cached (>= ${docBlocks * BLOCK})`,
    cached(got[1].usage) >= docBlocks * BLOCK, JSON.stringify(got[1].usage));
  t.equal("the repeat: every whole block below its last token is cached",
    cached(got[2].usage), Math.floor((got[2].usage.prompt_tokens - 1) / BLOCK) * BLOCK);
  t.check("the chat's next turn: the first turn's whole blocks are cached",
    cached(got[4].usage) >= Math.floor(got[3].usage.prompt_tokens / BLOCK) * BLOCK - BLOCK && cached(got[4].usage) > 0,
    JSON.stringify([got[3].usage, got[4].usage]));

  const m = await getMetrics(on), mo = await getMetrics(off);
  t.equal("vllm:prefix_cache_queries_total: the prompt tokens", metric(m, "vllm:prefix_cache_queries_total", lab),
    got.reduce((a, x) => a + x.usage.prompt_tokens, 0));
  t.equal("vllm:prefix_cache_hits_total: the cached tokens reported", metric(m, "vllm:prefix_cache_hits_total", lab),
    got.reduce((a, x) => a + cached(x.usage), 0));
  t.equal("off: vllm:prefix_cache_queries_total 0", metric(mo, "vllm:prefix_cache_queries_total", lab), 0);
  t.equal("off: vllm:prefix_cache_hits_total 0", metric(mo, "vllm:prefix_cache_hits_total", lab), 0);
});
