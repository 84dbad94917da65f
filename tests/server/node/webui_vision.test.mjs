// The web UI's image button in headless Chromium (playwright-core, Debian's chromium): on a server
// with a vision projector the button shows, a PNG attached to a message goes as an image_url part,
// and the next turn, with another screenshot, reuses the first turn from the server's memory.
//
// Environment (set by tests/server/test_node_sdk.py): AGENTKV_URL, AGENTKV_API_KEY, AGENTKV_IMAGES
// (two PNG paths, ':'-separated).
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const URL_ROOT = process.env.AGENTKV_URL;
const API_KEY = process.env.AGENTKV_API_KEY;
const IMAGES = (process.env.AGENTKV_IMAGES || "").split(":");
assert.ok(URL_ROOT && API_KEY && IMAGES.length === 2, "AGENTKV_* environment not set");

const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                       "--disable-background-networking", "--disable-component-update", "--disable-sync"];

test("attach screenshots in the web UI", async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 760 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(URL_ROOT + "/");
    await page.fill("#api-key", API_KEY);
    await page.dispatchEvent("#api-key", "change");
    await page.waitForFunction(() => !document.getElementById("attach").hidden);  // /props says vision
    await page.fill("#max-tokens", "8");
    await page.dispatchEvent("#max-tokens", "change");
    await page.fill("#temperature", "0");
    await page.dispatchEvent("#temperature", "change");
    const bodies = [];
    page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) bodies.push(JSON.parse(r.postData())); });

    async function turn(text, image, n) {
      await page.setInputFiles("#attach-file", image);
      await page.waitForFunction(() => document.getElementById("attached").textContent === "1 image");
      await page.fill("#input", text);
      await page.press("#input", "Enter");
      await page.waitForFunction((k) => document.querySelectorAll('[data-testid="turn"]').length === k, n,
                                 { timeout: 60_000 });
    }
    await turn("What is on the screen?", IMAGES[0], 1);
    await turn("And now?", IMAGES[1], 2);

    assert.equal(bodies.length, 2);
    const parts = bodies[1].messages.filter((m) => m.role === "user").map((m) => m.content);
    assert.equal(parts.length, 2);
    for (const content of parts) {
      assert.equal(content[0].type, "text");
      assert.equal(content[1].type, "image_url");
      assert.match(content[1].image_url.url, /^data:image\/png;base64,/);
    }
    assert.match(await page.locator('[data-testid="user"]').first().textContent(), /\[1 image\]/);
    const turns = page.locator('[data-testid="turn"]');
    const cache2 = Number(await turns.nth(1).locator('[data-testid="cache_n"]').textContent());
    assert.ok(cache2 > 0, "turn 2 reused turn 1 (its screenshot included)");
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
