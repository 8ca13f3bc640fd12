// Every console page in a real browser, against the same running `breeze demo` as the other
// suites (started by .ci/browser.sh): each page at 1280 px and a 390 px phone, light and dark,
// fits the width (screenshots into SCREENSHOTS), and axe-core finds no serious or critical
// accessibility violation on it. Then a new device's enrollment: a key made on the
// "Add a device" page shows the one-line install command, and its Copy button copies it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const agent = JSON.parse(readFileSync(process.env.AGENT_JSON, "utf8"));
const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
const AXE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
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

// The page's serious and critical axe violations, one line each.
async function axe(name) {
  // Evaluated through the DevTools protocol, so the page's CSP (no inline script) stays on.
  if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.evaluate(AXE);
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
  });
  return found.map((f) => `${name}: ${f}`);
}

async function over() {
  return page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
}

let scriptUrl;
test("sign in", async () => {
  await page.goto(`${BASE}/o/${ORG}/scripts`);
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}/o/${ORG}/scripts`);
  scriptUrl = await page.locator("#scripts tbody tr a").first().getAttribute("href");
  assert.ok(scriptUrl);
});

test("every page fits 1280 and 390 px, light and dark, with no serious accessibility problem", async () => {
  const device = `/o/${ORG}/devices/${agent.deviceId}`;
  const pages = [
    ["overview", `/o/${ORG}`],
    ["alerts", `/o/${ORG}/alerts`],
    ["alert-rules", `/o/${ORG}/alerts/rules`],
    ["approvals", `/o/${ORG}/approvals`],
    ["devices", `/o/${ORG}/devices`],
    ["device", device],
    ["device-configuration", `${device}/configuration`],
    ["scripts", `/o/${ORG}/scripts`],
    ["script", scriptUrl],
    ["script-new", `/o/${ORG}/scripts/new`],
    ["script-executions", `/o/${ORG}/scripts/executions`],
    ["patches", `/o/${ORG}/patches`],
    ["patches-by-device", `/o/${ORG}/patches?view=device`],
    ["deployments", `/o/${ORG}/deployments`],
    ["maintenance", `/o/${ORG}/maintenance`],
    ["policies", `/o/${ORG}/policies`],
    ["compliance", `/o/${ORG}/compliance`],
    ["automations", `/o/${ORG}/automations`],
    ["reports", `/o/${ORG}/reports`],
    ["groups", `/o/${ORG}/groups`],
    ["people", `/o/${ORG}/people`],
    ["enrollment", `/o/${ORG}/enrollment`],
    ["protected-paths", `/o/${ORG}/protected-paths`],
    ["tickets", `/o/${ORG}/tickets`],
    ["invoices", `/o/${ORG}/invoices`],
    ["quotes", `/o/${ORG}/quotes`],
    ["contracts", `/o/${ORG}/contracts`],
    ["audit", `/o/${ORG}/audit`],
    ["chat", `/o/${ORG}/chat`],
    ["tool-sources", `/o/${ORG}/ai/tool-sources`],
    ["api-keys", `/o/${ORG}/settings/api-keys`],
    ["mcp", `/o/${ORG}/settings/mcp`],
    ["apps", `/o/${ORG}/settings/apps`],
  ];
  const wide = [];
  const a11y = [];
  for (const [name, path] of pages) {
    const r = await page.goto(`${BASE}${path}`);
    assert.equal(r.status(), 200, `${name}: ${path}`);
    // Linked from the navigation (or a page of the area the navigation links).
    for (const scheme of ["light", "dark"]) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const [w, h] of [[1280, 900], [390, 844]]) {
        await page.setViewportSize({ width: w, height: h });
        const o = await over();
        if (o > 1) wide.push(`${name} at ${w} px, ${scheme}: ${o} px too wide`);
        await page.screenshot({ path: `${SHOTS}/console3-${name}-${w}-${scheme}.png`, fullPage: true });
        if (w === 390 || scheme === "dark") a11y.push(...(await axe(`${name} ${w} ${scheme}`)));
      }
    }
    await page.emulateMedia({ colorScheme: "light" });
    await page.setViewportSize({ width: 1280, height: 900 });
    a11y.push(...(await axe(`${name} 1280 light`)));
  }
  assert.deepEqual(wide, [], "every page fits its width");
  assert.deepEqual(a11y, [], "no serious or critical axe violation");
  assert.deepEqual(problems, [], "no CSP violation or script error");
});

test("the navigation links every area", async () => {
  await page.goto(`${BASE}/o/${ORG}`);
  const links = await page.locator("nav.nav a").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
  for (const area of ["/scripts", "/patches", "/policies", "/reports", "/groups"]) {
    assert.ok(links.includes(`/o/${ORG}${area}`), `${area} in ${links}`);
  }
});

test("a new device's install command is shown once and copied", async () => {
  await page.goto(`${BASE}/o/${ORG}/enrollment`);
  await page.fill("#new-key-name", "Browser test key");
  await page.click("#new-key button[type=submit]");
  const code = page.locator("#install-command");
  await code.waitFor();
  const command = await code.textContent();
  assert.match(command, /^sudo breeze-agent enroll --server http:\/\/127\.0\.0\.1:\d+ --key brz_\S+ && sudo systemctl enable --now breeze-agent$/);
  await page.click("button[data-copy=install-command]");
  await page.locator("button[data-copy=install-command].copied").waitFor();
  await page.screenshot({ path: `${SHOTS}/console3-install-command-1280-light.png`, fullPage: true });
  // Listed afterwards without its secret.
  await page.goto(`${BASE}/o/${ORG}/enrollment`);
  await page.locator("#keys", { hasText: "Browser test key" }).waitFor();
  assert.equal(await page.locator("#install-command").count(), 0);
  assert.deepEqual(problems, []);
});
