// An agent loop through the official OpenAI Node SDK (issue #13's acceptance): a system prompt and
// 10 tools with bounded JSON schemas, tool_choice "required", 6 turns on a random-weight model.
// Every reply must be one or more tool calls whose arguments parse and validate; the calls are
// "executed" (fake results) and sent back as tool messages. From turn 2 on, the previous answer
// must not be evaluated again (prompt_n bound below), and each turn's calls must equal those of
// the same request with cache_prompt: false. Streamed and not.
//
// Environment (set by tests/server/test_agent_loop.py): AGENTKV_URL, AGENTKV_KIND (the model's key).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const URL_ROOT = process.env.AGENTKV_URL;
assert.ok(URL_ROOT, "AGENTKV_URL not set");
const client = new OpenAI({ baseURL: `${URL_ROOT}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
const TURNS = 6;
// Mistral's templates take back only ids of 9 alphanumerics, which the server gives (or the model writes).
const CALL_ID = process.env.AGENTKV_KIND === "mistral" ? /^[a-zA-Z0-9]{9}$/ : /^call_/;

const str = (maxLength, extra = {}) => ({ type: "string", maxLength, ...extra });
const fn = (name, description, properties, required) => ({
  type: "function",
  function: { name, description, parameters: { type: "object", properties, required } },
});
const TOOLS = [
  fn("read_file", "Read a file of the repository", { path: str(24) }, ["path"]),
  fn("write_file", "Write a file", { path: str(24), content: str(40) }, ["path", "content"]),
  fn("list_dir", "List a directory", { dir: { enum: [".", "src", "tests", "docs"] }, recursive: { type: "boolean" } }, ["dir"]),
  fn("search", "Search the code", { query: str(20, { minLength: 1 }), max_results: { type: "integer" } }, ["query"]),
  fn("run_command", "Run a shell command", { command: str(30, { minLength: 1 }) }, ["command"]),
  fn("git_status", "Show the working tree status", {}, []),
  fn("git_diff", "Show changes", { path: str(24) }, []),
  fn("edit_file", "Replace text in a file", { path: str(24), old: str(20), new: str(20) }, ["path", "old", "new"]),
  fn("web_fetch", "Fetch a URL", { url: str(40, { minLength: 8 }) }, ["url"]),
  fn("todo_write", "Update the todo list", {
    items: { type: "array", items: str(16), minItems: 1, maxItems: 3 },
  }, ["items"]),
];
const SCHEMAS = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters]));
const SYSTEM = "You are a coding agent working in a git repository. Use the tools to inspect and change " +
  "files, run commands and keep a todo list. Always answer with tool calls.";

// The JSON schema subset above.
function validate(value, schema, path = "$") {
  if (schema.enum) return assert.ok(schema.enum.includes(value), `${path}: ${JSON.stringify(value)} not in enum`);
  switch (schema.type) {
    case "object": {
      assert.ok(value && typeof value === "object" && !Array.isArray(value), `${path}: not an object`);
      for (const k of schema.required ?? []) assert.ok(k in value, `${path}: missing ${k}`);
      for (const [k, v] of Object.entries(value)) {
        assert.ok(schema.properties && k in schema.properties, `${path}: unexpected key ${k}`);
        validate(v, schema.properties[k], `${path}.${k}`);
      }
      return;
    }
    case "array":
      assert.ok(Array.isArray(value), `${path}: not an array`);
      assert.ok(value.length >= (schema.minItems ?? 0) && value.length <= (schema.maxItems ?? Infinity), `${path}: length`);
      value.forEach((v, i) => validate(v, schema.items, `${path}[${i}]`));
      return;
    case "string":
      assert.equal(typeof value, "string", `${path}: not a string`);
      assert.ok([...value].length <= (schema.maxLength ?? Infinity) && [...value].length >= (schema.minLength ?? 0),
        `${path}: length of ${JSON.stringify(value)}`);
      return;
    case "integer": return assert.ok(Number.isInteger(value), `${path}: not an integer`);
    case "boolean": return assert.equal(typeof value, "boolean", `${path}: not a boolean`);
    default: throw new Error(`schema type ${schema.type}`);
  }
}

function checkCalls(calls, where) {
  assert.ok(calls.length >= 1, `${where}: no tool call`);
  for (const c of calls) {
    assert.equal(c.type, "function");
    assert.match(c.id, CALL_ID);
    assert.ok(c.function.name in SCHEMAS, `${where}: unknown tool ${c.function.name}`);
    let args;
    assert.doesNotThrow(() => { args = JSON.parse(c.function.arguments); }, `${where}: arguments are not JSON: ${c.function.arguments}`);
    validate(args, SCHEMAS[c.function.name], `${where} ${c.function.name}`);
  }
}

async function ask(request, stream) {
  if (!stream) {
    const res = await client.chat.completions.create(request);
    const choice = res.choices[0];
    return { finish: choice.finish_reason, content: choice.message.content, calls: choice.message.tool_calls ?? [],
      reasoning: choice.message.reasoning_content ?? null, usage: res.usage, timings: res.timings };
  }
  const chunks = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  const calls = [];
  let finish = null, content = null, reasoning = null, usage = null, timings = null;
  for await (const chunk of chunks) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.timings) timings = chunk.timings;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) finish = choice.finish_reason;
    if (choice.delta.content) content = (content ?? "") + choice.delta.content;
    if (choice.delta.reasoning_content) reasoning = (reasoning ?? "") + choice.delta.reasoning_content;
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: "" } };
      calls[d.index].function.arguments += d.function.arguments ?? "";
    }
  }
  return { finish, content, calls, reasoning, usage, timings };
}

async function agentLoop(stream) {
  const messages = [{ role: "system", content: SYSTEM }, { role: "user", content: "Fix the failing test in tests/." }];
  let previous = null;
  const report = [];
  for (let turn = 1; turn <= TURNS; turn++) {
    // Greedy (the cache_prompt: false comparison needs determinism), parallel calls on odd turns.
    const request = { model: "agentkv", messages, tools: TOOLS, tool_choice: "required", temperature: 0,
      parallel_tool_calls: turn % 2 === 1, max_tokens: 1200,
      // The streamed loop replays the same conversation under a cache_salt of its own, so that it
      // computes its own pages instead of attaching the plain loop's (see the comparison below).
      ...(stream ? { cache_salt: "streamed-loop" } : {}) };
    const r = await ask(request, stream);
    const where = `${stream ? "streamed" : "plain"} turn ${turn}`;
    assert.equal(r.finish, "tool_calls", `${where}: finish_reason ${r.finish}, content ${r.content}`);
    assert.equal(r.content, null, `${where}: content beside the calls`);
    checkCalls(r.calls, where);

    if (turn % 2 === 0) assert.equal(r.calls.length, 1, `${where}: parallel_tool_calls false`);
    const got = r.calls.map((c) => [c.function.name, c.function.arguments]);
    // The same request evaluated from scratch (not streamed) gives the same calls. (Compared with
    // its own fresh run, not with the other loop's: the streamed loop attaches the plain loop's
    // cached pages and generates into other cells, and the attention kernels' sums follow the
    // memory's layout, so a long answer may differ between the two loops.)
    const fresh = await ask({ ...request, cache_prompt: false }, false);
    assert.equal(fresh.timings.cache_n, 0);
    assert.deepEqual(fresh.calls.map((c) => [c.function.name, c.function.arguments]), got,
      `${where}: differs from cache_prompt false`);

    if (previous) {
      // New in this prompt: the end of the previous answer's turn, the tool results and the
      // template around them. The previous prompt and answer are in the cache.
      const fresh_tokens = r.usage.prompt_tokens - previous.usage.prompt_tokens - previous.usage.completion_tokens;
      report.push({ turn, prompt_n: r.timings.prompt_n, cache_n: r.timings.cache_n, new_tokens: fresh_tokens,
        prev_answer: previous.usage.completion_tokens });
      assert.ok(r.timings.prompt_n <= fresh_tokens + 8,
        `${where}: prompt_n ${r.timings.prompt_n} > ${fresh_tokens} new tokens + 8 (previous answer ${previous.usage.completion_tokens} tokens)`);
    }
    previous = r;
    // The reasoning goes back with the calls (gpt-oss's template renders it as the analysis
    // message it was), so the previous answer stays what the cache holds.
    messages.push({ role: "assistant", content: null, ...(r.reasoning ? { reasoning_content: r.reasoning } : {}),
      tool_calls: r.calls.map((c) => ({ id: c.id, type: "function", function: c.function })) });
    for (const c of r.calls)
      messages.push({ role: "tool", tool_call_id: c.id,
        content: JSON.stringify({ ok: true, tool: c.function.name, output: `result of ${c.function.name} at turn ${turn}` }) });
  }
  console.log(`# ${process.env.AGENTKV_KIND} ${stream ? "streamed" : "plain"}: ${JSON.stringify(report)}`);
}

test("agent loop, 10 tools, tool_choice required, 6 turns, not streamed", () => agentLoop(false));
test("agent loop, 10 tools, tool_choice required, 6 turns, streamed", () => agentLoop(true));
