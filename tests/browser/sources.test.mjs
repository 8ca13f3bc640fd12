// Tool Sources in a real browser (issue #52). The shared demo of .ci/browser.sh refuses private
// egress, as a deployment does, so this suite brings its own scene: a certificate authority
// made with openssl for this run, a small MCP server over https on a loopback port signed by it
// (Streamable HTTP answered with plain JSON, as the Rust tests' upstream does), and a second
// `breeze demo` (BREEZE_BIN, no agent) started with TOOL_SOURCES_ALLOW_PRIVATE_EGRESS=true and
// TOOL_SOURCES_EXTRA_ROOTS naming that CA: the setting tests use, never a weakened default.
// Then, as an administrator in Chromium: add the source, see its tools arrive disabled with
// their proposed tiers, enable all reads, test-call one and see its raw answer and duration,
// change a tier, change the upstream's definition, re-discover, and see "review needed".
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createServer as createHttps } from "node:https";
import { createServer as createNet } from "node:net";
import { mkdtempSync, readFileSync, writeFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openBrowser, shoot as shootAt } from "./lib.mjs";

const work = mkdtempSync(join(tmpdir(), "breeze-sources-"));

/** A CA of this run and a certificate it signed for 127.0.0.1 and localhost. */
function makeCa() {
  const ssl = (...args) => execFileSync("openssl", args, { cwd: work, stdio: "pipe" });
  ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=Breeze browser test CA",
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost");
  writeFileSync(join(work, "leaf.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n" +
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n");
  ssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext");
}

// The upstream's tools; a test changes one between discoveries.
const tools = [
  { name: "search", description: "Search the runbooks", read: true },
  { name: "lookup", description: "Look up one runbook", read: true },
  { name: "purge", description: "Delete every runbook", read: false },
];
const definition = (t) => ({
  name: t.name,
  description: t.description,
  inputSchema: { type: "object", properties: { q: { type: "string" } } },
  annotations: { readOnlyHint: t.read, destructiveHint: !t.read },
});
const calls = [];

/** The MCP server: initialize, tools/list, tools/call (echoing), as plain JSON answers. */
function startUpstream() {
  const server = createHttps({ key: readFileSync(join(work, "leaf.key")), cert: readFileSync(join(work, "leaf.pem")) },
    (req, res) => {
      if (req.method !== "POST" || req.url !== "/mcp") {
        res.writeHead(405).end();
        return;
      }
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        let msg;
        try { msg = JSON.parse(body); } catch { res.writeHead(400).end(); return; }
        const reply = (result) => {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }));
        };
        switch (msg.method) {
          case "initialize":
            return reply({
              protocolVersion: msg.params?.protocolVersion ?? "2025-06-18",
              capabilities: { tools: {} },
              serverInfo: { name: "runbooks", version: "1" },
            });
          case "tools/list":
            return reply({ tools: tools.map(definition) });
          case "tools/call":
            calls.push(msg.params);
            return reply({
              content: [{ type: "text", text: `${msg.params.name} ran` }],
              structuredContent: { tool: msg.params.name, arguments: msg.params.arguments },
            });
          default:
            if (msg.id === undefined) { res.writeHead(202).end(); return; }
            res.writeHead(200, { "content-type": "application/json" });
            res.end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } }));
        }
      });
    });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function freePort() {
  return new Promise((resolve) => {
    const s = createNet().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let upstream, breeze, base, admin, org, b, page;
const demoDir = join(work, "demo");

before(async () => {
  makeCa();
  upstream = await startUpstream();
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  execFileSync("mkdir", ["-p", demoDir]);
  breeze = spawn(process.env.BREEZE_BIN, ["demo", "--listen", `127.0.0.1:${port}`], {
    cwd: demoDir,
    // Only what this demo needs: none of the shared demo's settings.
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME ?? demoDir,
      BREEZE_LOG: "warn",
      BREEZE_DEMO_AGENT: "false",
      TOOL_SOURCES_ALLOW_PRIVATE_EGRESS: "true",
      TOOL_SOURCES_EXTRA_ROOTS: join(work, "ca.pem"),
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  breeze.stderr.on("data", (c) => (log += c));
  const demoJson = join(demoDir, "breeze-data/demo.json");
  for (let i = 0; ; i++) {
    assert.ok(i < 300 && breeze.exitCode === null, `the sources demo did not start: ${log}`);
    const up = await fetch(`${base}/healthz`).then((r) => r.ok, () => false);
    if (up && existsSync(demoJson)) break;
    await sleep(200);
  }
  const demo = JSON.parse(readFileSync(demoJson, "utf8"));
  admin = demo.admin;
  org = demo.organization.slug;
  b = await openBrowser({ acceptDialogs: true });
  page = b.page;
});

after(async () => {
  await b?.browser.close();
  upstream?.close();
  if (breeze && breeze.exitCode === null) {
    breeze.kill("SIGTERM");
    await new Promise((r) => breeze.once("exit", r));
  }
  if (!process.env.BROWSER_KEEP_TMP) rmSync(work, { recursive: true, force: true });
});

const shoot = (name) => shootAt(page, `sources-${name}`);
const row = (name) => page.locator(`#t-${name}`);
const sources = () => `${base}/o/${org}/ai/tool-sources`;

/** Reloads the source's page until `check` holds (discovery runs in the server's worker). */
async function reloadUntil(label, check) {
  for (let i = 0; i < 60; i++) {
    if (await check()) return;
    await sleep(500);
    await page.reload();
  }
  assert.fail(`${label} did not happen within 30 s`);
}

test("sign in to the demo that may reach the local upstream", async () => {
  await page.goto(`${sources()}`);
  assert.match(page.url(), /\/login\?next=/);
  await page.fill("#email", admin.email);
  await page.fill("#password", admin.password);
  await page.click("button[type=submit]");
  await page.waitForURL(sources());
  await page.locator("#no-sources").waitFor();
  b.noProblems();
});

let sourceUrl;
test("a source is added and its tools arrive disabled with their proposed tiers", async () => {
  await page.goto(`${sources()}/new`);
  await page.fill("#display-name", "Runbooks");
  // The slug is derived from the name unless changed.
  await page.fill("#url", `https://127.0.0.1:${upstream.address().port}/mcp`);
  await page.click("button[type=submit].primary");
  await page.waitForURL(/\?created=1/);
  sourceUrl = page.url().split("?")[0];
  await page.locator("#notice", { hasText: "discovery is queued" }).waitFor();
  await reloadUntil("discovery", async () => (await page.locator("#tools").count()) > 0);
  assert.equal(await page.locator("#state").textContent(), "active");
  for (const [name, proposed] of [["search", 1], ["lookup", 1], ["purge", 3]]) {
    const r = row(name);
    assert.equal(await r.locator("code").first().textContent(), `runbooks__${name}`);
    assert.equal((await r.locator("td[data-label=Proposed]").textContent()).trim(), `Tier ${proposed}`);
    assert.equal(await r.locator("select[name=tier]").inputValue(), String(proposed));
    assert.equal(await r.locator(".state-off").textContent(), "disabled");
  }
  // Only Tier 1 tools can be test-called.
  assert.equal(await row("purge").locator("button.test").count(), 0);
  await shoot("discovered");
  b.noProblems();
});

test("enable all reads turns on the Tier 1 tools only", async () => {
  await page.click("#enable-reads");
  await page.waitForURL(/done=switch/);
  await page.locator("#notice", { hasText: "Tools switched." }).waitFor();
  for (const name of ["search", "lookup"]) {
    assert.equal(await row(name).locator(".state-on").textContent(), "enabled", name);
  }
  assert.equal(await row("purge").locator(".state-off").textContent(), "disabled");
  b.noProblems();
});

test("a Tier 1 tool is test-called for real and its raw answer and time shown", async () => {
  await row("search").locator("textarea[name=arguments]").fill('{"q": "vpn reset"}');
  await row("search").locator("button.test").click();
  await page.locator("#test-result").waitFor();
  const raw = await page.locator("#test-raw").textContent();
  assert.match(raw, /search ran/);
  assert.match(raw, /vpn reset/);
  assert.match(await page.locator("#test-duration").textContent(), /^\d+$/);
  // The upstream received the call as typed.
  assert.equal(calls.at(-1).name, "search");
  assert.deepEqual(calls.at(-1).arguments, { q: "vpn reset" });
  await shoot("tested");
  b.noProblems();
});

test("a tier is changed by a person and sticks", async () => {
  await page.goto(sourceUrl);
  await row("purge").locator("select[name=tier]").selectOption("2");
  await row("purge").locator("button.set-tier").click();
  await page.waitForURL(/done=tool/);
  assert.equal(await row("purge").locator("select[name=tier]").inputValue(), "2");
  await row("purge").locator("text=set by a person").waitFor();
  // Still disabled: setting a tier does not enable a tool.
  assert.equal(await row("purge").locator(".state-off").textContent(), "disabled");
  b.noProblems();
});

test("after the upstream changed a definition, re-discovery flags it for review", async () => {
  tools[0].description = "Search the runbooks and delete what matches";
  await page.click("#rediscover");
  await page.waitForURL(/done=discover/);
  await reloadUntil("review needed on search", async () =>
    (await row("search").locator(".flags", { hasText: "review needed" }).count()) > 0);
  // Only the changed tool, and it keeps working at its tier until a person sets it again.
  assert.equal(await row("lookup").locator(".flags", { hasText: "review needed" }).count(), 0);
  assert.equal(await row("search").locator(".state-on").textContent(), "enabled");
  // The tier a person chose survives re-discovery.
  assert.equal(await row("purge").locator("select[name=tier]").inputValue(), "2");
  await shoot("review-needed");
  // Setting its tier again clears the flag.
  await row("search").locator("button.set-tier").click();
  await page.waitForURL(/done=tool/);
  assert.equal(await row("search").locator(".flags", { hasText: "review needed" }).count(), 0);
  b.noProblems();
});
