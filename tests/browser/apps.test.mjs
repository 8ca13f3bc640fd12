// MCP Apps (the io.modelcontextprotocol/ui extension) against the running `breeze demo` started
// by .ci/browser.sh. A minimal host: Node is the MCP client (Streamable HTTP, the extension
// declared in `initialize`), Chromium shows each view in a sandboxed iframe (allow-scripts only,
// an opaque origin) served with the CSP its resource's `_meta.ui.csp` declares, and the
// ext-apps package's own AppBridge speaks to the view. Checked: negotiation (and its absence:
// no `_meta.ui`, identical results), each view drawing its tool's structuredContent (text, a
// chart, a sorted table, live query rows under the question's columns, exposure by severity),
// a button's call reaching Breeze through the bridge and its audit record, the approval card not
// approving for a key, and no request leaving the frame.
// Screenshots at 400 and 800 px, light and dark, go to APPS_IMAGES (docs/images when set so).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const agent = JSON.parse(readFileSync(process.env.AGENT_JSON, "utf8"));
const IMAGES = process.env.APPS_IMAGES || process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
const KEY = demo.api_keys.execute;
const UI = "io.modelcontextprotocol/ui";
const MIME = "text/html;profile=mcp-app";
const HOST = "http://host.test";
const SANDBOX = "http://sandbox.test";
mkdirSync(IMAGES, { recursive: true });

// ---- the MCP client (Node) ----------------------------------------------------------------
async function rpc(session, body, signal) {
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "x-api-key": KEY,
  };
  if (session) {
    headers["mcp-session-id"] = session.id;
    headers["mcp-protocol-version"] = "2025-11-25";
  }
  const res = await fetch(`${BASE}/mcp`, { method: "POST", headers, body: JSON.stringify(body), signal });
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
  return { status: res.status, id: res.headers.get("mcp-session-id"), json };
}

