// Tickets and invoices in a real browser, against the same running `breeze demo` as the other
// suites (started by .ci/browser.sh): a ticket made over MCP is worked from its page — a
// comment, assigned to the signed-in person, moved to pending, a billable timer started and
// stopped — and an invoice drafted over MCP is read on its page with its totals and its PDF
// downloaded. Each page is screenshotted at 1280 px and 390 px into SCREENSHOTS and checked
// for CSP violations, script errors and a page wider than the viewport.
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
});

after(async () => {
  await browser?.close();
});

function noProblems() {
  assert.deepEqual(problems, [], "no CSP violation or script error");
}

async function shoot(name) {
  for (const [w, h] of [[1280, 900], [390, 844]]) {
    await page.setViewportSize({ width: w, height: h });
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(over <= 1, `${name} at ${w} px: ${over} px wider than the viewport`);
    await page.screenshot({ path: `${SHOTS}/billing-${name}-${w}.png`, fullPage: true });
  }
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
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "billing-test", version: "1" } },
  });
  assert.equal(init.status, 200);
  await rpc(key, { jsonrpc: "2.0", method: "notifications/initialized" }, init.session);
  const r = await rpc(key, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name, arguments: args } }, init.session);
  assert.equal(r.status, 200);
  assert.notEqual(r.json.result?.isError, true, JSON.stringify(r.json));
  return r.json.result.structuredContent;
}

test("sign in", async () => {
  await page.goto(`${BASE}/o/${ORG}/tickets`);
  assert.match(page.url(), /\/login\?next=/);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}/o/${ORG}/tickets`);
  noProblems();
});

test("a ticket is worked from its page: comment, assign, status, timer", async () => {
  const subject = `Printer jams ${Date.now()}`;
  const made = await tool(demo.api_keys.write, "manage_tickets", {
    action: "create", subject, description: "Page two jams every time", priority: "high",
  });
  const ref = made.ticket.number;
  await page.goto(`${BASE}/o/${ORG}/tickets`);
  await page.locator("#tickets tbody tr", { hasText: subject }).locator("a", { hasText: ref }).click();
  await page.waitForURL(`${BASE}/o/${ORG}/tickets/${ref}`);
  await shoot("ticket");

  await page.fill("#body", "Replaced the pickup roller");
  await page.click("#comment-form button[type=submit]");
  await page.locator("#comments", { hasText: "Replaced the pickup roller" }).waitFor();

  await page.click("#assign-form button[type=submit]");
  await page.locator("#ticket-assignee", { hasText: demo.admin.name || "" }).waitFor();
  assert.doesNotMatch(await page.locator("#ticket-assignee").innerText(), /nobody/);

  await page.selectOption("#new-status", "pending");
  await page.click("#status-form button[type=submit]");
  await page.locator("#ticket-status", { hasText: "pending" }).waitFor();

  await page.fill("#rate", "90.00");
  await page.click("#start-timer");
  await page.locator("#stop-timer").waitFor();
  await page.locator("#time", { hasText: "running" }).waitFor();
  await page.click("#stop-timer");
  await page.locator("#start-timer").waitFor();
  await page.locator("#time", { hasText: "90.00 USD" }).waitFor();
  await shoot("ticket-worked");
  noProblems();
});

test("an invoice shows its lines and totals, and downloads as a PDF", async () => {
  const draft = await tool(demo.api_keys.write, "manage_invoices", { action: "create", currency: "USD" });
  const id = draft.invoice.id;
  await tool(demo.api_keys.write, "manage_invoices", {
    action: "add_line", invoiceId: id, description: "Printer service", quantity: "1.5", unitPrice: "90.00", taxBp: 2000,
  });
  await page.goto(`${BASE}/o/${ORG}/invoices`);
  await page.locator("#invoices a[href$='" + id + "']").click();
  await page.waitForURL(`${BASE}/o/${ORG}/invoices/${id}`);
  // 1.5 × 90.00 = 135.00; 20 % tax = 27.00; total 162.00.
  await page.locator("#lines", { hasText: "135.00 USD" }).waitFor();
  await page.locator("#totals", { hasText: "162.00 USD" }).waitFor();
  await shoot("invoice");
  const href = await page.locator("#pdf").getAttribute("href");
  const pdf = await page.request.get(`${BASE}${href}`);
  assert.equal(pdf.status(), 200);
  assert.equal(pdf.headers()["content-type"], "application/pdf");
  const body = await pdf.body();
  assert.equal(body.subarray(0, 5).toString(), "%PDF-");
  for (const path of ["quotes", "contracts"]) {
    await page.goto(`${BASE}/o/${ORG}/${path}`);
    await shoot(path);
  }
  noProblems();
});
