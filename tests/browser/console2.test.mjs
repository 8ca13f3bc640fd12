// Device actions in a real browser, against the same running `breeze demo` as the other suites
// (started by .ci/browser.sh): the demo machine's page runs a library script through its
// actions panel (run_script, as the signed-in person) and shows the output under Recent
// commands; the device list acts on a selection (adds the demo machine to a group). Both pages
// fit 1280 px and a 400 px phone, light and dark (screenshots into SCREENSHOTS), carry no CSP
// violation or script error, and every action control is reachable from the keyboard and named.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
// The demo machine: its agent is the one online device (other suites seed offline ones, which
// may sort first in the device list).
const agent = JSON.parse(readFileSync(process.env.AGENT_JSON, "utf8"));
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

async function fits(name) {
  const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(over <= 1, `${name}: ${over} px wider than the viewport`);
}

// At a desk and on a 400 px phone, light and dark.
async function shoot(name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [w, h] of [[1280, 900], [400, 844]]) {
      await page.setViewportSize({ width: w, height: h });
      await fits(`${name} at ${w} px, ${scheme}`);
      await page.screenshot({ path: `${SHOTS}/console2-${name}-${w}-${scheme}.png`, fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 900 });
}

// Every control inside `selector` is focusable from the keyboard and has a name.
async function keyboardAndLabels(selector) {
  const bad = await page.evaluate((sel) => {
    const out = [];
    for (const el of document.querySelectorAll(`${sel} button, ${sel} input:not([type=hidden]), ${sel} select, ${sel} textarea`)) {
      if (el.tabIndex < 0 || el.disabled) out.push(`not focusable: ${el.outerHTML.slice(0, 80)}`);
      const named = (el.labels && el.labels.length > 0) || el.getAttribute("aria-label") || (el.tagName === "BUTTON" && el.textContent.trim());
      if (!named) out.push(`no name: ${el.outerHTML.slice(0, 80)}`);
    }
    return out;
  }, selector);
  assert.deepEqual(bad, [], `${selector}: every control focusable and named`);
}

let deviceUrl;
test("sign in and open the demo machine", async () => {
  await page.goto(`${BASE}/o/${ORG}/devices`);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}/o/${ORG}/devices`);
  const link = page.locator(`#devices tbody tr a[href$="/devices/${agent.deviceId}"]`).first();
  await link.click();
  await page.locator("#device-actions").waitFor();
  deviceUrl = page.url();
  noProblems();
});

// The run must be on the demo machine itself: apps.test.mjs seeds offline devices that sort
// before it in the list, and run_script refuses an offline device (no command, no output).
test("a library script runs from the device page and its output shows", async () => {
  await keyboardAndLabels("#device-actions");
  await page.selectOption("#act-script-id", { label: "Disk usage report" });
  // Keyboard: the Run button is reached with Tab and pressed with Enter.
  await page.focus("#act-script-params");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.textContent?.trim()), "Run script");
  await page.keyboard.press("Enter");
  await page.waitForURL(/(done|failed)=/);
  const notice = await page.locator("#notice, #action-error").first().textContent();
  assert.match(notice, /Disk usage report|still running/, notice);
  // The command and its output, under Recent commands (at once, or once the agent answered).
  for (let i = 0; i < 30; i++) {
    const done = await page.locator("details.row-detail", { hasText: "Disk usage report" }).locator(".badge", { hasText: "completed" }).count();
    if (done > 0) break;
    await page.waitForTimeout(1000);
    await page.goto(deviceUrl);
  }
  const cmd = page.locator("details.row-detail", { hasText: "Disk usage report" }).first();
  await cmd.locator("summary").click();
  await cmd.locator("pre", { hasText: "Filesystem" }).waitFor();
  await page.goto(deviceUrl);
  await shoot("device");
  noProblems();
});

test("the device list acts on a selection", async () => {
  await page.goto(`${BASE}/o/${ORG}/devices`);
  await keyboardAndLabels("#bulk-devices");
  // The demo machine's row (its page is checked below).
  const row = page.locator("#devices tbody tr", { has: page.locator(`a[href$="/devices/${agent.deviceId}"]`) });
  await row.locator("input[type=checkbox]").check();
  await page.selectOption("#bulk-action", "add_to_group");
  await page.selectOption("#bulk-group", { label: "Servers" });
  await page.click("#bulk-devices button[type=submit]");
  await page.waitForURL(/done=/);
  await page.locator("#notice").waitFor();
  await shoot("devices");
  // The device page names the group, with a button to leave it.
  await page.goto(deviceUrl);
  await page.locator("#act-group button[aria-label='Remove from Servers']").waitFor();
  noProblems();
});
