// The OpenAI Node SDK's Responses API client against `agentkv serve` (/v1/responses): a streamed
// function-call conversation (stream a turn with a forced call, send the function_call_output,
// stream the answer), checked through the SDK's own stream accumulation. The model is a
// random-weight fixture: what is checked is the protocol, not the wording.
//
// Environment (set by tests/server/test_node_sdk.py): AGENTKV_URL, AGENTKV_API_KEY, AGENTKV_MODEL.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const URL_ROOT = process.env.AGENTKV_URL;
const API_KEY = process.env.AGENTKV_API_KEY;
const MODEL = process.env.AGENTKV_MODEL;
assert.ok(URL_ROOT && API_KEY && MODEL, "AGENTKV_* environment not set");

const client = new OpenAI({ baseURL: `${URL_ROOT}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });
const TOOLS = [{
  type: "function", name: "list_dir", description: "List a directory", strict: false,
  parameters: { type: "object", properties: { dir: { enum: [".", "src", "tests"] } }, required: ["dir"] },
}];

async function streamed(params) {
  const stream = client.responses.stream(params);
  const types = [];
  let text = "";
  let last;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    last = event;
  }
  // An answer cut off by max_output_tokens ends with response.incomplete, as OpenAI's; the SDK
  // (5.x) builds its final response from response.completed only.
  const response = last.type === "response.incomplete" ? last.response : await stream.finalResponse();
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), `response.${response.status}`);
  assert.equal(types.filter((t) => t === "response.output_item.added").length, response.output.length);
  return { response, text };
}

test("streamed function-call conversation", async () => {
  const input = [{ role: "user", content: "Which files are in src? Look before you answer." }];
  const first = await streamed({
    model: MODEL, input, instructions: "You are a coding agent.", tools: TOOLS, temperature: 1.0,
    tool_choice: { type: "function", name: "list_dir" }, parallel_tool_calls: false, max_output_tokens: 300,
  });
  const r1 = first.response;
  assert.match(r1.id, /^resp_/);
  assert.equal(r1.status, "completed");
  const calls = r1.output.filter((i) => i.type === "function_call");
  assert.equal(calls.length, 1, JSON.stringify(r1.output));
  assert.match(calls[0].call_id, /^call_/);
  assert.equal(calls[0].name, "list_dir");
  assert.ok([".", "src", "tests"].includes(JSON.parse(calls[0].arguments).dir), calls[0].arguments);

  const followUp = [...input, ...r1.output, { type: "function_call_output", call_id: calls[0].call_id, output: "main.cpp util.h" }];
  const second = await streamed({
    model: MODEL, input: followUp, instructions: "You are a coding agent.", tools: TOOLS, tool_choice: "none",
    temperature: 0, max_output_tokens: 12,
  });
  const r2 = second.response;
  assert.ok(["completed", "incomplete"].includes(r2.status));
  assert.deepEqual(r2.output.map((i) => i.type), ["message"]);
  assert.equal(r2.output[0].content[0].text, second.text);
  // The first turn is reused from the cache.
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens - 2, JSON.stringify([r1.usage, r2.usage]));
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens);
});
