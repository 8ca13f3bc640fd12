// What every suite here shares: the running demo's address and facts (set by .ci/browser.sh),
// a headless Chromium page that records script errors and CSP violations, screenshots that
// also check the page fits the viewport, and MCP calls made with one of the demo's API keys
// (to set the scene a page is then checked against).
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

export const BASE = process.env.BREEZE_URL;
export const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
export const ORG = demo.organization.slug;
export const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
mkdirSync(SHOTS, { recursive: true });

/** The demo agent's own file (its device id, its key). */
export function demoAgent() {
  return JSON.parse(readFileSync(process.env.AGENT_JSON, "utf8"));
}

/**
 * Headless Chromium with one 1280×900 page; `problems` collects console errors (but a failed
 * resource load) and uncaught page errors, and `noProblems()` asserts there were none.
 * With `acceptDialogs`, confirm() dialogs are accepted as a person clicking OK would.
 */
export async function openBrowser({ acceptDialogs = false } = {}) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
      problems.push(`console: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  if (acceptDialogs) page.on("dialog", (d) => d.accept());
  const noProblems = () => assert.deepEqual(problems, [], "no CSP violation or script error");
  return { browser, context, page, problems, noProblems };
}

/** Asserts the page fits its viewport's width: nothing scrolls sideways. */
export async function fits(page, label) {
  const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(over <= 1, `${label}: ${over} px wider than the viewport`);
}

/**
 * Screenshots the page at a desk's and a phone's width (and in each colour scheme asked for)
 * as `SHOTS/<name>-<width>[-<scheme>].png`, checking it fits each; leaves it at 1280 px, light.
 */
export async function shoot(page, name, { schemes = [null], widths = [[1280, 900], [390, 844]] } = {}) {
  for (const scheme of schemes) {
    if (scheme) await page.emulateMedia({ colorScheme: scheme });
    for (const [w, h] of widths) {
      await page.setViewportSize({ width: w, height: h });
      await fits(page, `${name} at ${w} px${scheme ? `, ${scheme}` : ""}`);
      const file = scheme ? `${name}-${w}-${scheme}` : `${name}-${w}`;
      await page.screenshot({ path: `${SHOTS}/${file}.png`, fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 900 });
}

/** Signs the demo's administrator in through `path` (which first redirects to the login). */
export async function signIn(page, path) {
  await page.goto(`${BASE}${path}`);
  assert.match(page.url(), /\/login\?next=/);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}${path}`);
}

/** One JSON-RPC POST to /mcp with an API key; the answer whether sent as JSON or as SSE. */
export async function rpc(key, body, session) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  headers["x-api-key"] = key;
  if (session) headers["mcp-session-id"] = session;
  const res = await fetch(`${BASE}/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  if ((res.headers.get("content-type") || "").includes("text/event-stream")) {
    for (const line of text.split("\n")) {
      if (!line.startsWith("data: ")) continue;
      const v = JSON.parse(line.slice(6));
      if (v.result !== undefined || v.error !== undefined) json = v;
    }
  } else if (text) {
    json = JSON.parse(text);
  }
  return { status: res.status, session: res.headers.get("mcp-session-id"), json };
}

/** Calls one tool in a fresh MCP session and returns its structured result (asserting success). */
export async function tool(key, name, args, client = "browser-test") {
  const init = await rpc(key, {
    jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: client, version: "1" } },
  });
  assert.equal(init.status, 200);
  await rpc(key, { jsonrpc: "2.0", method: "notifications/initialized" }, init.session);
  const r = await rpc(key, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name, arguments: args } }, init.session);
  assert.equal(r.status, 200);
  assert.notEqual(r.json.result?.isError, true, JSON.stringify(r.json));
  return r.json.result.structuredContent;
}
