// The dashboard in a real browser: headless Debian Chromium driven by playwright-core against a
// running `breeze demo` (started by .ci/browser.sh, which passes BREEZE_URL, DEMO_JSON and
// AGENT_JSON). Every page is also screenshotted at 1280 px and 390 px into SCREENSHOTS, and
// every page load is checked for CSP violations and script errors.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, mkdirSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chromium } from "playwright-core";

const BASE = process.env.BREEZE_URL;
const demo = JSON.parse(readFileSync(process.env.DEMO_JSON, "utf8"));
const agent = JSON.parse(readFileSync(process.env.AGENT_JSON, "utf8"));
const SHOTS = process.env.SCREENSHOTS || "target/screenshots";
const ORG = demo.organization.slug;
mkdirSync(SHOTS, { recursive: true });

let browser, context, page;
const problems = [];
const timings = [];

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox"],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
  page = await context.newPage();
  // Script errors and CSP violations ("Refused to …"); an HTTP error status the test asked
  // for (a wrong password's 401, a 404) is logged as "Failed to load resource" and is no problem.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
      problems.push(`console: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => d.accept());
  page.on("response", async (r) => {
    if (r.request().resourceType() === "document") {
      const t = r.request().timing();
      const body = await r.body().catch(() => Buffer.alloc(0));
      timings.push({ url: r.url().replace(BASE, ""), status: r.status(), bytes: body.length, ms: Math.round(t.responseEnd) });
    }
  });
});

after(async () => {
  await browser?.close();
  for (const t of timings) console.log(`page ${t.status} ${t.bytes} B ${t.ms} ms ${t.url}`);
});

async function shoot(name) {
  await page.screenshot({ path: `${SHOTS}/${name}-1280.png`, fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${SHOTS}/${name}-390.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
}

function noProblems() {
  assert.deepEqual(problems, [], "no CSP violation or script error");
}

// ---- MCP over Streamable HTTP (a real client's requests) ---------------------------------------
// `key` is an API key, or `{ bearer: TOKEN }` for an OAuth access token.
async function rpc(key, body, session) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (typeof key === "string") headers["x-api-key"] = key;
  else headers.authorization = `Bearer ${key.bearer}`;
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

async function mcpSession(key) {
  const init = await rpc(key, {
    jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "browser-test", version: "1" } },
  });
  if (init.status !== 200) return { status: init.status };
  await rpc(key, { jsonrpc: "2.0", method: "notifications/initialized" }, init.session);
  return { status: 200, session: init.session };
}

function callTool(key, session, name, args) {
  return rpc(key, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name, arguments: args } }, session);
}

// ---- the tests --------------------------------------------------------------------------------
test("sign in through next, the MCP card on the sign-in page", async () => {
  await page.goto(`${BASE}/o/${ORG}/settings/api-keys`);
  assert.match(page.url(), /\/login\?next=%2Fo%2F/);
  assert.equal(await page.locator("#mcp-url").textContent(), `${BASE}/mcp`);
  await page.click("button[data-copy=mcp-url]");
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), `${BASE}/mcp`);
  await shoot("login");
  await page.fill("#email", demo.admin.email);
  await page.fill("#password", "wrong password");
  await page.click("button[type=submit]");
  assert.match(await page.locator("#login-error").textContent(), /Invalid email or password/);
  await page.fill("#password", demo.admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(`${BASE}/o/${ORG}/settings/api-keys`);
  noProblems();
});

test("create an API key, see it once, copy it, revoke it and see MCP refuse it", async () => {
  await page.fill("#key-name", "browser test key");
  await page.check("input[value='ai:read']");
  await page.click("form[action$='/settings/api-keys'] button[type=submit]");
  const secret = (await page.locator("#secret").textContent()).trim();
  assert.match(secret, /^brz_[A-Za-z0-9_-]{43}$/);
  await shoot("api-key-created");
  await page.click("button[data-copy=secret]");
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);
  assert.equal((await mcpSession(secret)).status, 200, "MCP accepts the new key");
  await page.goto(`${BASE}/o/${ORG}/settings/api-keys`);
  assert.equal(await page.locator("#secret").count(), 0);
  assert.ok(!(await page.content()).includes(secret), "the secret is never shown again");
  await shoot("api-keys");
  const row = page.locator("tr", { hasText: "browser test key" });
  await row.locator("button", { hasText: "Revoke" }).click();
  await page.waitForLoadState("load");
  await row.locator(".badge", { hasText: "revoked" }).waitFor();
  assert.equal((await mcpSession(secret)).status, 401, "MCP refuses the revoked key");
  noProblems();
});

test("approve a pending Tier 3 MCP call and see it complete; deny one and see the error", async () => {
  const key = demo.api_keys.execute;
  const { session } = await mcpSession(key);
  const name = `browser-${Date.now()}`;
  const call = callTool(key, session, "manage_groups", { action: "create", name });
  await page.goto(`${BASE}/o/${ORG}/approvals`);
  const card = page.locator("article.approval", { hasText: name });
  // The live list (SSE event, or the 15 s poll) brings it in without a reload.
  await card.waitFor({ timeout: 30000 });
  await shoot("approvals");
  await page.setViewportSize({ width: 390, height: 844 });
  await card.locator("textarea").fill("looks right");
  await card.locator("button[value=approve]").click();
  await page.waitForURL(/decided=/);
  await page.setViewportSize({ width: 1280, height: 900 });
  const done = await call;
  assert.equal(done.status, 200);
  assert.notEqual(done.json.result?.isError, true, JSON.stringify(done.json));
  await page.locator("#decided", { hasText: "looks right" }).waitFor();

  const denied = `browser-denied-${Date.now()}`;
  const call2 = callTool(key, session, "manage_groups", { action: "create", name: denied });
  await page.goto(`${BASE}/o/${ORG}/approvals`);
  const card2 = page.locator("article.approval", { hasText: denied });
  await card2.waitFor({ timeout: 30000 });
  await card2.locator("textarea").fill("not now");
  await card2.locator("button[value=deny]").click();
  await page.waitForURL(/decided=/);
  const refused = await call2;
  const text = JSON.stringify(refused.json);
  assert.ok(refused.json.result?.isError === true || refused.json.error, text);
  assert.match(text, /denied/);
  assert.match(text, /not now/);
  noProblems();
});

test("the device list updates live when devices are added", async () => {
  await page.goto(`${BASE}/o/${ORG}/devices`);
  await shoot("devices");
  const count = (await page.locator("#device-count").textContent()).trim();
  // Another process (the admin CLI on the demo's database) adds devices: the page's 'devices'
  // event reloads the rows, count and pager in place.
  execFileSync(process.env.BREEZE_BIN, ["devices", "seed", "--org", ORG, "--count", "3"], {
    cwd: process.env.DEMO_DIR,
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(BREEZE_|MCP_|DATABASE_URL|REDIS_URL)/.test(k))),
    stdio: "ignore",
  });
  await page.waitForFunction(
    (before) => document.querySelector("#device-count")?.textContent.trim() !== before,
    count,
    { timeout: 40000 },
  );
  assert.equal(new URL(page.url()).pathname, `/o/${ORG}/devices`, "no navigation");
  noProblems();
});

test("the demo machine's device page: chart SVG that gains a point; another organization's URL is 404", async () => {
  await page.goto(`${BASE}/o/${ORG}/devices`);
  const device = agent.deviceId;
  await page.click(`a[href='/o/${ORG}/devices/${device}']`);
  await page.locator("#chart-cpu svg.chart").waitFor();
  await shoot("device");
  const before = Number(await page.locator("#chart-cpu").getAttribute("data-points"));
  // A sample through the agents' own endpoint, as the agent sends them.
  const res = await fetch(`${BASE}/api/v1/agents/metrics`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${agent.token}` },
    body: JSON.stringify({ samples: [{ at: new Date().toISOString(), cpuPercent: 42.5, ramPercent: 50, ramUsedBytes: 1, disks: [], network: [], processCount: 1 }] }),
  });
  assert.ok(res.ok, `metrics ${res.status}`);
  // The page's live 'metrics' event reloads the charts: no navigation.
  await page.waitForFunction(
    (n) => Number(document.querySelector("#chart-cpu")?.getAttribute("data-points")) > n,
    before,
    { timeout: 40000 },
  );
  // The demo's second organization: the admin belongs to it too (it is in the switcher), but
  // the demo machine is not its device, so the URL answers 404 like a missing one.
  const other = "globex";
  assert.equal(await page.locator(`.switcher a[href^='/o/${other}']`).count(), 1);
  const r = await page.goto(`${BASE}/o/${other}/devices/${device}`);
  assert.equal(r.status(), 404);
  await shoot("not-found");
  noProblems();
});

