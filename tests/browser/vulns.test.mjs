// Vulnerability exposure in a real browser, against the running `breeze demo` (started by
// .ci/browser.sh; its agent enrolled this machine). An OSV record is imported with the CLI
// (`breeze advisories import`, the operator's door): a synthetic record in osv.dev's schema,
// DEBIAN-CVE-2099-0001, naming the `bash` package this machine has installed, fixed one
// revision above the installed version, for the machine's own Debian release (it is a
// synthetic id because the point here is the pages; real records are matched in the store and
// server tests). Then: the Vulnerabilities page (nav entry, summary by severity, the advisory
// with its device count), the advisory's page listing the demo machine with installed and
// fixed-in versions, and the device page's Vulnerabilities section. Every page fits 1280 px
// and a 400 px phone, light and dark, with no CSP violation or script error.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BASE, ORG, demoAgent, openBrowser, shoot as shootAt, signIn } from "./lib.mjs";

const agent = demoAgent();
const ID = "DEBIAN-CVE-2099-0001";

let b, page;
before(async () => {
  b = await openBrowser();
  page = b.page;
});
after(async () => {
  await b?.browser.close();
});
const noProblems = () => b.noProblems();
const shoot = (name) =>
  shootAt(page, `vulns-${name}`, { schemes: ["light", "dark"], widths: [[1280, 900], [400, 844]] });

const cliEnv = () => Object.fromEntries(Object.entries(process.env)
  .filter(([k]) => !/^(BREEZE_|MCP_|DATABASE_URL|REDIS_URL|APPS_)/.test(k)));

// This machine's Debian release and bash version, as its agent reports them.
function osRelease() {
  const text = readFileSync("/etc/os-release", "utf8");
  const get = (k) => (text.match(new RegExp(`^${k}="?([^"\\n]*)"?$`, "m")) || [])[1] || "";
  return { id: get("ID"), version: get("VERSION_ID") };
}

let installed = "";
test("an advisory imported with the CLI", async () => {
  const os = osRelease();
  assert.equal(os.id, "debian", "the demo machine runs Debian (the suite's CI image)");
  installed = execFileSync("dpkg-query", ["-W", "-f=${Version}", "bash"], { encoding: "utf8" }).trim();
  const record = {
    id: ID,
    summary: "bash: synthetic advisory for the browser suite",
    modified: "2099-01-01T00:00:00Z",
    published: "2099-01-01T00:00:00Z",
    severity: [{ type: "CVSS_V3", score: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H" }],
    upstream: ["CVE-2099-0001"],
    affected: [{
      package: { ecosystem: `Debian:${os.version.split(".")[0]}`, name: "bash" },
      ranges: [{ type: "ECOSYSTEM", events: [{ introduced: "0" }, { fixed: `${installed}+breeze1` }] }],
    }],
  };
  const dir = mkdtempSync(join(tmpdir(), "vulns-"));
  writeFileSync(join(dir, `${ID}.json`), JSON.stringify(record));
  const out = execFileSync(process.env.BREEZE_BIN, ["advisories", "import", dir], {
    cwd: process.env.DEMO_DIR, env: cliEnv(), encoding: "utf8",
  });
  assert.match(out, /added 1|unchanged 1/, out);
});

test("the vulnerabilities page lists it with the demo machine counted", async () => {
  await signIn(page, `/o/${ORG}/vulnerabilities`);
  assert.equal(await page.locator(`nav a[href="/o/${ORG}/vulnerabilities"]`).count() > 0, true, "nav entry");
  // The agent's inventory may arrive after the import: its report recomputes the device.
  for (let i = 0; i < 60; i++) {
    if (await page.locator("#advisories a", { hasText: ID }).count()) break;
    await page.waitForTimeout(1000);
    await page.reload();
  }
  const row = page.locator("#advisories tbody tr", { has: page.locator("a", { hasText: ID }) });
  await row.waitFor();
  assert.match(await row.textContent(), /CVE-2099-0001/);
  assert.match(await row.textContent(), /critical/);
  await page.locator("#severity-summary").waitFor();
  await shoot("list");
  noProblems();
});

test("the advisory's page lists the demo machine with its versions", async () => {
  await page.locator("#advisories a", { hasText: ID }).first().click();
  await page.locator("#affected-devices").waitFor();
  const row = page.locator("#affected-devices tbody tr", { has: page.locator(`a[href$="/devices/${agent.deviceId}/vulnerabilities"]`) });
  const text = await row.textContent();
  assert.ok(text.includes(installed), text);
  assert.ok(text.includes(`${installed}+breeze1`), text);
  assert.match(await page.locator("main").textContent(), /fixed by upgrading bash to ≥/);
  await shoot("advisory");
  noProblems();
});

test("the device page shows its vulnerabilities", async () => {
  await page.goto(`${BASE}/o/${ORG}/devices/${agent.deviceId}`);
  const section = page.locator("#device-vulnerabilities");
  await section.waitFor();
  assert.ok((await section.textContent()).includes(ID));
  await section.locator("#device-vulnerabilities-all").click();
  await page.locator("#device-findings").waitFor();
  await shoot("device");
  noProblems();
});
