// check.mjs: drive an OpenAI-compatible server (the llm-ring router, or a
// simulated replica) with the official OpenAI Node.js SDK and print one
// PASS/FAIL line per call. Exit status 1 if any call failed.
//
//   npm ci && node check.mjs http://127.0.0.1:8081/v1 [api-key]
import OpenAI from "openai";

const baseURL = process.argv[2] ?? "http://127.0.0.1:8081/v1";
const client = new OpenAI({ baseURL, apiKey: process.argv[3] ?? "none", maxRetries: 0 });
let failed = 0;

async function check(name, fn) {
  try {
    const detail = await fn();
    console.log(`PASS ${name}${detail ? ": " + detail : ""}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${err?.message ?? err}`);
  }
}

function must(cond, msg) {
  if (!cond) throw new Error(msg);
}

let modelID = "sim";
await check("models.list", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  must(ids.length > 0, "no models");
  modelID = ids[0];
  return ids.join(", ");
});

const messages = [{ role: "user", content: "What is consistent hashing with bounded loads?" }];

await check("chat", async () => {
  const r = await client.chat.completions.create({ model: modelID, messages, max_tokens: 16 });
  must(r.choices[0].message.role === "assistant", "no assistant message");
  must(r.usage?.completion_tokens > 0, "no usage");
  return `${r.usage.prompt_tokens} prompt, ${r.usage.completion_tokens} completion tokens`;
});

await check("chat stream", async () => {
  const s = await client.chat.completions.create({ model: modelID, messages, max_tokens: 16, stream: true });
  let text = "", chunks = 0, finish = null;
  for await (const c of s) {
    chunks++;
    if (c.choices.length) {
      text += c.choices[0].delta?.content ?? "";
      finish = c.choices[0].finish_reason ?? finish;
    }
  }
  must(text.length > 0 && finish, `text ${JSON.stringify(text)}, finish ${finish}`);
  return `${chunks} chunks, finish ${finish}`;
});

await check("chat stream with usage", async () => {
  const s = await client.chat.completions.create({
    model: modelID, messages, max_tokens: 8, stream: true, stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const c of s) if (c.usage) usage = c.usage;
  must(usage?.completion_tokens > 0, "no usage chunk");
  return `${usage.completion_tokens} completion tokens`;
});

await check("completions", async () => {
  const r = await client.completions.create({ model: modelID, prompt: "Once upon a time", max_tokens: 8 });
  must(r.choices[0].text.length > 0, "empty text");
  return JSON.stringify(r.choices[0].text);
});

await check("embeddings", async () => {
  const r = await client.embeddings.create({ model: modelID, input: ["hashing rings", "bread"] });
  must(r.data.length === 2 && r.data[0].embedding.length > 0, "bad vectors");
  return `${r.data.length} vectors of ${r.data[0].embedding.length}`;
});

process.exit(failed ? 1 : 0);
