// The Anthropic TypeScript SDK against `agentkv serve` (/v1/messages): a streamed tool-use
// conversation as an agent runs it (stream a turn with a tool, get a tool_use block, send the
// tool_result, stream the final answer), plus a plain message, count_tokens and a typed error.
// The model is a random-weight fixture: the call is forced with tool_choice, and what is checked
// is the protocol (event order, ids, parsed input, stop reasons, usage), not the wording.
//
// Environment (set by tests/server/test_node_sdk.py): AGENTKV_URL, AGENTKV_API_KEY, AGENTKV_MODEL.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

const URL_ROOT = process.env.AGENTKV_URL;
const API_KEY = process.env.AGENTKV_API_KEY;
const MODEL = process.env.AGENTKV_MODEL;
assert.ok(URL_ROOT && API_KEY && MODEL, "AGENTKV_* environment not set");

const client = new Anthropic({ baseURL: URL_ROOT, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });

const TOOLS = [
  {
    name: "read_file",
    description: "Read a file of the repository",
    input_schema: { type: "object", properties: { path: { type: "string", maxLength: 16 } }, required: ["path"] },
  },
  {
    name: "list_dir",
    description: "List a directory",
    input_schema: { type: "object", properties: { dir: { enum: [".", "src", "tests"] } }, required: ["dir"] },
  },
];
const SYSTEM = "You are a coding agent. Use the tools to inspect the repository.";

// Collects a stream's events, checks Anthropic's order, returns the final message.
async function streamed(params) {
  const stream = client.messages.stream(params);
  const types = [];
  let text = "";
  stream.on("streamEvent", (ev) => types.push(ev.type));
  stream.on("text", (delta) => { text += delta; });
  const message = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  // Every content block is started, (maybe) filled and stopped before the next starts.
  let open = false;
  for (const t of types.slice(1, -2)) {
    if (t === "content_block_start") { assert.ok(!open, "block started inside a block"); open = true; }
    else if (t === "content_block_delta") assert.ok(open, "delta outside a block");
    else if (t === "content_block_stop") { assert.ok(open, "stop without a block"); open = false; }
    else assert.equal(t, "ping");
  }
  assert.ok(!open);
  assert.equal(types.filter((t) => t === "content_block_start").length, message.content.length);
  return { message, text };
}

test("streamed tool-use conversation", async () => {
  const question = { role: "user", content: "Which files are in src? Look before you answer." };
  const first = await streamed({
    model: MODEL, max_tokens: 300, temperature: 1.0, system: SYSTEM, tools: TOOLS,
    tool_choice: { type: "tool", name: "list_dir", disable_parallel_tool_use: true }, messages: [question],
  });
  const msg = first.message;
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.role, "assistant");
  assert.equal(msg.stop_reason, "tool_use");
  const uses = msg.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1, JSON.stringify(msg.content));
  for (const use of uses) {
    assert.match(use.id, /^toolu_/);
    assert.equal(use.name, "list_dir");
    assert.ok([".", "src", "tests"].includes(use.input.dir), JSON.stringify(use.input));
  }
  assert.ok(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0, JSON.stringify(msg.usage));

  // The tool results go back; the answer is streamed without tools being forced.
  const results = uses.map((use) => ({
    type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "main.cpp util.cpp util.h" }],
  }));
  const conversation = [question, { role: "assistant", content: msg.content }, { role: "user", content: results }];
  const second = await streamed({
    model: MODEL, max_tokens: 16, temperature: 0, system: SYSTEM, tools: TOOLS,
    tool_choice: { type: "none" }, messages: conversation,
  });
  const answer = second.message;
  assert.ok(["end_turn", "max_tokens"].includes(answer.stop_reason), answer.stop_reason);
  assert.deepEqual(answer.content.map((b) => b.type), ["text"]);
  assert.equal(answer.content[0].text, second.text);
  // The first turn's prompt and answer are reused from the cache.
  const firstPrompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens;
  // (its last tokens may be re-cut where the answer joins them)
  assert.ok(answer.usage.cache_read_input_tokens >= firstPrompt - 2, JSON.stringify([msg.usage, answer.usage]));

  // count_tokens renders the conversation's prompt: the first prompt, the call and its result.
  const counted = await client.messages.countTokens({
    model: MODEL, system: SYSTEM, tools: TOOLS, tool_choice: { type: "none" }, messages: conversation,
  });
  assert.ok(counted.input_tokens > firstPrompt + 8, JSON.stringify([counted, msg.usage]));
});

test("plain message and a typed error", async () => {
  const msg = await client.messages.create({
    model: MODEL, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: "Say hello." }],
  });
  assert.equal(msg.type, "message");
  assert.equal(msg.model, MODEL);
  assert.equal(msg.content[0].type, "text");
  assert.ok(msg.usage.output_tokens <= 8);
  await assert.rejects(
    client.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: "robot", content: "x" }] }),
    (err) => err instanceof Anthropic.BadRequestError && err.status === 400 && /role/.test(err.message),
  );
});
