// A real client against `agentkv serve`: the official OpenAI Node SDK for chat completions
// (plain and streamed), text completions and errors, plus llama-server-style /completion calls
// with fetch. Every answer is checked field by field.
//
// Environment (set by tests/server/test_node_sdk.py):
//   AGENTKV_URL        server root, e.g. http://127.0.0.1:8080
//   AGENTKV_API_KEY    the server's --api-key
//   AGENTKV_REFERENCE  fixtures/reference/qwen3-micro.json (llama.cpp's greedy tokens)
//   AGENTKV_MODEL      model name the server reports (file name of the GGUF)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const URL_ROOT = process.env.AGENTKV_URL;
const API_KEY = process.env.AGENTKV_API_KEY;
const MODEL = process.env.AGENTKV_MODEL;
assert.ok(URL_ROOT && API_KEY && MODEL && process.env.AGENTKV_REFERENCE, "AGENTKV_* environment not set");
const REFERENCE = JSON.parse(readFileSync(process.env.AGENTKV_REFERENCE, "utf8")).cases;

const client = new OpenAI({ baseURL: `${URL_ROOT}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });

const TIMINGS_KEYS = ["cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
  "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"];
const MESSAGES = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "What does a KV cache store?" },
];
const N_CHAT = 6;

// Plain JSON POST/GET to the server's native endpoints, with the API key.
async function native(method, path, body) {
  const res = await fetch(`${URL_ROOT}${path}`, {
    method,
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${API_KEY}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

function assertTimings(timings, predictedN) {
  assert.deepEqual(Object.keys(timings), TIMINGS_KEYS);
  for (const k of TIMINGS_KEYS) assert.equal(typeof timings[k], "number", k);
  assert.equal(timings.predicted_n, predictedN);
  assert.ok(timings.prompt_n >= 0 && timings.cache_n >= 0);
}

function assertCreated(created) {
  assert.ok(Number.isInteger(created), "created is an integer");
  assert.ok(Math.abs(created - Date.now() / 1000) < 600, "created is a Unix time in seconds, now");
}

// The chat prompt as the server renders it (template) and its token count.
async function chatPromptTokens(messages) {
  const rendered = await native("POST", "/apply-template", { messages });
  assert.equal(rendered.status, 200);
  const tokens = await native("POST", "/tokenize", { content: rendered.body.prompt });
  return { prompt: rendered.body.prompt, n: tokens.body.tokens.length };
}

test("models.list describes the loaded model", async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  const m = page.data[0];
  assert.equal(m.id, MODEL);
  assert.equal(m.object, "model");
  assert.equal(m.owned_by, "llamacpp");
  assertCreated(m.created);
  assert.ok(m.meta.n_vocab > 0 && m.meta.n_ctx_train > 0 && m.meta.n_embd > 0);
});

test("chat.completions.create (not streamed), greedy", async () => {
  const res = await client.chat.completions.create({
    model: "sdk-model", messages: MESSAGES, max_tokens: N_CHAT, temperature: 0,
  });
  assert.match(res.id, /^chatcmpl-[A-Za-z0-9]{32}$/);
  assert.equal(res.object, "chat.completion");
  assert.equal(res.model, "sdk-model"); // echoed as llama-server does
  assertCreated(res.created);
  assert.equal(typeof res.system_fingerprint, "string");
  assert.equal(res.choices.length, 1);
  const choice = res.choices[0];
  assert.equal(choice.index, 0);
  assert.equal(choice.finish_reason, "length");
  assert.equal(choice.message.role, "assistant");
  assert.equal(typeof choice.message.content, "string");

  const { prompt, n } = await chatPromptTokens(MESSAGES);
  assert.equal(res.usage.prompt_tokens, n);
  assert.equal(res.usage.completion_tokens, N_CHAT);
  assert.equal(res.usage.total_tokens, n + N_CHAT);
  assert.equal(res.usage.prompt_tokens_details.cached_tokens, res.timings.cache_n);
  assertTimings(res.timings, N_CHAT);
  assert.equal(res.timings.cache_n + res.timings.prompt_n, n);

  // The native endpoint on the rendered prompt gives the same greedy text.
  const same = await native("POST", "/completion", { prompt, n_predict: N_CHAT, temperature: 0 });
  assert.equal(same.status, 200);
  assert.equal(same.body.content, choice.message.content);
});

test("chat.completions.create streamed: role delta, content deltas, finish, usage", async () => {
  const whole = await client.chat.completions.create({
    model: "sdk-model", messages: MESSAGES, max_tokens: N_CHAT, temperature: 0,
  });
  const stream = await client.chat.completions.create({
    model: "sdk-model", messages: MESSAGES, max_tokens: N_CHAT, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3, `got ${chunks.length} chunks`);

  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1);
  assert.match([...ids][0], /^chatcmpl-[A-Za-z0-9]{32}$/);
  for (const c of chunks) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.equal(c.model, "sdk-model");
    assertCreated(c.created);
  }
  assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: null });

  const usageChunk = chunks.at(-1);
  const finishChunk = chunks.at(-2);
  const contentChunks = chunks.slice(1, -2);
  let text = "";
  for (const c of contentChunks) {
    assert.equal(c.choices.length, 1);
    assert.equal(c.choices[0].finish_reason, null);
    assert.deepEqual(Object.keys(c.choices[0].delta), ["content"]);
    text += c.choices[0].delta.content;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finishChunk.choices[0].finish_reason, "length");
  assert.deepEqual(finishChunk.choices[0].delta, {});
  assert.deepEqual(usageChunk.choices, []);
  assert.equal(usageChunk.usage.completion_tokens, N_CHAT);
  assert.equal(usageChunk.usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usageChunk.usage.total_tokens, whole.usage.prompt_tokens + N_CHAT);
  assertTimings(usageChunk.timings, N_CHAT);
});

test("chat stream aborted by the client frees the slot", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: "x", messages: MESSAGES, max_tokens: 200, temperature: 0, stream: true },
    { signal: controller.signal },
  );
  // The SDK ends the iteration quietly when its signal aborts; the server notices the closed
  // connection and cancels the task long before its 200 tokens.
  let seen = 0;
  let finished = false;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.choices[0]?.finish_reason) finished = true;
    if (++seen === 2) controller.abort();
  }
  assert.ok(controller.signal.aborted);
  assert.ok(!finished, "the stream ran to its end despite the abort");
  const deadline = Date.now() + 10_000;
  let slots;
  do {
    slots = (await native("GET", "/slots")).body;
    if (!slots.some((s) => s.is_processing)) break;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < deadline);
  assert.ok(!slots.some((s) => s.is_processing), "a slot is still busy after the abort");
});

test("completions.create matches llama.cpp's greedy tokens", async () => {
  const ref = REFERENCE[0];
  const n = 12;
  const res = await client.completions.create({
    model: "sdk-model", prompt: ref.prompt, max_tokens: n, temperature: 0,
  });
  assert.match(res.id, /^cmpl-[A-Za-z0-9]{32}$/);
  assert.equal(res.object, "text_completion");
  assert.equal(res.model, "sdk-model");
  assertCreated(res.created);
  assert.equal(res.choices.length, 1);
  assert.equal(res.choices[0].index, 0);
  assert.equal(res.choices[0].finish_reason, "length");
  assert.equal(res.choices[0].logprobs, null);
  const expected = await native("POST", "/detokenize", { tokens: ref.generated.slice(0, n) });
  assert.equal(res.choices[0].text, expected.body.content);
  assert.equal(res.usage.prompt_tokens, ref.prompt_tokens.length);
  assert.equal(res.usage.completion_tokens, n);
  assert.equal(res.usage.total_tokens, ref.prompt_tokens.length + n);
});

test("llama-server /completion: fields, llama.cpp's greedy tokens, prompt cache", async () => {
  const ref = REFERENCE[1];
  const n = 10;
  const body = { prompt: ref.prompt, n_predict: n, temperature: 0, return_tokens: true, cache_prompt: true };
  const first = await native("POST", "/completion", body);
  assert.equal(first.status, 200);
  assert.ok(first.headers.get("content-type").startsWith("application/json"));
  const r = first.body;
  assert.deepEqual(Object.keys(r), ["index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted",
    "tokens_evaluated", "generation_settings", "prompt", "has_new_line", "truncated", "stop_type",
    "stopping_word", "tokens_cached", "timings"]);
  assert.deepEqual(r.tokens, ref.generated.slice(0, n));
  assert.equal(r.content, (await native("POST", "/detokenize", { tokens: r.tokens })).body.content);
  assert.equal(r.index, 0);
  assert.equal(r.stop, true);
  assert.equal(r.stop_type, "limit");
  assert.equal(r.stopping_word, "");
  assert.equal(r.truncated, false);
  assert.equal(r.model, MODEL);
  assert.equal(r.prompt, ref.prompt);
  assert.equal(r.tokens_predicted, n);
  assert.equal(r.tokens_evaluated, ref.prompt_tokens.length);
  assert.equal(r.tokens_cached, ref.prompt_tokens.length + n - 1); // the last token is never evaluated
  assert.equal(r.generation_settings.n_predict, n);
  assert.equal(typeof r.has_new_line, "boolean");
  assertTimings(r.timings, n);
  assert.equal(r.timings.cache_n + r.timings.prompt_n, ref.prompt_tokens.length);

  // The same request again on the same slot: the prompt comes from the cache, same answer.
  const again = await native("POST", "/completion", { ...body, id_slot: r.id_slot });
  assert.equal(again.status, 200);
  assert.deepEqual(again.body.tokens, r.tokens);
  assert.equal(again.body.timings.cache_n, ref.prompt_tokens.length);
  assert.equal(again.body.timings.prompt_n, 0);
});

test("llama-server /completion streamed: SSE chunks then the final object, no [DONE]", async () => {
  const ref = REFERENCE[2];
  const n = 8;
  const body = { prompt: ref.prompt, n_predict: n, temperature: 0, return_tokens: true };
  const res = await fetch(`${URL_ROOT}/completion`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.ok(res.headers.get("content-type").startsWith("text/event-stream"));
  const events = (await res.text()).split("\n\n").filter((b) => b.trim() !== "").map((b) => {
    assert.ok(b.startsWith("data: "), b);
    return b.slice("data: ".length);
  });
  assert.ok(!events.includes("[DONE]"));
  const parsed = events.map((e) => JSON.parse(e));
  const final = parsed.at(-1);
  const partials = parsed.slice(0, -1);
  assert.ok(partials.length > 0);
  for (const p of partials) {
    assert.deepEqual(Object.keys(p), ["index", "content", "tokens", "stop", "id_slot", "tokens_predicted",
      "tokens_evaluated"]);
    assert.equal(p.stop, false);
    assert.equal(p.tokens_evaluated, ref.prompt_tokens.length);
  }
  assert.deepEqual(partials.flatMap((p) => p.tokens), ref.generated.slice(0, n));
  const whole = await native("POST", "/completion", body);
  assert.equal(partials.map((p) => p.content).join(""), whole.body.content);
  assert.equal(final.stop, true);
  assert.equal(final.content, "");
  assert.deepEqual(final.tokens, []);
  assert.equal(final.tokens_predicted, n);
  assert.equal(final.stop_type, "limit");
  assertTimings(final.timings, n);
});

test("errors reach the SDK as typed exceptions", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "x", messages: [], max_tokens: 2 }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.type, "invalid_request_error");
      return true;
    },
  );
  await assert.rejects(
    client.chat.completions.create({ model: "x", messages: MESSAGES, max_tokens: "two" }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400,
  );
  const wrongKey = new OpenAI({ baseURL: `${URL_ROOT}/v1`, apiKey: "wrong", maxRetries: 0 });
  // The model list is public, as llama-server's; everything else needs the key.
  assert.ok((await wrongKey.models.list()).data.length === 1);
  await assert.rejects(wrongKey.completions.create({ model: "x", prompt: "a", max_tokens: 1 }), (err) => {
    assert.ok(err instanceof OpenAI.AuthenticationError, String(err));
    assert.equal(err.status, 401);
    assert.equal(err.type, "authentication_error");
    return true;
  });
  const health = await native("GET", "/health");
  assert.deepEqual(health.body, { status: "ok" });
});