let nextId = 1;
async function connect(withUi) {
  const capabilities = withUi ? { extensions: { [UI]: { mimeTypes: [MIME] } } } : {};
  const init = await rpc(null, {
    jsonrpc: "2.0", id: nextId++, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities, clientInfo: { name: "apps-test-host", version: "1" } },
  });
  assert.equal(init.status, 200, JSON.stringify(init.json));
  const session = { id: init.id, init: init.json.result };
  await rpc(session, { jsonrpc: "2.0", method: "notifications/initialized" });
  session.call = async (method, params, signal) => {
    const r = await rpc(session, { jsonrpc: "2.0", id: nextId++, method, params }, signal);
    assert.equal(r.status, 200, `${method}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error, undefined, `${method}: ${JSON.stringify(r.json.error)}`);
    return r.json.result;
  };
  return session;
}

// ---- the host page (Chromium) -----------------------------------------------------------------
let browser, context, page, ui, plain, hostJs;
const views = new Map(); // sandbox path -> { html, csp }
const escaped = []; // requests to anywhere but the host page and the sandbox
const problems = [];
const opened = [];
const bridged = []; // tools/call requests the views made through the bridge

// The CSP a host derives from `_meta.ui.csp`: only the listed origins, nothing else.
function cspOf(csp = {}) {
  const list = (v, none) => (v && v.length ? v.join(" ") : none);
  const res = list(csp.resourceDomains, "");
  return [
    "default-src 'none'",
    `script-src 'unsafe-inline' ${res}`.trim(),
    `style-src 'unsafe-inline' ${res}`.trim(),
    `img-src data: ${res}`.trim(),
    `font-src data: ${res}`.trim(),
    `media-src data: ${res}`.trim(),
    `connect-src ${list(csp.connectDomains, "'none'")}`,
    `frame-src ${list(csp.frameDomains, "'none'")}`,
    `base-uri ${list(csp.baseUriDomains, "'none'")}`,
    "form-action 'none'",
  ].join("; ");
}

before(async () => {
  const here = fileURLToPath(new URL(".", import.meta.url));
  const bundle = await build({
    entryPoints: [`${here}apps-host/host.mjs`], bundle: true, format: "esm", write: false,
    platform: "browser", logLevel: "silent",
  });
  hostJs = bundle.outputFiles[0].text;
  ui = await connect(true);
  plain = await connect(false);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  context = await browser.newContext({ viewport: { width: 820, height: 900 } });
  await context.route("**/*", async (route) => {
    const url = route.request().url();
    if (url === `${HOST}/`) {
      return route.fulfill({ contentType: "text/html", body: "<!doctype html><html><body></body></html>" });
    }
    if (url === `${HOST}/host.js`) return route.fulfill({ contentType: "text/javascript", body: hostJs });
    const view = url.startsWith(`${SANDBOX}/`) && views.get(new URL(url).pathname);
    if (view) {
      return route.fulfill({
        contentType: "text/html",
        headers: { "content-security-policy": view.csp },
        body: view.html,
      });
    }
    escaped.push(url);
    return route.abort();
  });
  page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" || /Content Security Policy/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  await page.exposeFunction("hostCallTool", async (params) => {
    bridged.push(params);
    return ui.call("tools/call", params);
  });
  await page.exposeFunction("hostOpenLink", async (url) => { opened.push(url); });
  await page.goto(`${HOST}/`);
  await page.addScriptTag({ url: `${HOST}/host.js`, type: "module" });
  await page.waitForFunction(() => typeof window.showView === "function");
});

after(async () => {
  await browser?.close();
});

// As a host does, the listing and each view's resource are read once and kept (the session's
// message rate is for a conversation, not for re-reading them before every call).
let listing;
const resources = new Map();

// Calls `tool` over MCP, reads its view's resource and shows it; returns the view's frame.
async function show(tool, args, { theme = "light", width = 800 } = {}) {
  listing ??= await ui.call("tools/list", {});
  const def = listing.tools.find((t) => t.name === tool);
  const uri = def?._meta?.ui?.resourceUri;
  assert.match(uri || "", /^ui:\/\/breeze\//, `${tool} names its view`);
  if (!resources.has(uri)) resources.set(uri, await ui.call("resources/read", { uri }));
  const [contents] = resources.get(uri).contents;
  assert.equal(contents.mimeType, MIME);
  const csp = contents._meta?.ui?.csp;
  assert.ok(csp, "the resource declares its CSP");
  for (const k of ["connectDomains", "resourceDomains", "frameDomains", "baseUriDomains"]) {
    assert.deepEqual(csp[k] || [], [], `${k}: no outside origin`);
  }
  const result = await ui.call("tools/call", { name: tool, arguments: args });
  assert.notEqual(result.isError, true, JSON.stringify(result));
  const path = `/${tool}-${views.size}`;
  views.set(path, { html: contents.text, csp: cspOf(csp) });
  await page.emulateMedia({ colorScheme: theme });
  await page.setViewportSize({ width: width + 20, height: 900 });
  await page.evaluate((p) => window.showView(p), { src: `${SANDBOX}${path}`, args, result, theme, width });
  const frame = page.frameLocator("iframe");
  await frame.locator("main[aria-busy=false]").waitFor({ timeout: 15000 });
  return { frame, result };
}

async function shoot(name, tool, args, check) {
  for (const theme of ["light", "dark"]) {
    for (const width of [400, 800]) {
      const { frame } = await show(tool, args, { theme, width });
      if (check) await check(frame);
      await page.locator("iframe").screenshot({ path: `${IMAGES}/mcp-app-${name}-${width}-${theme}.png` });
    }
  }
}

const device = () => agent.deviceId;
// The admin CLI's environment: none of the test's server settings.
const cliEnv = () => Object.fromEntries(Object.entries(process.env)
  .filter(([k]) => !/^(BREEZE_|MCP_|DATABASE_URL|REDIS_URL|APPS_)/.test(k)));

test("the extension is negotiated only with a client that declares it; results are identical", async () => {
  assert.ok(ui.init.capabilities.extensions?.[UI], "advertised to a client that declared it");
  assert.equal(plain.init.capabilities.extensions, undefined, "not advertised otherwise");
  const [withUi, without] = [await ui.call("tools/list", {}), await plain.call("tools/list", {})];
  for (const t of without.tools) assert.equal(t._meta?.ui, undefined, `${t.name} has no _meta.ui`);
  const named = withUi.tools.filter((t) => t._meta?.ui?.resourceUri).map((t) => t.name).sort();
  assert.deepEqual(named, ["analyze_metrics", "get_approval_status", "get_device_details",
    "get_vulnerability_exposure", "query_devices", "run_live_query"]);
  // Apart from _meta.ui, the listing is the same.
  const strip = (tools) => tools.map(({ _meta, ...t }) => { const { ui: _, ...m } = _meta || {}; return { ...t, _meta: m }; });
  assert.deepEqual(strip(withUi.tools), strip(without.tools));
  const resources = await plain.call("resources/list", {});
  assert.ok(resources.resources.every((r) => !r.uri.startsWith("ui://")), "no view resources without the extension");
  // The same call answers the same way either way (a device's stored facts; its live figures
  // may move between the two calls).
  const args = { deviceId: device() };
  const a = await ui.call("tools/call", { name: "get_device_details", arguments: args });
  const b = await plain.call("tools/call", { name: "get_device_details", arguments: args });
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort());
  assert.deepEqual(a._meta, b._meta, "no _meta.ui on results");
  assert.deepEqual(a.structuredContent.device.id, b.structuredContent.device.id);
  assert.deepEqual(Object.keys(a.structuredContent), Object.keys(b.structuredContent));
  assert.deepEqual(a.content.map((c) => c.type), b.content.map((c) => c.type));
});

// The audit records of `tool` called on the extension's connection (the host's and the views').
async function auditedOn(tool) {
  const r = await ui.call("tools/call", {
    name: "query_audit_log",
    arguments: { action: "mcp.tools.call", resourceType: "mcp", resourceId: tool, limit: 100, hoursBack: 1 },
  });
  return r.structuredContent.entries.filter((e) => e.details.session_id === ui.id).length;
}

const ANSWERS = "table[aria-label=\"Each device's answer\"]";

test("live query: rows under the question's columns, each device's answer asked through the bridge, audited", async () => {
  const question = { question: "packages", name: "bash" };
  const before = await auditedOn("run_live_query");
  const calls = bridged.length;
  const { frame, result } = await show("run_live_query", { action: "run", question, timeoutSecs: 30 });
  const q = result.structuredContent.query;
  assert.ok(q.answered >= 1, JSON.stringify(q));
  // A run's result names only the devices that stood out: the view asks for every answer.
  await frame.locator(`${ANSWERS} tbody tr`).first().waitFor();
  assert.deepEqual(bridged.slice(calls).map((c) => [c.name, c.arguments.action, c.arguments.queryId]),
    [["run_live_query", "results", q.queryId]]);
  const host = result.structuredContent.rows[0].hostname;
  await frame.locator(`${ANSWERS} tr`, { hasText: host }).locator(".s-answered").waitFor();
  // The table is headed by the question's row schema, in the catalogue's order.
  const heads = await frame.locator("table[aria-label=Rows] th").allTextContents();
  assert.deepEqual(heads.slice(0, 4), ["Device", "name", "version", "arch"]);
  const names = await frame.locator("table[aria-label=Rows] tbody td:nth-child(2)").allTextContents();
  assert.ok(names.includes("bash"), names.join(","));
  await frame.getByRole("searchbox", { name: "Filter rows" }).fill("no-such-package");
  await frame.getByText("No rows.").waitFor();
  assert.equal(await auditedOn("run_live_query"), before + 2, "the host's run and the view's results call");
  await shoot("live-query", "run_live_query", { action: "results", queryId: q.queryId }, async (f) => {
    await f.locator("table[aria-label=Rows] td", { hasText: /^bash$/ }).first().waitFor();
    await f.locator(`${ANSWERS} .s-answered`).first().waitFor();
  });
});

// The same synthetic OSV record as vulns.test.mjs (the same id and contents, so whichever suite
// imports it second finds it unchanged): `bash` as installed here, fixed one revision above.
const ADVISORY = "DEBIAN-CVE-2099-0001";
function importAdvisory() {
  const text = readFileSync("/etc/os-release", "utf8");
  const version = (text.match(/^VERSION_ID="?([^"\n]*)"?$/m) || [])[1] || "";
  const installed = execFileSync("dpkg-query", ["-W", "-f=${Version}", "bash"], { encoding: "utf8" }).trim();
  const record = {
    id: ADVISORY,
    summary: "bash: synthetic advisory for the browser suite",
    modified: "2099-01-01T00:00:00Z",
    published: "2099-01-01T00:00:00Z",
    severity: [{ type: "CVSS_V3", score: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H" }],
    upstream: ["CVE-2099-0001"],
    affected: [{
      package: { ecosystem: `Debian:${version.split(".")[0]}`, name: "bash" },
      ranges: [{ type: "ECOSYSTEM", events: [{ introduced: "0" }, { fixed: `${installed}+breeze1` }] }],
    }],
  };
  const dir = mkdtempSync(join(tmpdir(), "apps-"));
  writeFileSync(join(dir, `${ADVISORY}.json`), JSON.stringify(record));
  const out = execFileSync(process.env.BREEZE_BIN, ["advisories", "import", dir], {
    cwd: process.env.DEMO_DIR, env: cliEnv(), encoding: "utf8",
  });
  assert.match(out, /added 1|unchanged 1/, out);
  return installed;
}

test("vulnerability exposure: by severity, the advisory's CVE and device count; its devices asked through the bridge", async () => {
  const installed = importAdvisory();
  const summary = { action: "summary" };
  let listed;
  // The exposure is recomputed when the advisory lands (or the agent's next inventory).
  for (let i = 0; i < 60; i++) {
    const r = await plain.call("tools/call", { name: "get_vulnerability_exposure", arguments: summary });
    listed = (r.structuredContent.advisories || []).find((a) => a.id === ADVISORY);
    if (listed && listed.devices >= 1) break;
    await new Promise((done) => setTimeout(done, 1000));
  }
  assert.ok(listed && listed.devices >= 1, "the demo machine is exposed");
  const expand = async (frame) => {
    const row = frame.locator("table[aria-label=Advisories] tbody tr", { hasText: ADVISORY });
    assert.match(await row.first().textContent(), /CVE-2099-0001/);
    await frame.getByRole("button", { name: `Devices affected by ${ADVISORY}` }).click();
    await frame.locator(`table[aria-label="Devices affected by ${ADVISORY}"] tbody tr`).first().waitFor();
  };
  await shoot("vulnerability-summary", "get_vulnerability_exposure", summary, async (frame) => {
    const critical = frame.locator("ul[aria-label='Exposure by severity'] li", { hasText: "critical" });
    assert.match(await critical.textContent(), /[1-9]\d* devices? · [1-9]\d* advisor/);
    await expand(frame);
  });
  const { frame } = await show("get_vulnerability_exposure", summary);
  const calls = bridged.length;
  await expand(frame);
  assert.deepEqual(bridged.slice(calls).map((c) => [c.name, c.arguments.action, c.arguments.id]),
    [["get_vulnerability_exposure", "devices", ADVISORY]]);
  const devices = await frame.locator(`table[aria-label="Devices affected by ${ADVISORY}"]`).textContent();
  assert.ok(devices.includes(installed) && devices.includes(`${installed}+breeze1`), devices);
  assert.equal(await frame.getByRole("button", { name: `Devices affected by ${ADVISORY}` }).getAttribute("aria-expanded"), "true");
});

test("device card: the device's facts, last commands and its open alerts, asked through the bridge", async () => {
  await shoot("device-card", "get_device_details", { deviceId: device() }, async (frame) => {
    const d = await plain.call("tools/call", { name: "get_device_details", arguments: { deviceId: device() } });
    await frame.getByRole("heading", { name: d.structuredContent.device.hostname }).waitFor();
    // The live query above ran on this device: it is among its last commands, with its status.
    const last = frame.locator("ul[aria-label='Last commands'] li", { hasText: "live_query" }).first();
    await last.waitFor();
    assert.match(await last.locator(".badge").textContent(), /^(completed|running|sent|pending)$/);
    await frame.locator("ul[aria-label='Open alerts'] li:not(:has-text('Loading'))").first().waitFor();
  });
  assert.ok(bridged.some((c) => c.name === "manage_alerts"), "alerts came through the bridge");
});

test("metrics chart: a line drawn; the range switch calls analyze_metrics through the bridge, audited", async () => {
  // A day of hourly samples through the agents' own endpoint, so the chart has a shape.
  const now = Date.now();
  const samples = Array.from({ length: 24 }, (_, i) => ({
    at: new Date(now - (24 - i) * 3600e3).toISOString(),
    cpuPercent: 30 + 25 * Math.sin(i / 3), ramPercent: 55 + i / 2, ramUsedBytes: 1,
    disks: [], network: [], processCount: 100,
  }));
  const res = await fetch(`${BASE}/api/v1/agents/metrics`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${agent.token}` },
    body: JSON.stringify({ samples }),
  });
  assert.ok(res.ok, `metrics ${res.status}`);
  await shoot("metrics-chart", "analyze_metrics", { deviceId: device(), hoursBack: 24 }, async (frame) => {
    const line = frame.locator("polyline.series").first();
    await line.waitFor({ state: "attached" });
    assert.match((await line.getAttribute("points")) || "", /^\d+(\.\d)?,\d+(\.\d)?/, "a line of samples");
    assert.ok((await frame.locator("svg[role=img] title").textContent()).includes("CPU"));
  });
  const audited = async () => {
    const r = await ui.call("tools/call", {
      name: "query_audit_log",
      arguments: { action: "mcp.tools.call", resourceType: "mcp", resourceId: "analyze_metrics", limit: 100, hoursBack: 1 },
    });
    return r.structuredContent.entries.filter((e) => e.details.session_id === ui.id).length;
  };
  const before = await audited();
  const calls = bridged.length;
  const { frame } = await show("analyze_metrics", { deviceId: device(), hoursBack: 24 });
  await frame.getByRole("button", { name: "1 h" }).click();
  await frame.locator("button[data-hours='1'][aria-pressed=true]").waitFor();
  assert.deepEqual(bridged.slice(calls).map((c) => [c.name, c.arguments.hoursBack]), [["analyze_metrics", 1]]);
  // The record of the bridged call is in the audit log (the audit writer commits before answering).
  assert.equal(await audited(), before + 2, "the view's own call and the host's call were both audited");
});

