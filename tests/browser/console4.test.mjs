// The console's organization and policy forms in a real browser, against the same running
// `breeze demo` as the other suites (started by .ci/browser.sh): an enrollment key made on the
// "Add a device" page is revoked from its row; a webhook channel is added (its signing secret
// shown once, with a Copy button) and deleted; a configuration policy is created, assigned to
// the organization from the policies page and the assignment removed again. Each page is
// screenshotted at 1280 px and 390 px, light and dark, and checked for CSP violations, script
// errors and a page wider than the viewport.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { BASE, ORG, openBrowser, shoot as shootAt, signIn } from "./lib.mjs";

let b, page;
before(async () => {
  // The danger buttons ask confirm(): accepted as a person clicking OK would.
  b = await openBrowser({ acceptDialogs: true });
  page = b.page;
});
after(async () => {
  await b?.browser.close();
});
const noProblems = () => b.noProblems();
const shoot = (name) => shootAt(page, `console4-${name}`, { schemes: ["light", "dark"] });
const stamp = Date.now();

test("sign in", async () => {
  await signIn(page, `/o/${ORG}/enrollment`);
  noProblems();
});

test("an enrollment key is revoked from its row", async () => {
  const name = `Revoke me ${stamp}`;
  await page.goto(`${BASE}/o/${ORG}/enrollment`);
  await page.fill("#new-key-name", name);
  await page.click("#new-key button[type=submit]");
  await page.locator("#install-command").waitFor();
  await page.goto(`${BASE}/o/${ORG}/enrollment`);
  const row = page.locator("#keys tbody tr", { hasText: name });
  await row.getByRole("button", { name: `Revoke the key ${name}` }).click();
  await page.locator("#notice", { hasText: `Revoked the key ${name}` }).waitFor();
  const after = page.locator("#keys tbody tr", { hasText: name });
  assert.match(await after.innerText(), /revoked/);
  assert.equal(await after.getByRole("button").count(), 0, "nothing left to revoke");
  await shoot("enrollment");
  noProblems();
});

test("a webhook channel is added with its secret shown once, then deleted", async () => {
  const name = `Hook ${stamp}`;
  await page.goto(`${BASE}/o/${ORG}/channels`);
  await page.fill("#new-channel-name", name);
  await page.selectOption("#new-channel-kind", "webhook");
  await page.fill("#new-channel-url", "https://psa.example.com/breeze");
  await page.click("#new-channel button[type=submit]");
  const secret = await page.locator("#signing-secret-command").innerText();
  assert.ok(secret.length >= 16, "a signing secret is shown");
  assert.ok(await page.locator("button[data-copy=signing-secret-command]").isVisible());
  await shoot("channel-added");
  await page.goto(`${BASE}/o/${ORG}/channels`);
  assert.ok(!(await page.content()).includes(secret), "shown only once");
  const row = page.locator("#channels tbody tr", { hasText: name });
  assert.match(await row.innerText(), /psa\.example\.com/);
  await shoot("channels");
  await row.getByRole("button", { name: `Delete the channel ${name}` }).click();
  await page.locator("#notice", { hasText: `Deleted the channel ${name}` }).waitFor();
  assert.equal(await page.locator("#channels tbody tr", { hasText: name }).count(), 0);
  noProblems();
});

test("a configuration policy is created, assigned to the organization and unassigned", async () => {
  const name = `Browser policy ${stamp}`;
  await page.goto(`${BASE}/o/${ORG}/policies`);
  await page.fill("#new-policy-name", name);
  await page.selectOption("#new-policy-status", "inactive");
  await page.fill("#new-policy-settings", '{"monitoring": {"metricIntervalSeconds": 60}}');
  await page.click("#new-policy button[type=submit]");
  // Created: its own page, with the edit form.
  await page.locator("#notice", { hasText: `Created the policy ${name}` }).waitFor();
  assert.match(new URL(page.url()).pathname, new RegExp(`^/o/${ORG}/policies/[0-9a-f-]{36}$`));
  assert.equal(await page.inputValue("#edit-policy-name"), name);
  await shoot("policy");
  await page.goto(`${BASE}/o/${ORG}/policies`);
  await page.selectOption("#assign-policy-policy", { label: name });
  await page.selectOption("#assign-policy-target", { label: "This organization" });
  await page.fill("#assign-policy-priority", "7");
  await page.click("#assign-policy button[type=submit]");
  await page.locator("#notice").waitFor();
  const row = page.locator("#assignments tbody tr", { hasText: name });
  assert.match(await row.innerText(), /this organization/);
  assert.match(await row.innerText(), /7/);
  await shoot("policies");
  await row.getByRole("button", { name: `Remove ${name} from this organization` }).click();
  await page.locator("#notice").waitFor();
  assert.equal(await page.locator("#assignments tbody tr", { hasText: name }).count(), 0);
  noProblems();
});
