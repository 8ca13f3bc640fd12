// Drives a RUNNING Breeze with the TypeScript SDK's v2 client package (@modelcontextprotocol/client)
// over Streamable HTTP: connect (the SDK picks the revision), list the tools, call every tool the
// execute key sees with arguments made from its input schema, with the SDK's output-schema
// validation on. Prints one PASS/FAIL line; exits non-zero on failure.
//
// Usage: node ts_v2_client.mjs --demo-json PATH/breeze-data/demo.json
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const UNKNOWN_ID = '0190c0de-0000-7000-8000-000000000000';
const arg = (name) => process.argv[process.argv.indexOf(name) + 1];
const demo = JSON.parse(readFileSync(arg('--demo-json'), 'utf8'));
// The package exports no package.json: read it beside this script's node_modules.
const here = dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(join(here, 'node_modules/@modelcontextprotocol/client/package.json'), 'utf8'));

function toolArgs(tool, device) {
  const schema = tool.inputSchema ?? {};
  const defs = schema.$defs ?? {};
  const resolve = (s) => {
    while (s && s.$ref) s = defs[s.$ref.split('/').pop()] ?? {};
    return s ?? {};
  };
  const value = (key, s0) => {
    const s = resolve(s0);
    if ('const' in s) return s.const;
    if (Array.isArray(s.enum)) return s.enum[0];
    for (const alt of s.oneOf ?? s.anyOf ?? []) {
      const r = resolve(alt);
      if (r.type !== 'null') return value(key, r);
    }
    let t = Array.isArray(s.type) ? s.type.find((x) => x !== 'null') : s.type;
    if (t === 'string') {
      if (/id$/i.test(key)) return /^deviceId$/i.test(key) ? device : UNKNOWN_ID;
      return 'x'.repeat(Math.max(1, s.minLength ?? 1));
    }
    if (t === 'integer' || t === 'number') return s.minimum ?? 1;
    if (t === 'boolean') return false;
    if (t === 'array') return /^deviceIds$/i.test(key) ? [device] : [];
    return {};
  };
  const out = {};
  for (const k of schema.required ?? []) out[k] = value(k, (schema.properties ?? {})[k]);
  return out;
}

const client = new Client({ name: 'breeze-ci-v2', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(demo.mcp_url), {
  requestInit: { headers: { 'X-API-Key': demo.api_keys.execute } },
});
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const found = await client.callTool({ name: 'query_devices', arguments: {} });
  const device = found.structuredContent?.devices?.[0]?.id ?? UNKNOWN_ID;
  let errors = 0;
  let limited = 0;
  for (const tool of tools) {
    try {
      const r = await client.callTool({ name: tool.name, arguments: toolArgs(tool, device) });
      if (r.isError) errors += 1;
    } catch (e) {
      // The other suites called every tool on this server already: a per-tool limit may be
      // spent. Any other error fails the suite.
      if (!/rate limit exceeded/i.test(String(e?.message))) throw e;
      limited += 1;
    }
  }
  const version = transport.protocolVersion ?? 'unknown';
  console.log(`PASS ts-v2 @modelcontextprotocol/client ${pkg.version}: ${version}, ${tools.length} tools listed and called (${errors} tool errors, ${limited} rate-limited)`);
  await client.close();
} catch (e) {
  console.log(`FAIL ts-v2 @modelcontextprotocol/client ${pkg.version}: ${e?.stack ?? e}`);
  process.exitCode = 1;
}