test("device table: sorted by a header button, filtered by text", async () => {
  // More devices (the admin CLI on the demo's database), so there is something to sort.
  execFileSync(process.env.BREEZE_BIN, ["devices", "seed", "--org", ORG, "--count", "6"], {
    cwd: process.env.DEMO_DIR, env: cliEnv(), stdio: "ignore",
  });
  for (let i = 0; i < 100; i++) {
    const r = await plain.call("tools/call", { name: "query_devices", arguments: { limit: 50 } });
    if (r.structuredContent.total > 2) break;
    await new Promise((done) => setTimeout(done, 500));
  }
  await shoot("device-table", "query_devices", { limit: 50 }, async (frame) => {
    await frame.locator("tbody tr").first().waitFor();
  });
  const { frame, result } = await show("query_devices", { limit: 50 });
  const names = () => frame.locator("tbody tr td:first-child").allTextContents();
  const all = result.structuredContent.devices.map((d) => d.hostname);
  assert.deepEqual(await names(), [...all].sort((a, b) => a.localeCompare(b)));
  await frame.getByRole("button", { name: /Hostname/ }).click();
  assert.deepEqual(await names(), [...all].sort((a, b) => b.localeCompare(a)));
  assert.equal(await frame.locator("th[aria-sort=descending]").count(), 1);
  const one = all[0];
  await frame.getByRole("searchbox", { name: "Filter devices" }).fill(one);
  assert.ok((await names()).every((n) => n.toLowerCase().includes(one.toLowerCase())));
});

