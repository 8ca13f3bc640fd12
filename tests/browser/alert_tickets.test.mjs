// Tickets on an alert's and a device's page in a real browser, against the same running
// `breeze demo` as the other suites (started by .ci/browser.sh): an alert raised by the engine
// from the demo machine's own samples (a rule made over MCP) becomes a ticket with the alert
// page's "Create ticket from alert" button; the ticket opens, and the alert's page and the
// device's page both list it with a link to it. Pages are screenshotted at 1280 px and 390 px
// into SCREENSHOTS and checked for CSP violations, script errors and a page wider than the
// viewport.
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
const shoot = (name) => shootAt(page, `tickets-${name}`);

test("sign in", async () => {
  await signIn(page, `/o/${ORG}/alerts`);
  noProblems();
});

let ruleId;
test("an alert becomes a ticket from its page, and its page and its device's list it", async () => {
  const name = `Ticketed CPU ${Date.now()}`;
  // The demo machine always uses some CPU: above 0 % on the newest sample breaches at once.
  const made = await tool(demo.api_keys.write, "manage_alert_rules", {
    action: "create", name, severity: "high",
    condition: { kind: "metric", metric: "cpu", comparison: "above", threshold: 0, durationMinutes: 0 },
  });
  ruleId = made.rule.id;
  await page.goto(`${BASE}/o/${ORG}/alerts?status=all`);
  const row = page.locator("#alerts tbody tr", { hasText: name });
  await row.waitFor({ timeout: 150000 });
  await row.locator("a", { hasText: name }).click();
  await page.locator("#alert-tickets").waitFor();
  const alertUrl = page.url();
  assert.match(alertUrl, /\/alerts\/[0-9a-f-]{36}$/);
  await page.locator("#linked-tickets-empty").waitFor();
  await shoot("alert-no-ticket");

  await page.click("#ticket-from-alert button[type=submit]");
  await page.waitForURL(/\/tickets\/T-\d+$/);
  const ref = new URL(page.url()).pathname.split("/").pop();
  await page.locator("#ticket-status", { hasText: "new" }).waitFor();

  await page.goto(alertUrl);
  const link = page.locator(`#linked-tickets a[href="/o/${ORG}/tickets/${ref}"]`);
  await link.waitFor();
  await page.locator(`#ticket-${ref}`, { hasText: "new" }).waitFor();
  await shoot("alert-ticketed");

  // The device's page lists it too, and its link opens the ticket.
  await page.locator(`dd a[href^="/o/${ORG}/devices/"]`).first().click();
  await page.waitForURL(/\/devices\/[0-9a-f-]{36}/);
  const onDevice = page.locator(`#device-tickets a[href="/o/${ORG}/tickets/${ref}"]`);
  await onDevice.waitFor();
  await shoot("device-tickets");
  await onDevice.click();
  await page.waitForURL(`${BASE}/o/${ORG}/tickets/${ref}`);
  noProblems();
});

test("the rule is switched off again (the demo keeps running)", async () => {
  const off = await tool(demo.api_keys.write, "manage_alert_rules", { action: "update", ruleId, enabled: false });
  assert.equal(off.rule.enabled, false);
});
