#!/usr/bin/env node
// mcp-remote — the stdio bridge that stdio-only clients (Claude Desktop's config, older
// editors) use to reach a remote MCP server — against a RUNNING Breeze with MCP_OAUTH_ENABLED,
// OAUTH_DCR_ENABLED and OAUTH_DCR_ALLOW_ANONYMOUS, run as a user's config runs it
// (`mcp-remote <url>`), driven over stdio by the official TypeScript SDK's client:
//
//   --expect refused   mcp-remote's registration names a software_id, which Breeze refuses by
//                      default: mcp-remote stops, and what it shows names the setting that
//                      accepts it (OAUTH_DCR_IGNORE_SOFTWARE_ID).
//   --expect accepted  (server started with OAUTH_DCR_IGNORE_SOFTWARE_ID=true) the whole flow:
//                      discovery → DCR → the browser (BROWSER points at a no-op; the consent
//                      is answered headless from the URL mcp-remote prints) → its callback
//                      server → token → tools/list and a tool call through the bridge; then a
//                      second start signs in from the tokens mcp-remote stored, with no browser.
//
// Usage: node mcp_remote.mjs --demo-json PATH --mcp-remote PATH/dist/proxy.js
//          --expect refused|accepted --label pinned|latest
// Prints "PASS mcp-remote-<label> <step>" / "FAIL …: why" lines; exits 1 on any failure.

import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { consent, signIn } from './oauth_consent.mjs';

const { values: opts } = parseArgs({
  options: {
    'demo-json': { type: 'string' },
    'mcp-remote': { type: 'string' },
    expect: { type: 'string' },
    label: { type: 'string', default: 'pinned' },
  },
});
const demo = JSON.parse(readFileSync(opts['demo-json'], 'utf8'));
const base = new URL(demo.mcp_url).origin;
const name = `mcp-remote-${opts.label}`;
const configDir = mkdtempSync(join(tmpdir(), 'breeze-mcp-remote-'));

let failed = 0;
let passed = 0;
async function step(title, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`PASS ${name} ${title}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name} ${title}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : String(e)}`);
  }
}

const freePort = () => new Promise((resolve, reject) => {
  const s = createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

/**
 * Starts mcp-remote as a client config would and connects the SDK's client to it over stdio.
 * `onAuthorize(url)` answers the browser when mcp-remote asks for one. Resolves to the
 * connected client, or rejects with mcp-remote's output in the error.
 */
async function bridge(port, onAuthorize) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [opts['mcp-remote'], demo.mcp_url, String(port)],
    env: {
      PATH: process.env.PATH,
      HOME: configDir,
      MCP_REMOTE_CONFIG_DIR: configDir,
      // xdg-open runs $BROWSER when no desktop is found: the "browser" opens nothing, and the
      // person's part is played from the URL mcp-remote prints.
      BROWSER: 'true',
    },
    stderr: 'pipe',
  });
  let output = '';
  let asked = false;
  let authorizing = Promise.resolve();
  transport.stderr.on('data', (chunk) => {
    output += chunk.toString();
    const m = output.match(/Please authorize this client by visiting:\s*\n(\S+)/);
    if (m && !asked) {
      asked = true;
      authorizing = onAuthorize(m[1]);
    }
  });
  const client = new Client({ name: 'breeze-mcp-remote-test', version: '1.0.0' });
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('not connected within 60 s')), 60_000).unref());
  try {
    await Promise.race([client.connect(transport), timeout]);
    await authorizing;
  } catch (e) {
    await transport.close().catch(() => {});
    const err = new Error(`${e.message}; mcp-remote said: ${output.slice(-1500)}`);
    err.output = output;
    throw err;
  }
  return { client, output: () => output, asked: () => asked };
}

const noBrowser = async (url) => { throw new Error(`asked for a browser: ${url}`); };

if (opts.expect === 'refused') {
  await step('registration-refused-naming-the-setting', async () => {
    let connected;
    try {
      connected = await bridge(await freePort(), noBrowser);
    } catch (e) {
      if (!e.output || !e.output.includes('OAUTH_DCR_IGNORE_SOFTWARE_ID')) throw e;
      if (!/software_id/.test(e.output)) throw new Error(`the refusal does not name software_id: ${e.output.slice(-800)}`);
      return;
    }
    await connected.client.close();
    throw new Error('mcp-remote connected although its software_id registration should be refused');
  });
} else if (opts.expect === 'accepted') {
  const port = await freePort();
  const session = await signIn(base, demo);
  let callback;
  await step('discovery-dcr-browser-callback-token', async () => {
    const { client, asked } = await bridge(port, async (url) => {
      const back = await consent(base, url, session);
      if (back.port !== String(port) || back.pathname !== '/oauth/callback') throw new Error(`redirected to ${back}`);
      callback = back;
      // The browser following the redirect to mcp-remote's callback server.
      const r = await fetch(back);
      if (r.status !== 200) throw new Error(`mcp-remote's callback answered ${r.status}`);
    });
    if (!asked()) throw new Error('mcp-remote never asked for a browser');
    const { tools } = await client.listTools();
    if (!tools.some((t) => t.name === 'query_devices')) throw new Error(`query_devices not listed (${tools.length} tools)`);
    const r = await client.callTool({ name: 'query_devices', arguments: {} });
    if (r.isError) throw new Error(`query_devices failed: ${JSON.stringify(r.content).slice(0, 300)}`);
    await client.close();
  });
  await step('registered-client-and-grant-listed', async () => {
    const list = await (await fetch(`${base}/api/v1/oauth/grants`, { headers: { cookie: session } })).json();
    const grant = list.grants.find((g) => g.state === 'Connected' && /MCP CLI Proxy|mcp-remote/i.test(g.client_name || ''));
    if (!grant) throw new Error(`no Connected grant for mcp-remote: ${JSON.stringify(list).slice(0, 400)}`);
    if (JSON.stringify(grant).includes('software_id')) throw new Error('the ignored software_id is shown');
    if (!callback) throw new Error('no callback seen');
  });
  await step('second-start-reuses-stored-tokens', async () => {
    const { client, asked } = await bridge(port, noBrowser);
    if (asked()) throw new Error('asked to authorize again');
    const { tools } = await client.listTools();
    if (tools.length === 0) throw new Error('no tools');
    await client.close();
  });
} else {
  console.log(`usage: --expect refused|accepted (got ${opts.expect})`);
  process.exit(2);
}

console.log(`${name}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
