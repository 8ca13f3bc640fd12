// The AI assistant's chat in a real browser, on a phone-sized screen (390 px): headless
// Chromium (playwright-core) against `breeze demo` started by .ci/browser.sh with the stand-in
// Anthropic provider (stand-in-anthropic.mjs). Sign in, open the chat from a device page (the
// context badge names the device), ask, see the streamed text and a tool card, approve the
// Tier 3 call in the inline dialog and see it complete, and see the cost indicator move. Every
// page load is checked for CSP violations and script errors.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
mkdirSync(SHOTS, { recursive: true });

let browser, page;
const problems = [];

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox"],
  });
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
});

after(async () => {
  await browser?.close();
});

function noProblems() {
  assert.deepEqual(problems, [], "no CSP violation or script error");
}

async function costMicroCents() {
  const v = await page.locator("#chat-cost").getAttribute("data-micro-cents");
  return v === null ? null : Number(v);
}

test("chat from a device page on a phone: stream, tool card, inline approval, cost", async () => {
  await page.goto(`${BASE}/login`);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(new RegExp(`/o/${ORG}`));

  // A device page; its navigation's assistant link carries the device.
  await page.goto(`${BASE}/o/${ORG}/devices`);
  const first = page.locator(`a[href^='/o/${ORG}/devices/']`).first();
  const href = await first.getAttribute("href");
  const device = href.split("/").pop();
  await page.goto(`${BASE}${href}`);
  const assistant = page.locator(`nav a[href='/o/${ORG}/chat?device=${device}']`);
  assert.equal(await assistant.count(), 1, "the nav links the chat about this device");
  await assistant.click();
  await page.waitForURL(new RegExp(`/o/${ORG}/chat\\?device=`));
  assert.match(await page.locator("#chat-context").textContent(), /^Device: /);
  assert.equal(await page.locator("#chat-unconfigured").count(), 0, "a provider is configured");
  // The cost indicator has read the usage once.
  await page.waitForFunction(() => document.getElementById("chat-cost").hasAttribute("data-micro-cents"));
  const before = await costMicroCents();

  // Ask: the answer streams in, then the Tier 3 call's card waits with an inline dialog.
  await page.fill("#chat-input", "Please group the web servers");
  await page.click("#chat-send");
  await page.waitForURL(/session=/);
  await page.locator(".chat-assistant", { hasText: "I'll create that group for you." }).waitFor();
  const card = page.locator("li.chat-tool", { hasText: "manage_groups" }).first();
  await card.waitFor();
  assert.match(await card.locator("pre").first().textContent(), /"action": "create"/);
  const approve = card.locator("button[data-decide=approve]");
  await approve.waitFor();
  assert.equal(await card.locator("button[data-decide=reject]").count(), 1);
  // Usable on a phone: the button is on screen, not cut off.
  const box = await approve.boundingBox();
  assert.ok(box && box.x >= 0 && box.x + box.width <= 390, `approve button within 390 px: ${JSON.stringify(box)}`);
  await page.screenshot({ path: `${SHOTS}/assistant-approval-390.png`, fullPage: true });
  await approve.click();

  // Approved: the call runs, its card completes with a result, and the model answers.
  await card.locator("[data-status]", { hasText: "completed" }).waitFor({ timeout: 30000 });
  await card.locator(".chat-result pre").waitFor();
  await page.locator(".chat-assistant", { hasText: "The tool answered" }).waitFor();
  // The cost indicator moves (it polls after each answer).
  await page.waitForFunction(
    (b) => Number(document.getElementById("chat-cost").getAttribute("data-micro-cents")) > b,
    before ?? 0,
    { timeout: 20000 },
  );
  assert.match(await page.locator("#chat-cost").textContent(), /Cost today: .*tokens/);
  await page.screenshot({ path: `${SHOTS}/assistant-done-390.png`, fullPage: true });

  // The page as stored: reloaded, the conversation and the completed card are there.
  await page.reload();
  assert.match(await page.locator("#chat-context").textContent(), /^Device: /);
  await page.locator("li.chat-tool .s-completed").first().waitFor();
  assert.equal(await page.locator("button[data-decide]").count(), 0);
  // The session is listed and found by search.
  await page.fill("#chat-q", "web servers");
  await page.locator("#chat-list a", { hasText: "group the web servers" }).first().waitFor();
  noProblems();
});
