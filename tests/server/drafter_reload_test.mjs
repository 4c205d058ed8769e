// Runtime drafter loading is opt-in and confined, as vLLM gates runtime LoRA loading:
//   - without --enable-drafter-reload, POST /v1/load_drafter answers 404 (the drafter it names is
//     never opened);
//   - the flag needs --allowed-drafter-root, and the root needs the flag: both refused at start;
//   - with both, a drafter under the root (absolute or relative to it) loads; a path outside it,
//     `..` out of it, or a symlink inside it that points outside get 403 with one message that
//     names neither the path nor whether it exists; a missing directory under the root gets 400.
//   node drafter_reload_test.mjs --dspark BIN --model DIR --drafter DIR [--threads N]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { Checker, parseArgs, request, run, specConfig, trunc } from "./lib.mjs";

const opt = parseArgs();
const t = new Checker("drafter_reload_test");
const root = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-drafters-"));
const outside = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-outside-"));
fs.cpSync(opt.drafter, path.join(root, "d1"), { recursive: true });
fs.cpSync(opt.drafter, path.join(outside, "d2"), { recursive: true });  // a valid drafter, outside the root
fs.symlinkSync(path.join(outside, "d2"), path.join(root, "link"));

// Start-up refusals name the missing flag.
for (const [args, flag] of [[["--enable-drafter-reload"], "--allowed-drafter-root"],
                            [["--allowed-drafter-root", root], "--enable-drafter-reload"],
                            [["--enable-drafter-reload", "--allowed-drafter-root", path.join(root, "none")], "--allowed-drafter-root"]]) {
  const r = spawnSync(opt.dspark, ["serve", "--model", opt.model, "--port", "0", "--speculative-config",
    specConfig(opt.drafter), ...args], { encoding: "utf8", timeout: 60000 });
  t.check(`serve ${args.join(" ")}: exits non-zero`, r.status !== 0 && r.status !== null, `status ${r.status}`);
  t.check(`serve ${args.join(" ")}: names ${flag}`, (r.stderr || "").includes(flag), trunc(r.stderr || ""));
}

const load = (server, p) => request(`${server.url}/v1/load_drafter`, { body: { path: p } });

await run(t, async (start) => {
  const off = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter)] });
  const r = await load(off, path.join(root, "d1"));
  t.equal("off: 404", r.status, 404);
  t.check("off: names the flag", r.text.includes("--enable-drafter-reload"), trunc(r.text));

  const on = await start({ dspark: opt.dspark, model: opt.model, threads: opt.threads,
    args: ["--speculative-config", specConfig(opt.drafter), "--enable-drafter-reload", "--allowed-drafter-root", root] });
  const ok = await load(on, path.join(root, "d1"));
  t.equal("under the root: 200", ok.status, 200);
  t.check("under the root: a new version", ok.json && ok.json.drafter_version >= 1, trunc(ok.text));
  const rel = await load(on, "d1");
  t.equal("relative to the root: 200", rel.status, 200);

  const refused = {};
  for (const [name, p] of [["outside, existing", path.join(outside, "d2")],
                           ["outside, missing", path.join(outside, "nothing-here")],
                           ["outside, a system directory", "/etc"],
                           ["dot-dot out of the root", path.join(root, "..", path.basename(outside), "d2")],
                           ["relative dot-dot", "../" + path.basename(outside) + "/d2"],
                           ["a symlink under the root to outside", path.join(root, "link")]]) {
    const x = await load(on, p);
    t.equal(`${name}: 403`, x.status, 403);
    t.check(`${name}: an OpenAI error on 'path'`, x.json && x.json.error && x.json.error.param === "path", trunc(x.text));
    t.check(`${name}: the path is not echoed`, !x.text.includes(p) && !x.text.includes(outside), trunc(x.text));
    refused[name] = x.json && x.json.error && x.json.error.message;
  }
  const messages = new Set(Object.values(refused));
  t.equal("one message for every refusal (existence is not told)", messages.size, 1);

  const missing = await load(on, path.join(root, "missing"));
  t.equal("missing under the root: 400", missing.status, 400);
  const after = await request(`${on.url}/v1/completions`, { body: { model: opt.model, prompt: "Tom has", max_tokens: 4, temperature: 0 } });
  t.equal("still serving", after.status, 200);
});

fs.rmSync(root, { recursive: true, force: true });
fs.rmSync(outside, { recursive: true, force: true });
