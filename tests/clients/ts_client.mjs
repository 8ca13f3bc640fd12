#!/usr/bin/env node
// Drives a RUNNING Breeze with the official MCP TypeScript SDK (@modelcontextprotocol/sdk)
// over all three client transports: legacy HTTP+SSE, Streamable HTTP and stdio (through
// `breeze mcp stdio`).
//
// Usage: node ts_client.mjs --demo-json PATH/breeze-data/demo.json --breeze-bin PATH/breeze
//                           [--only sse,http,stdio]
//
// Prints one "PASS ts <transport>" line per transport, or "FAIL ts <transport>" followed by every
// failed check of that transport, then "ts: N passed, N failed"; exits 1 when any check failed.

import { isDeepStrictEqual } from 'node:util';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const { values: opts } = parseArgs({
  options: {
    'demo-json': { type: 'string' },
    'breeze-bin': { type: 'string' },
    only: { type: 'string', default: 'sse,http,stdio,consolidated-http,consolidated-stdio' },
  },
});
if (!opts['demo-json']) {
  console.error('usage: node ts_client.mjs --demo-json PATH --breeze-bin PATH [--only sse,http,stdio]');
  process.exit(2);
}
const demo = JSON.parse(readFileSync(opts['demo-json'], 'utf8'));

const SERVER_NAME = 'breeze-rmm';
// The tools each key should see, from the binary's own registry (`breeze mcp tools --json`),
// not from a list kept here: every tool with a Tier 1 call (read), and those whose lowest call
// is Tier 2 (write). A new tool is expected without anyone editing this file.
if (!opts['breeze-bin']) {
  console.error('ts_client.mjs needs --breeze-bin (the expected tool lists come from its registry)');
  process.exit(2);
}
const REGISTRY = JSON.parse(
  execFileSync(opts['breeze-bin'], ['mcp', 'tools', '--json'], { encoding: 'utf8' }),
).tools;
const lowestTier = (t) => Math.min(...t.tiers);
const READ_TOOLS = REGISTRY.filter((t) => lowestTier(t) === 1).map((t) => t.name).sort();
const WRITE_ONLY_TOOLS = REGISTRY.filter((t) => lowestTier(t) === 2).map((t) => t.name).sort();
const WRITE_TOOLS = [...READ_TOOLS, ...WRITE_ONLY_TOOLS].sort();
const SCOPE_ERROR = 'Tool "set_device_context" requires ai:write scope';
const UNKNOWN_ID = '0190c0de-0000-7000-8000-000000000000';

/**
 * Arguments of one call of every tool, for the execute key on the demo's local device `d`.
 * Tier 3 calls answer "pending approval" at once (clients.sh runs the demo with
 * MCP_APPROVAL_WAIT_SECONDS=0); a few calls are errors on purpose (unknown ids). A listed tool
 * missing here is called with arguments made from its input schema (synthesizeArgs).
 */
/**
 * Arguments for a tool the table above does not know, made from its listed input schema: its
 * lowest-tier action (from the registry), and for every other required property the first enum
 * value, the demo device for a device id, an unknown id for other ids, the smallest valid
 * string or number. The call may well fail (an unknown id); what is checked is that its result,
 * error or not, is what the SDK validates against the tool's outputSchema.
 */