test("approval card: what, arguments, time left; a key cannot approve, the card sends a person to the dashboard", async () => {
  const name = `apps-${Date.now()}`;
  const stop = new AbortController();
  // A Tier 3 call that waits for a person (the demo waits 120 s); left waiting, then abandoned.
  const waiting = ui.call("tools/call", { name: "manage_groups", arguments: { action: "create", name } }, stop.signal)
    .catch(() => {});
  let id;
  for (let i = 0; i < 50 && !id; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const out = execFileSync(process.env.BREEZE_BIN, ["approvals", "list", "--org", ORG], {
      cwd: process.env.DEMO_DIR,
      env: cliEnv(),
      encoding: "utf8",
    });
    id = out.split("\n").filter((l) => l.includes("manage_groups")).map((l) => l.match(/[0-9a-f-]{36}/)?.[0]).filter(Boolean).pop();
  }
  assert.ok(id, "the pending request is listed");
  await shoot("approval-card", "get_approval_status", { approvalId: id }, async (frame) => {
    await frame.getByText(name).first().waitFor();
    await frame.getByRole("timer").waitFor();
  });
  const { frame } = await show("get_approval_status", { approvalId: id });
  const calls = bridged.length;
  await frame.getByRole("button", { name: "Approve…" }).click();
  await frame.getByRole("status").filter({ hasText: "dashboard" }).waitFor();
  assert.deepEqual(opened.slice(-1), [`${BASE}/approvals/${id}`], "the host was asked to open the dashboard page");
  assert.equal(bridged.length, calls, "the button called no tool as the connection's key");
  // The key behind this connection cannot approve by any door it holds.
  const rest = await fetch(`${BASE}/api/v1/approvals/${id}/approve`, {
    method: "POST", headers: { "x-api-key": KEY, "content-type": "application/json" }, body: "{}",
  });
  assert.ok([401, 403].includes(rest.status), `REST approve with a key: ${rest.status}`);
  const listed = await ui.call("tools/list", {});
  assert.ok(!listed.tools.some((t) => /approv|decide/.test(t.name) && t.name !== "get_approval_status"),
    "no MCP tool decides an approval");
  const status = await ui.call("tools/call", { name: "get_approval_status", arguments: { approvalId: id } });
  assert.equal(status.structuredContent.status, "pending");
  assert.equal(status.structuredContent.arguments.name, name, "the pinned arguments are shown");
  stop.abort();
  await waiting;
});

test("nothing left a view's frame, and no CSP violation or script error", () => {
  assert.deepEqual(escaped, []);
  assert.deepEqual(problems, []);
});
