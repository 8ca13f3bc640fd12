// Tickets and invoices in a real browser, against the same running `breeze demo` as the other
// suites (started by .ci/browser.sh): a ticket made over MCP is worked from its page — a
// comment, assigned to the signed-in person, moved to pending, a billable timer started and
// stopped — and an invoice drafted over MCP is read on its page with its totals and its PDF
// downloaded. Each page is screenshotted at 1280 px and 390 px into SCREENSHOTS and checked
// for CSP violations, script errors and a page wider than the viewport.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { BASE, ORG, demo, openBrowser, shoot as shootAt, signIn, tool } from "./lib.mjs";

let b, page;
before(async () => {
  b = await openBrowser();
  page = b.page;
});
after(async () => {
  await b?.browser.close();
});
const noProblems = () => b.noProblems();
const shoot = (name) => shootAt(page, `billing-${name}`);

test("sign in", async () => {
  await signIn(page, `/o/${ORG}/tickets`);
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
