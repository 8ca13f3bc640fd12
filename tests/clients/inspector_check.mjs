#!/usr/bin/env node
// Checks the output of the MCP Inspector CLI's tools/list (`--format json`) against Breeze's
// read-key tool set. Usage: node inspector_check.mjs OUTPUT.json
import { readFileSync } from 'node:fs';

const file = process.argv[2];
let out;
try {
  out = JSON.parse(readFileSync(file, 'utf8'));
} catch (err) {
  console.log(`FAIL inspector-cli tools/list (http): output is not JSON: ${err.message}`);
  process.exit(1);
}
const tools = (out.result?.tools ?? out.tools ?? []).map((t) => t.name);
const problems = [];
if (!tools.includes('query_devices')) problems.push('query_devices is missing');
if (tools.includes('set_device_context')) problems.push('set_device_context is listed for the read key');
if (problems.length) {
  console.log(`FAIL inspector-cli tools/list (http): ${problems.join('; ')} (tools: ${JSON.stringify(tools)})`);
  process.exit(1);
}
console.log(`PASS inspector-cli tools/list (http): ${tools.length} tools, query_devices among them`);
