#!/usr/bin/env node
// OAuth 2.1 end to end with the official MCP TypeScript SDK's OAuth client provider against a
// RUNNING Breeze started with MCP_OAUTH_ENABLED, OAUTH_DCR_ENABLED and OAUTH_DCR_ALLOW_ANONYMOUS:
// discovery (401 challenge → protected-resource and server metadata) → DCR → authorization
// (the consent is answered headless: sign in with the demo admin, post the consent form) →
// token → tools/list and a tool call → refresh (the SDK refreshes on a 401) → the user revokes
// the grant → 401 and the refresh fails ("Needs re-auth") → re-authorization works.
//
// Usage: node ts_oauth.mjs --demo-json PATH/breeze-data/demo.json [--label ts-oauth]
// Prints "PASS <label> <step>" / "FAIL <label> <step>: why" lines; exits 1 on any failure.

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import { consent as approve, signIn as signInAs } from './oauth_consent.mjs';

const { values: opts } = parseArgs({
  options: { 'demo-json': { type: 'string' }, label: { type: 'string', default: 'ts-oauth' } },
});
const demo = JSON.parse(readFileSync(opts['demo-json'], 'utf8'));
const mcpUrl = new URL(demo.mcp_url);
const base = mcpUrl.origin;
const REDIRECT = 'http://127.0.0.1:53682/callback';

let failed = 0;
const pass = (step) => console.log(`PASS ${opts.label} ${step}`);
const fail = (step, why) => {
  failed += 1;
  console.log(`FAIL ${opts.label} ${step}: ${why}`);
};

class Provider {
  constructor() {
    this.client = undefined;
    this.saved = undefined;
    this.verifier = undefined;
    this.authUrl = undefined;
  }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return {
      client_name: 'Breeze TS SDK OAuth test',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() { return this.client; }
  saveClientInformation(info) { this.client = info; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; }
  redirectToAuthorization(url) { this.authUrl = url; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
}

const signIn = () => signInAs(base, demo);

// Answers the consent page the SDK was sent to, as the signed-in user would: the code.
async function consent(authUrl, session) {
  const back = await approve(base, authUrl, session);
  if (back.origin + back.pathname !== REDIRECT) throw new Error(`redirected to ${back}`);
  return back.searchParams.get('code');
}

async function connected(provider) {
  const client = new Client({ name: 'breeze-ts-oauth', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider }));
  return client;
}

// Connect; on UnauthorizedError the SDK has registered and built the authorization URL.
async function authorize(provider, session) {
  const transport = new StreamableHTTPClientTransport(mcpUrl, { authProvider: provider });
  const client = new Client({ name: 'breeze-ts-oauth', version: '1.0.0' });
  try {
    await client.connect(transport);
    throw new Error('connected without authorizing');
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  if (!provider.authUrl) throw new Error('the SDK did not start an authorization');
  const code = await consent(provider.authUrl, session);
  await transport.finishAuth(code);
  return connected(provider);
}

async function step(name, fn) {
  try {
    await fn();
    pass(name);
    return true;
  } catch (e) {
    fail(name, e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : String(e));
    return false;
  }
}

const provider = new Provider();
let session;
let client;
await step('discovery-dcr-authorize-token', async () => {
  session = await signIn();
  client = await authorize(provider, session);
  if (!provider.client?.client_id?.startsWith('bzcl_')) throw new Error('no registered client');
  if (provider.client.client_secret) throw new Error('a public client got a secret');
  if (!provider.saved?.refresh_token) throw new Error('no refresh token');
});
await step('tools-list-and-call', async () => {
  const { tools } = await client.listTools();
  if (!tools.some((t) => t.name === 'query_devices')) throw new Error('query_devices not listed');
  const r = await client.callTool({ name: 'query_devices', arguments: {} });
  if (r.isError) throw new Error(`query_devices failed: ${JSON.stringify(r.content)}`);
  await client.close();
});
await step('refresh-on-401', async () => {
  const before = provider.saved.refresh_token;
  provider.saved = { ...provider.saved, access_token: 'expired.or.forged' };
  const c = await connected(provider);
  await c.listTools();
  await c.close();
  if (provider.saved.refresh_token === before) throw new Error('the refresh token did not rotate');
});
await step('revoke-then-401-then-reauth', async () => {
  const list = await (await fetch(`${base}/api/v1/oauth/grants`, { headers: { cookie: session } })).json();
  const grant = list.grants.find((g) => g.client_id === provider.client.client_id && g.state === 'Connected');
  if (!grant) throw new Error(`no Connected grant: ${JSON.stringify(list)}`);
  const del = await fetch(`${base}/api/v1/oauth/grants/${grant.id}`, { method: 'DELETE', headers: { cookie: session } });
  if (del.status !== 200) throw new Error(`revoke answered ${del.status}`);
  const raw = await fetch(mcpUrl, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${provider.saved.access_token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  if (raw.status !== 401) throw new Error(`a revoked grant's token got ${raw.status}`);
  provider.authUrl = undefined;
  let refused = false;
  try {
    const c = await connected(provider);
    const t = await c.listTools();
    throw new Error(`listed ${t.tools.length} tools; authUrl=${provider.authUrl}; tokens=${JSON.stringify(provider.saved).slice(0, 80)}`);
  } catch (e) {
    // The SDK's refresh is refused (InvalidGrantError) or it starts a new authorization.
    refused = e instanceof UnauthorizedError || /InvalidGrant|invalid_grant/.test(String(e));
  }
  if (!refused) throw new Error('connected after the grant was revoked');
  provider.saved = undefined;
  provider.authUrl = undefined;
  const again = await authorize(provider, session);
  const { tools } = await again.listTools();
  if (tools.length === 0) throw new Error('no tools after re-authorizing');
  await again.close();
});

console.log(`${opts.label}: ${4 - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
