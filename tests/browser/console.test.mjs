// The technician's console in a real browser, against the same running `breeze demo` as
// dashboard.test.mjs (started by .ci/browser.sh): an alert arrives live in the inbox while the
// page is open (a rule made over MCP, raised by the engine from the demo machine's own
// samples), is acknowledged with its row's button, and shows so. Every console page is
// screenshotted at 1280 px and 390 px, light and dark, into SCREENSHOTS, and checked for CSP
// violations, script errors and a page wider than the viewport (tables become cards on a phone).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { BASE, ORG, demo, openBrowser, shoot as shootAt, signIn, tool } from "./lib.mjs";

let b, page;
before(async () => {
  b = await openBrowser({ acceptDialogs: true });
  page = b.page;
});
after(async () => {
  await b?.browser.close();
});
const noProblems = () => b.noProblems();
const shoot = (name) => shootAt(page, `console-${name}`, { schemes: ["light", "dark"] });

test("sign in", async () => {
  await signIn(page, `/o/${ORG}/alerts`);
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
