// The web UI (GET /) in headless Chromium, driven by playwright-core (Debian's /usr/bin/chromium;
// nothing is downloaded): the page loads without a key, takes the API key, sends a chat message,
// shows the answer as it streams, and after a second turn the memory view shows that turn's
// cache_n — the tokens of turn 1 the server kept — equal to what the server reported.
//
// Environment (set by tests/server/test_node_sdk.py): AGENTKV_URL, AGENTKV_API_KEY, and
// AGENTKV_SCREENSHOT (where the page's picture after turn 2 goes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const URL_ROOT = process.env.AGENTKV_URL;
const API_KEY = process.env.AGENTKV_API_KEY;
const SCREENSHOT = process.env.AGENTKV_SCREENSHOT;
assert.ok(URL_ROOT && API_KEY && SCREENSHOT, "AGENTKV_* environment not set");

// The flags this machine's closed network needs (Chromium's background connections are refused).
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                       "--disable-background-networking", "--disable-component-update", "--disable-sync"];

test("chat in the web UI, streamed, with the memory view", async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 760 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    const response = await page.goto(URL_ROOT + "/");
    assert.equal(response.status(), 200);
    assert.match(response.headers()["content-security-policy"], /default-src 'none'/);
    assert.equal(await page.title(), "agentkv");
    // Without the key the page says what it needs (its one refused /props is the only error).
    await page.waitForFunction(() => document.querySelector('[data-testid="model"]').textContent.includes("API key"));
    assert.ok(errors.length <= 1 && errors.every((e) => e.includes("401")), JSON.stringify(errors));
    errors.length = 0;

    await page.fill("#api-key", API_KEY);
    await page.dispatchEvent("#api-key", "change");
    await page.waitForFunction(() => document.querySelector('[data-testid="model"]').textContent.includes("n_ctx"));
    await page.fill("#max-tokens", "40");
    await page.dispatchEvent("#max-tokens", "change");
    await page.fill("#temperature", "0");
    await page.dispatchEvent("#temperature", "change");

    // Every state the answer passes through while it streams: each streamed chunk renders a fresh
    // content span, so the spans the mutation records added hold the states in order, even when a
    // fast server's whole stream arrives in one read and the observer runs once after all of them
    // (reading the page's last span then saw only the final text: a flaky count).
    await page.evaluate(() => {
      window.seen = [];
      new MutationObserver((records) => {
        for (const r of records)
          for (const node of r.addedNodes) {
            if (!(node instanceof Element)) continue;
            const spans = node.matches('[data-testid="content"]') ? [node] : [...node.querySelectorAll('[data-testid="content"]')];
            for (const c of spans) {
              if (!c.closest('[data-testid="assistant"]') && !r.target.closest?.('[data-testid="assistant"]')) continue;
              if (window.seen.at(-1) !== c.textContent) window.seen.push(c.textContent);
            }
          }
      }).observe(document.getElementById("messages"), { childList: true, subtree: true });
    });

    const turns = page.locator('[data-testid="turn"]');
    async function turn(text, n) {
      await page.fill("#input", text);
      await page.press("#input", "Enter");
      await page.waitForFunction((k) => document.querySelectorAll('[data-testid="turn"]').length === k, n,
                                 { timeout: 60_000 });
    }

    await turn("Tell me about the history of the city.", 1);
    const answer1 = await page.locator('[data-testid="assistant"] [data-testid="content"]').first().textContent();
    assert.ok(answer1.length > 0, "an answer");
    const states = await page.evaluate(() => window.seen);
    assert.ok(states.length >= 3, "the answer arrived in pieces: " + JSON.stringify(states));
    for (let i = 1; i < states.length; ++i) assert.ok(states[i].startsWith(states[i - 1]), "each piece extends the last");
    assert.equal(states.at(-1), answer1);
    const cache1 = Number(await turns.nth(0).locator('[data-testid="cache_n"]').textContent());
    const computed1 = Number(await turns.nth(0).locator('[data-testid="prompt_n"]').textContent());
    assert.ok(computed1 > 0);

    await turn("And what happened next?", 2);
    const cache2 = Number(await turns.nth(1).locator('[data-testid="cache_n"]').textContent());
    const computed2 = Number(await turns.nth(1).locator('[data-testid="prompt_n"]').textContent());
    // Turn 2's prompt starts with turn 1's prompt and answer: the server kept them.
    assert.ok(cache2 >= cache1 + computed1, `turn 2 reused ${cache2} tokens, turn 1's prompt had ${cache1 + computed1}`);
    assert.ok(computed2 > 0 && computed2 < cache2, `turn 2 computed ${computed2}`);
    // The bubble's line says the same as the table.
    const stats = await page.locator('[data-testid="assistant"] .stats').nth(1).textContent();
    assert.ok(stats.startsWith(`${cache2} tokens from memory, ${computed2} computed`), stats);
    // The slots panel read /slots with the key.
    await page.waitForFunction(() => document.querySelector('[data-testid="slots"] table') !== null);

    await page.screenshot({ path: SCREENSHOT });
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