function synthesizeArgs(name, schema, d) {
  const tool = REGISTRY.find((t) => t.name === name);
  const action = tool?.actions?.length
    ? [...tool.actions].sort((a, b) => a.tier - b.tier)[0].name
    : undefined;
  const resolve = (s) => {
    const ref = s?.$ref;
    if (!ref) return s ?? {};
    const path = ref.replace(/^#\//, '').split('/');
    return resolve(path.reduce((o, k) => o?.[k], schema));
  };
  const value = (key, s0) => {
    const s = resolve(s0);
    if (s.const !== undefined) return s.const;
    if (Array.isArray(s.enum)) return s.enum[0];
    for (const alt of s.oneOf ?? s.anyOf ?? []) {
      const r = resolve(alt);
      if (r.type !== 'null') return value(key, r);
    }
    const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
    const isId = /id$/i.test(key) || s.format === 'uuid';
    switch (type) {
      case 'string':
        if (isId) return /^deviceId$/i.test(key) ? d : UNKNOWN_ID;
        return 'x'.repeat(Math.max(1, s.minLength ?? 1));
      case 'integer':
      case 'number':
        return s.minimum ?? 1;
      case 'boolean':
        return false;
      case 'array':
        return /^deviceIds$/i.test(key) ? [d] : Array.from({ length: s.minItems ?? 0 }, () => value(key.replace(/s$/, ''), s.items));
      case 'object':
      default:
        return object(s);
    }
  };
  const object = (s, top = false) => {
    const props = s.properties ?? {};
    const required = s.required ?? [];
    const out = {};
    if (top && action && props.action) out.action = action;
    for (const k of required) if (!(k in out)) out[k] = value(k, props[k]);
    return out;
  };
  return object(resolve(schema), true);
}

function everyToolArgs(d) {
  return {
    analyze_disk_usage: { deviceId: d, refresh: true, path: '/tmp', topFiles: 5 },
    analyze_metrics: { deviceId: d },
    apply_configuration_policy: { configPolicyId: UNKNOWN_ID, level: 'device', targetId: d },
    disk_cleanup: { deviceId: d, action: 'preview' },
    execute_command: { deviceId: d, commandType: 'list_processes', payload: { limit: 3 } },
    file_operations: { deviceId: d, action: 'list', path: '/tmp' },
    generate_report: { action: 'history', limit: 5 },
    get_active_users: {},
    get_approval_status: { approvalId: UNKNOWN_ID },
    get_device_context: { deviceId: d },
    get_device_details: { deviceId: d },
    get_device_software: { deviceId: d, name: 'lib', limit: 5 },
    get_effective_configuration: { deviceId: d },
    get_user_experience_metrics: {},
    list_configuration_policies: {},
    manage_alert_rules: { action: 'test', condition: { kind: 'metric', metric: 'cpu', comparison: 'above', threshold: 90, durationMinutes: 5 } },
    manage_alerts: { action: 'list', status: 'active' },
    manage_automations: { action: 'list' },
    manage_groups: { action: 'list' },
    manage_maintenance_windows: { action: 'active_now', target: { type: 'device', deviceId: d } },
    manage_services: { deviceId: d, action: 'list' },
    network_discovery: { deviceId: d, subnet: '127.0.0.0/30', scanType: 'ping' },
    preview_configuration_change: { deviceId: d, remove: [UNKNOWN_ID] },
    query_audit_log: { limit: 5 },
    query_devices: {},
    remove_configuration_policy_assignment: { assignmentId: UNKNOWN_ID },
    resolve_device_context: { contextId: UNKNOWN_ID },
    run_script: { scriptId: UNKNOWN_ID, deviceIds: [d] },
    search_agent_logs: { limit: 5 },
    set_agent_log_level: { deviceId: d, level: 'info', durationMinutes: 1 },
    set_device_context: { deviceId: d, contextType: 'followup', summary: 'written by the TS client test' },
  };
}
const PER_REQUEST_TIMEOUT_MS = 20_000;

class CheckFailed extends Error {}

function check(cond, msg) {
  if (!cond) throw new CheckFailed(msg);
}
function sameList(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
function show(v) {
  const s = JSON.stringify(v);
  return s && s.length > 600 ? `${s.slice(0, 600)}…` : s;
}

/** One line for a failure: our own checks, SDK schema-validation errors (zod) and the rest. */
function describe(err) {
  if (err instanceof CheckFailed) return err.message;
  if (Array.isArray(err?.issues)) {
    const issues = err.issues.map((i) => `${(i.path ?? []).join('.')}: ${i.message}`).join('; ');
    return `the SDK rejected the server's response (schema validation, ${err.name}): ${issues}`;
  }
  return `${err?.name ?? 'Error'}: ${err?.message ?? err}`;
}

/** Runs fn and returns the error it threw; fails the check when it resolves instead. */
async function expectRejection(what, fn) {
  let result;
  try {
    result = await fn();
  } catch (err) {
    return err;
  }
  throw new CheckFailed(`${what}: expected an error, got result ${show(result)}`);
}

// ---- transports -------------------------------------------------------------------------------

/** fetch for the legacy SSE stream's EventSource that always carries X-API-Key. */
function keyedFetch(apiKey) {
  return (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('X-API-Key', apiKey);
    return fetch(url, { ...init, headers });
  };
}

function cleanEnv(extra) {
  // `breeze` refuses unknown BREEZE_*/MCP_* variables: pass only what the bridge needs.
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined) continue;
    if (/^(BREEZE_|MCP_)/.test(k) || k === 'DATABASE_URL' || k === 'REDIS_URL') continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

const TRANSPORTS = {
  sse: {
    label: 'sse (SSEClientTransport)',
    make: (apiKey) =>
      new SSEClientTransport(new URL(demo.mcp_sse_url), {
        requestInit: { headers: { 'X-API-Key': apiKey } },
        eventSourceInit: { fetch: keyedFetch(apiKey) },
      }),
  },
  http: {
    label: 'streamable-http (StreamableHTTPClientTransport)',
    make: (apiKey) =>
      new StreamableHTTPClientTransport(new URL(demo.mcp_url), {
        requestInit: { headers: { 'X-API-Key': apiKey } },
      }),
  },
  'consolidated-http': {
    label: 'consolidated catalog over streamable-http (?catalog=consolidated)',
    consolidated: true,
    make: (apiKey) => {
      const url = new URL(demo.mcp_url);
      url.searchParams.set('catalog', 'consolidated');
      return new StreamableHTTPClientTransport(url, { requestInit: { headers: { 'X-API-Key': apiKey } } });
    },
  },
  'consolidated-stdio': {
    label: 'consolidated catalog over stdio (breeze mcp stdio --catalog consolidated)',
    consolidated: true,
    make: (apiKey) => {
      check(opts['breeze-bin'], 'stdio transport needs --breeze-bin');
      return new StdioClientTransport({
        command: opts['breeze-bin'],
        args: ['mcp', 'stdio', '--catalog', 'consolidated'],
        env: cleanEnv({ BREEZE_URL: demo.base_url, BREEZE_API_KEY: apiKey }),
        stderr: 'pipe',
      });
    },
  },
  stdio: {
    label: 'stdio (StdioClientTransport -> breeze mcp stdio)',
    make: (apiKey) => {
      check(opts['breeze-bin'], 'stdio transport needs --breeze-bin');
      return new StdioClientTransport({
        command: opts['breeze-bin'],
        args: ['mcp', 'stdio'],
        env: cleanEnv({ BREEZE_URL: demo.base_url, BREEZE_API_KEY: apiKey }),
        stderr: 'pipe',
      });
    },
  },
};

async function connect(kind, apiKey, role) {
  const transport = TRANSPORTS[kind].make(apiKey);
  let stderr = '';
  if (transport.stderr) transport.stderr.on('data', (d) => (stderr += d));
  const client = new Client({ name: `breeze-ts-client-${kind}-${role}`, version: '1.0.0' });
  try {
    await client.connect(transport, { timeout: PER_REQUEST_TIMEOUT_MS });
  } catch (err) {
    if (stderr) err.message += `\n  bridge stderr: ${stderr.trim()}`;
    throw err;
  }
  return client;
}

/** Ends the session politely: Streamable HTTP sessions are DELETEd (Client.close() alone
 * leaves them open on the server until they idle out), then the transport is closed. */
async function closeClient(client) {
  const transport = client.transport;
  if (transport instanceof StreamableHTTPClientTransport && transport.sessionId) {
    await transport.terminateSession().catch((err) => console.error(`terminateSession: ${err}`));
  }
  await client.close();
}

// ---- the checks -------------------------------------------------------------------------------

/**
 * Runs every check for one transport. Checks are independent where they can be, so one failure
 * does not hide the others; returns the list of failures ("step: why").
 */
async function runChecks(kind) {
  const req = { timeout: PER_REQUEST_TIMEOUT_MS };
  const failures = [];
  const step = async (name, fn) => {
    try {
      return { ok: true, value: await fn() };
    } catch (err) {
      failures.push(`${name}: ${describe(err)}`);
      return { ok: false };
    }
  };

  const read = await step('initialize with the read key', async () => {
    const c = await connect(kind, demo.api_keys.read, 'read');
    const info = c.getServerVersion();
    if (info?.name !== SERVER_NAME) {
      await closeClient(c).catch(() => {});
      throw new CheckFailed(`serverInfo.name is ${show(info?.name)}, want "${SERVER_NAME}"`);
    }
    return c;
  });
  if (!read.ok) return failures;
  const rc = read.value;

  const write = await step('initialize with the write key', async () => {
    const c = await connect(kind, demo.api_keys.write, 'write');
    const info = c.getServerVersion();
    if (info?.name !== SERVER_NAME) {
      await closeClient(c).catch(() => {});
      throw new CheckFailed(`serverInfo.name is ${show(info?.name)}, want "${SERVER_NAME}"`);
    }
    return c;
  });

  try {
    const readTools = await step('tools/list with the read key', async () => {
      const names = (await rc.listTools({}, req)).tools.map((t) => t.name).sort();
      check(sameList(names, READ_TOOLS), `read key sees tools ${show(names)}, want ${show(READ_TOOLS)}`);
      return names;
    });
    const writeTools = write.ok
      ? await step('tools/list with the write key', async () => {
          const names = (await write.value.listTools({}, req)).tools.map((t) => t.name).sort();
          check(sameList(names, WRITE_TOOLS), `write key sees tools ${show(names)}, want ${show(WRITE_TOOLS)}`);
          return names;
        })
      : { ok: false };
    if (readTools.ok && writeTools.ok) {
      await step('tools/list read vs write key', async () => {
        const extra = writeTools.value.filter((t) => !readTools.value.includes(t));
        check(sameList(extra, WRITE_ONLY_TOOLS), `write-only tools are ${show(extra)}, want ${show(WRITE_ONLY_TOOLS)}`);
      });
    }

    await step('tools/call query_devices', async () => {
      const qd = await rc.callTool({ name: 'query_devices', arguments: {} }, undefined, req);
      check(!qd.isError, `query_devices returned isError: ${show(qd)}`);
      const sc = qd.structuredContent;
      check(sc && typeof sc === 'object', `query_devices has no structuredContent: ${show(qd)}`);
      check(typeof sc.total === 'number', `structuredContent.total is ${show(sc.total)}, want a number`);
      check(Array.isArray(sc.devices), `structuredContent.devices is ${show(sc.devices)}, want an array`);
      check(typeof sc.showing === 'number', `structuredContent.showing is ${show(sc.showing)}, want a number`);
      const text = (qd.content ?? []).find((c) => c.type === 'text');
      check(text, `query_devices has no text content: ${show(qd.content)}`);
      let parsed;
      try {
        parsed = JSON.parse(text.text);
      } catch {
        throw new CheckFailed(`query_devices text content is not JSON: ${show(text.text)}`);
      }
      // The same JSON value (key order is not part of it).
      check(isDeepStrictEqual(parsed, sc), `query_devices text ${show(parsed)} != structuredContent ${show(sc)}`);
    });

    await step('tools/call set_device_context with the read key', async () => {
      const err = await expectRejection('set_device_context with the read key', () =>
        rc.callTool(
          {
            name: 'set_device_context',
            arguments: {
              deviceId: '00000000-0000-4000-8000-000000000000',
              contextType: 'issue',
              summary: 'written by the TS client test (must be refused)',
            },
          },
          undefined,
          req,
        ),
      );
      check(err instanceof McpError, `failed with a non-MCP error: ${err}`);
      check(err.code === -32603, `error code is ${err.code}, want -32603 (${err.message})`);
      // McpError prefixes "MCP error -32603: "; the server's message must be exactly SCOPE_ERROR.
      const serverMsg = err.message.replace(/^MCP error -?\d+: /, '');
      check(serverMsg === SCOPE_ERROR, `error message is ${show(serverMsg)}, want ${show(SCOPE_ERROR)}`);
    });

    // Every tool the execute key sees, once, with the SDK's output-schema validation (on by
    // default): a result that does not match the tool's outputSchema makes callTool throw.
    // Once per run (the http transport): per-user tool limits allow few calls.
    if (kind === 'http') {
      const exec = await step('initialize with the execute key', () => connect(kind, demo.api_keys.execute, 'execute'));
      if (exec.ok) {
        const ec = exec.value;
        try {
          const listed = await step('tools/list with the execute key (no MCP Apps view without the extension)', async () => {
            const tools = (await ec.listTools({}, req)).tools;
            const withView = tools.filter((t) => t._meta?.ui).map((t) => t.name);
            check(withView.length === 0, `_meta.ui listed to a client that did not negotiate MCP Apps: ${withView}`);
            return tools.map((t) => t.name).sort();
          });
          const device = await step('the demo device', async () => {
            const qd = await ec.callTool({ name: 'query_devices', arguments: {} }, undefined, req);
            const d = qd.structuredContent?.devices?.[0]?.id;
            check(d, `no device: ${show(qd)}`);
            return d;
          });
          if (listed.ok && device.ok) {
            const table = everyToolArgs(device.value);
            const schemas = Object.fromEntries((await ec.listTools({}, req)).tools.map((t) => [t.name, t.inputSchema]));
            for (const name of listed.value) {
              await step(`tools/call ${name} (execute key, outputSchema validated)`, async () => {
                const args = table[name] ?? synthesizeArgs(name, schemas[name], device.value);
                const res = await ec.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
                check(res.structuredContent && typeof res.structuredContent === 'object', `no structuredContent: ${show(res)}`);
                check(!res._meta?.ui, `a result carries _meta.ui without the extension: ${show(res._meta)}`);
                if (res.isError) check(res.structuredContent.error?.code, `an error without the envelope: ${show(res)}`);
              });
            }
            await step('tools/call get_device_details for an unknown device (an error result)', async () => {
              const res = await ec.callTool({ name: 'get_device_details', arguments: { deviceId: UNKNOWN_ID } }, undefined, req);
              check(res.isError === true, `want isError: ${show(res)}`);
              check(res.structuredContent?.error?.code === 'NOT_FOUND', `want NOT_FOUND: ${show(res)}`);
            });
            await step('tools/call execute_command answers pending approval', async () => {
              const res = await ec.callTool({ name: 'execute_command', arguments: table.execute_command }, undefined, req);
              check(res.structuredContent?.status === 'pending_approval', `want pending_approval: ${show(res)}`);
            });
          }
        } finally {
          await closeClient(ec).catch(() => {});
        }
      }
    }

    await step('resources/read breeze://server', async () => {
      const res = await rc.readResource({ uri: 'breeze://server' }, req);
      const c0 = res.contents?.[0];
      check(c0 && typeof c0.text === 'string', `no text contents: ${show(res)}`);
      check(c0.uri === 'breeze://server', `contents uri is ${show(c0.uri)}`);
      let server;
      try {
        server = JSON.parse(c0.text);
      } catch {
        throw new CheckFailed(`not JSON: ${show(c0.text)}`);
      }
      check(server.name === SERVER_NAME, `name is ${show(server.name)}, want "${SERVER_NAME}"`);
    });

    await step('prompts/get breeze-device-investigate {device: "web-01"}', async () => {
      const prompt = await rc.getPrompt({ name: 'breeze-device-investigate', arguments: { device: 'web-01' } }, req);
      check(prompt.messages?.length > 0, `prompt has no messages: ${show(prompt)}`);
      const text = prompt.messages.map((m) => (m.content?.type === 'text' ? m.content.text : '')).join('\n');
      check(text.includes('web-01'), `prompt text does not mention web-01: ${show(text)}`);
    });

    await step('prompts/get breeze-device-investigate without the required "device"', async () => {
      const err = await expectRejection('prompts/get without "device"', () =>
        rc.getPrompt({ name: 'breeze-device-investigate', arguments: {} }, req),
      );
      check(err instanceof McpError, `failed with a non-MCP error: ${err}`);
      check(err.code === -32602, `error code is ${err.code}, want -32602 invalid params (${err.message})`);
    });
  } finally {
    await Promise.allSettled([closeClient(rc), write.ok ? closeClient(write.value) : undefined]);
  }
  return failures;
}

const DISCOVER_BUDGET = 8192;

/**
 * A consolidated-catalog session end to end: tools/list → breeze_discover (every page, within
 * the budget) → breeze_describe → breeze_read of query_devices, and the structured errors
 * (TOOL_EFFECT_MISMATCH, INVALID_CURSOR), with the SDK's output-schema validation on.
 */
async function runConsolidated(kind) {
  const req = { timeout: PER_REQUEST_TIMEOUT_MS };
  const failures = [];
  const step = async (name, fn) => {
    try {
      return { ok: true, value: await fn() };
    } catch (err) {
      failures.push(`${name}: ${describe(err)}`);
      return { ok: false };
    }
  };
  const conn = await step('initialize with the read key', () => connect(kind, demo.api_keys.read, 'read'));
  if (!conn.ok) return failures;
  const c = conn.value;
  try {
    await step('tools/list (meta-tools only)', async () => {
      const names = (await c.listTools({}, req)).tools.map((t) => t.name).sort();
      const want = ['breeze_describe', 'breeze_discover', 'breeze_read'];
      check(sameList(names, want), `read key sees ${show(names)}, want ${show(want)}`);
    });
    const walked = await step('breeze_discover, every page', async () => {
      const names = [];
      let cursor;
      for (let page = 0; page < 50; page++) {
        const args = cursor ? { cursor } : {};
        const res = await c.callTool({ name: 'breeze_discover', arguments: args }, undefined, req);
        check(!res.isError, `isError: ${show(res)}`);
        const sc = res.structuredContent;
        const bytes = JSON.stringify(sc).length;
        check(bytes <= DISCOVER_BUDGET, `a page of ${bytes} bytes exceeds ${DISCOVER_BUDGET}`);
        names.push(...sc.operations.map((o) => o.name));
        cursor = sc.nextCursor;
        if (!cursor) {
          check(sc.total === names.length, `total ${sc.total} but ${names.length} listed`);
          check(new Set(names).size === names.length, `an operation listed twice: ${show(names)}`);
          return names;
        }
      }
      throw new CheckFailed('more than 50 pages');
    });
    if (walked.ok) {
      await step('breeze_discover lists query_devices', async () => {
        check(walked.value.includes('query_devices'), `not discovered: ${show(walked.value)}`);
      });
    }
    await step('breeze_describe query_devices', async () => {
      const res = await c.callTool({ name: 'breeze_describe', arguments: { operations: ['query_devices'] } }, undefined, req);
      check(!res.isError, `isError: ${show(res)}`);
      const op = res.structuredContent.operations[0];
      check(op.name === 'query_devices' && op.inputSchema?.type === 'object', `bad description: ${show(op)}`);
      check(op.outputSchema && typeof op.outputSchema === 'object', `no outputSchema: ${show(op)}`);
    });
    await step('breeze_read query_devices', async () => {
      const res = await c.callTool(
        { name: 'breeze_read', arguments: { operation: 'query_devices', input: {} } },
        undefined,
        req,
      );
      check(!res.isError, `isError: ${show(res)}`);
      check(Array.isArray(res.structuredContent?.devices), `no devices: ${show(res)}`);
    });
    await step('breeze_read of a write answers TOOL_EFFECT_MISMATCH', async () => {
      const res = await c.callTool(
        { name: 'breeze_read', arguments: { operation: 'manage_groups', input: { action: 'create', name: 'x' } } },
        undefined,
        req,
      );
      check(res.isError && res.structuredContent?.error?.code === 'TOOL_EFFECT_MISMATCH', `want TOOL_EFFECT_MISMATCH: ${show(res)}`);
    });
    await step('breeze_discover with a forged cursor answers INVALID_CURSOR', async () => {
      const res = await c.callTool({ name: 'breeze_discover', arguments: { cursor: 'deadbeef' } }, undefined, req);
      check(res.isError && res.structuredContent?.error?.code === 'INVALID_CURSOR', `want INVALID_CURSOR: ${show(res)}`);
    });
  } finally {
    await closeClient(c).catch(() => {});
  }
  return failures;
}

async function main() {
  const kinds = opts.only.split(',').map((s) => s.trim()).filter(Boolean);
  for (const k of kinds) {
    if (!TRANSPORTS[k]) {
      console.error(`unknown transport ${k}; known: ${Object.keys(TRANSPORTS).join(', ')}`);
      process.exit(2);
    }
  }
  let failed = 0;
  for (const kind of kinds) {
    const failures = TRANSPORTS[kind].consolidated ? await runConsolidated(kind) : await runChecks(kind);
    if (failures.length === 0) {
      console.log(`PASS ts ${TRANSPORTS[kind].label}`);
    } else {
      failed++;
      console.log(`FAIL ts ${TRANSPORTS[kind].label}`);
      for (const f of failures) console.log(`  - ${f}`);
    }
  }
  console.log(`ts: ${kinds.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.error(`FAIL ts: unexpected error: ${err?.stack ?? err}`);
  process.exit(1);
});