test("connected apps: an OAuth client's grant is listed, revoked, and its token refused", async () => {
  // A client registers (anonymous DCR), the person allows it on the consent page, the client
  // exchanges the code (PKCE) and uses MCP with the token.
  const REDIRECT = "http://127.0.0.1:53682/callback";
  const reg = await fetch(`${BASE}/oauth/reg`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "Browser test app", redirect_uris: [REDIRECT], grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"], token_endpoint_auth_method: "none",
    }),
  });
  assert.equal(reg.status, 201, await reg.clone().text());
  const clientId = (await reg.json()).client_id;
  const verifier = randomBytes(32).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  const auth = new URL(`${BASE}/oauth/auth`);
  for (const [k, v] of Object.entries({
    response_type: "code", client_id: clientId, redirect_uri: REDIRECT, code_challenge: challenge,
    code_challenge_method: "S256", scope: "mcp:read", resource: demo.mcp_url, state: "s1",
  })) auth.searchParams.set(k, v);
  // The consent page, as the signed-in person sees it.
  await page.goto(auth.toString());
  await page.locator("h1", { hasText: "Browser test app" }).waitFor();
  await shoot("consent");
  // The person allows it in the browser; the redirect to the client's loopback callback is
  // caught here (nothing listens there), as a native client's local listener would.
  let callback;
  await page.route("http://127.0.0.1:53682/**", (route) => {
    callback = new URL(route.request().url());
    return route.fulfill({ status: 200, contentType: "text/plain", body: "signed in" });
  });
  await page.locator("button", { hasText: "Allow" }).click();
  await page.waitForURL(/127\.0\.0\.1:53682\/callback/);
  await page.unroute("http://127.0.0.1:53682/**");
  assert.equal(callback.searchParams.get("state"), "s1");
  const code = callback.searchParams.get("code");
  assert.ok(code, "the code came back to the client");
  const tok = await fetch(`${BASE}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code", code, redirect_uri: REDIRECT, client_id: clientId,
      code_verifier: verifier, resource: demo.mcp_url,
    }).toString(),
  });
  assert.equal(tok.status, 200, await tok.clone().text());
  const bearer = { bearer: (await tok.json()).access_token };
  assert.equal((await mcpSession(bearer)).status, 200, "MCP accepts the token");

  await page.goto(`${BASE}/o/${ORG}/settings/apps`);
  const row = page.locator("#grants tr", { hasText: "Browser test app" });
  await row.waitFor();
  assert.match(await row.textContent(), /127\.0\.0\.1:53682/);
  assert.match(await row.textContent(), /mcp:read/);
  await row.locator(".badge", { hasText: "Connected" }).waitFor();
  await shoot("apps");
  await row.locator("button", { hasText: "Revoke" }).click();
  await page.waitForLoadState("load");
  await row.locator(".badge", { hasText: "Revoked" }).waitFor();
  assert.equal(await row.locator("button", { hasText: "Revoke" }).count(), 0);
  assert.equal((await mcpSession(bearer)).status, 401, "MCP refuses the revoked grant's token");
  noProblems();
});

test("every other page renders at both widths", async () => {
  for (const [name, path] of [
    ["overview", `/o/${ORG}`],
    ["mcp", `/o/${ORG}/settings/mcp`],
    ["audit", `/o/${ORG}/audit?action=mcp.`],
  ]) {
    const r = await page.goto(`${BASE}${path}`);
    assert.equal(r.status(), 200, path);
    await shoot(name);
  }
  // Sign out (a CSRF-protected form) ends the session.
  await page.click("form[action='/logout'] button");
  await page.waitForURL(/\/login/);
  const r = await page.goto(`${BASE}/o/${ORG}`);
  assert.match(page.url(), /\/login\?next=/);
  assert.equal(r.status(), 200);
  noProblems();
});
