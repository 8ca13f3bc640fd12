// The technician's console in a real browser, against the same running `breeze demo` as
// dashboard.test.mjs (started by .ci/browser.sh): an alert arrives live in the inbox while the
// page is open (a rule made over MCP, raised by the engine from the demo machine's own
// samples), is acknowledged with its row's button, and shows so. Every console page is
// screenshotted at 1280 px and 390 px, light and dark, into SCREENSHOTS, and checked for CSP
// violations, script errors and a page wider than the viewport (tables become cards on a phone).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
mkdirSync(SHOTS, { recursive: true });

let browser, context, page;
const problems = [];

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox"],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
      problems.push(`console: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => d.accept());
});

after(async () => {
  await browser?.close();
});

function noProblems() {
  assert.deepEqual(problems, [], "no CSP violation or script error");
}

// The page fits the viewport's width: nothing scrolls sideways.
async function fits(name) {
  const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(over <= 1, `${name}: ${over} px wider than the viewport`);
}

async function shoot(name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [w, h] of [[1280, 900], [390, 844]]) {
      await page.setViewportSize({ width: w, height: h });
      await fits(`${name} at ${w} px, ${scheme}`);
      await page.screenshot({ path: `${SHOTS}/console-${name}-${w}-${scheme}.png`, fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 900 });
}

async function rpc(key, body, session) {
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

async function tool(key, name, args) {
  const init = await rpc(key, {
    jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "console-test", version: "1" } },
  });
  assert.equal(init.status, 200);
  await rpc(key, { jsonrpc: "2.0", method: "notifications/initialized" }, init.session);
  const r = await rpc(key, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name, arguments: args } }, init.session);
  assert.equal(r.status, 200);
  assert.notEqual(r.json.result?.isError, true, JSON.stringify(r.json));
  return r.json.result.structuredContent;
}

test("sign in", async () => {
  await page.goto(`${BASE}/o/${ORG}/alerts`);
  assert.match(page.url(), /\/login\?next=/);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}/o/${ORG}/alerts`);
  noProblems();
});

let ruleId;
test("an alert arrives live in the open inbox and is acknowledged from its row", async () => {
  await page.goto(`${BASE}/o/${ORG}/alerts`);
  const name = `Busy CPU ${Date.now()}`;
  // The demo machine always uses some CPU: above 0 % on the newest sample breaches at once.
  const made = await tool(demo.api_keys.write, "manage_alert_rules", {
    action: "create", name, severity: "high",
    condition: { kind: "metric", metric: "cpu", comparison: "above", threshold: 0, durationMinutes: 0 },
  });
  ruleId = made.rule.id;
  const row = page.locator("#alerts tbody tr", { hasText: name });
  // No reload: the page's `alerts` event brings the row in when the engine raises it.
  await row.waitFor({ timeout: 150000 });
  assert.equal(new URL(page.url()).pathname, `/o/${ORG}/alerts`, "no navigation");
  await shoot("alerts");
  await row.locator("button", { hasText: "Acknowledge" }).click();
  await page.waitForURL(/done=/);
  await page.locator("#notice", { hasText: "1 alert acknowledged." }).waitFor();
  await page.locator("#alerts tbody tr", { hasText: name }).locator(".badge", { hasText: "acknowledged" }).waitFor();
  // Its page: the history names the person who acknowledged it.
  await page.locator("#alerts tbody tr", { hasText: name }).locator("a", { hasText: name }).click();
  await page.locator("#history", { hasText: "acknowledged" }).waitFor();
  await shoot("alert");
  noProblems();
});

test("every console page fits a desk and a phone, light and dark", async () => {
  for (const [name, path] of [
    ["overview", `/o/${ORG}`],
    ["alert-rules", `/o/${ORG}/alerts/rules`],
    ["alert-rule-new", `/o/${ORG}/alerts/rules/new`],
    ["alert-rule-edit", `/o/${ORG}/alerts/rules/${ruleId}`],
    ["approvals", `/o/${ORG}/approvals`],
    ["audit", `/o/${ORG}/audit`],
    ["not-found", `/o/${ORG}/no-such-page`],
  ]) {
    const res = await page.goto(`${BASE}${path}`);
    assert.equal(res.status(), name === "not-found" ? 404 : 200, path);
    if (name === "overview") await page.locator("#patch-compliance").waitFor();
    await shoot(name);
  }
  // Keyboard: the skip link is the first stop and lands on the content.
  await page.goto(`${BASE}/o/${ORG}/alerts`);
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.className), "skip");
  noProblems();
});

test("the rule is switched off again (the demo keeps running)", async () => {
  const off = await tool(demo.api_keys.write, "manage_alert_rules", { action: "update", ruleId, enabled: false });
  assert.equal(off.rule.enabled, false);
});
