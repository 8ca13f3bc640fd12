#!/usr/bin/env python3
"""Drives a RUNNING Breeze with the MCP Python SDK 2.x (PyPI `mcp` >= 2): its high-level `Client`
in the default mode (which negotiates the newest revision, 2026-07-28, with `server/discover`)
and in legacy mode (the `initialize` handshake), and checks every 2026-07-28 result against that
revision's schema.

Usage: python py_modern.py --demo-json PATH/breeze-data/demo.json --breeze-bin PATH/breeze

Checks, each printed as one "PASS …" or "FAIL …" line:
  - default mode: the SDK settles on 2026-07-28, lists the tools and calls every tool the
    execute key sees (arguments from the input schema, as py_client.py makes them; a Tier 3
    call answers pending approval at once), with the SDK's own result validation;
  - legacy mode: the SDK settles on 2025-11-25 and does the same;
  - schema: every request method of the 2026-07-28 revision (read from the SDK's generated
    wire models, `mcp_types._v2026_07_28.ClientRequest`, not from a list kept here) is sent
    over plain HTTP and its answer validated against the JSON schema of that method's result
    (or, for a method Breeze does not implement, of a JSON-RPC error with 404 and -32601).
Exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import typing
from importlib.metadata import version
from typing import Any

import httpx2
import jsonschema
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

REVISION = "2026-07-28"
UNKNOWN_ID = "0190c0de-0000-7000-8000-000000000000"

results: list[str] = []


def report(ok: bool, name: str, detail: str = "") -> None:
    line = f"{'PASS' if ok else 'FAIL'} py-modern {name}" + (f": {detail}" if detail else "")
    results.append(line)
    print(line, flush=True)


def tool_args(tool: dict, device: str) -> dict:
    """One call's arguments from a listed input schema: for each top-level required property,
    the demo device for a device id, an unknown id for other ids, the first enum value, the
    smallest valid string or number. The call may fail (an unknown id): what is checked is that
    its result, error or not, passes the SDK's validation."""
    schema = tool.get("inputSchema") or {}
    defs = schema.get("$defs") or {}

    def resolve(s: Any) -> dict:
        while isinstance(s, dict) and "$ref" in s:
            s = defs.get(s["$ref"].rsplit("/", 1)[-1], {})
        return s if isinstance(s, dict) else {}

    def value(key: str, s0: Any) -> Any:
        s = resolve(s0)
        if "const" in s:
            return s["const"]
        if isinstance(s.get("enum"), list):
            return s["enum"][0]
        for alt in s.get("oneOf") or s.get("anyOf") or []:
            r = resolve(alt)
            if r.get("type") != "null":
                return value(key, r)
        t = s.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), None)
        if t == "string":
            if key.lower().endswith("id"):
                return device if key.lower() == "deviceid" else UNKNOWN_ID
            return "x" * max(1, s.get("minLength", 1))
        if t in ("integer", "number"):
            return s.get("minimum", 1)
        if t == "boolean":
            return False
        if t == "array":
            if key.lower() == "deviceids":
                return [device]
            return []
        return {}

    props = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    return {k: value(k, props.get(k)) for k in required}


async def drive(mode: str, demo: dict, want: str) -> None:
    """Connects in `mode`, checks the revision, lists the tools and calls each one."""
    name = f"{mode} mode"
    try:
        headers = {"X-API-Key": demo["api_keys"]["execute"]}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(demo["mcp_url"], http_client=http)
            async with Client(transport, mode=mode) as client:
                got = client.protocol_version
                if got != want:
                    report(False, name, f"negotiated {got}, want {want}")
                    return
                listed = await client.list_tools()
                tools = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]
                if not tools:
                    report(False, name, "tools/list is empty")
                    return
                found = await client.call_tool("query_devices", {})
                devices = (found.structured_content or {}).get("devices") or [{}]
                device = devices[0].get("id") or UNKNOWN_ID
                errors = limited = 0
                for tool in tools:
                    try:
                        result = await client.call_tool(tool["name"], tool_args(tool, device))
                    except Exception as e:
                        # Other suites called every tool on this server already: a per-tool
                        # limit may be spent. Any other error fails the suite.
                        if "rate limit exceeded" not in str(e).lower():
                            raise
                        limited += 1
                        continue
                    errors += bool(getattr(result, "is_error", False))
        report(
            True,
            name,
            f"{got}: {len(tools)} tools listed and called ({errors} tool errors, {limited} rate-limited)",
        )
    except Exception as e:  # the SDK's own validation failures land here
        report(False, name, f"{type(e).__name__}: {e}")


def revision_models():
    """The 2026-07-28 wire models the SDK generated from that revision's schema.json."""
    try:
        from mcp_types import _v2026_07_28 as wire  # noqa: PLC0415
    except ImportError as e:
        raise SystemExit(f"this mcp_types ({version('mcp-types')}) has no 2026-07-28 models: {e}")
    return wire


def result_schema(wire, request_cls) -> dict:
    """The JSON schema of the result of `request_cls` (`XRequest` -> `XResult`)."""
    name = request_cls.__name__.removesuffix("Request") + "Result"
    model = getattr(wire, name, None)
    if model is None:
        raise LookupError(f"no {name} in the revision's models")
    return TypeAdapter(model).json_schema(by_alias=True)


def method_of(request_cls) -> str:
    field = request_cls.model_fields["method"]
    (literal,) = typing.get_args(field.annotation)
    return literal


async def schema_checks(demo: dict) -> None:
    """Every request method of the revision, answered as its schema says."""
    wire = revision_models()
    error_schema = TypeAdapter(wire.JSONRPCErrorResponse).json_schema(by_alias=True)
    meta = {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "breeze-ci", "version": "1"},
    }
    headers = {
        "X-API-Key": demo["api_keys"]["execute"],
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": REVISION,
    }
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:

        async def call(method: str, params: dict, name: str | None = None):
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
            extra = {"Mcp-Method": method}
            if name:
                extra["Mcp-Name"] = name
            if method == "subscriptions/listen":
                # A stream that stays open: read up to the acknowledgment, then close it.
                async with http.stream("POST", demo["mcp_url"], json=body, headers=extra) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data:"):
                            return r.status_code, json.loads(line[5:])
                    return r.status_code, None
            r = await http.post(demo["mcp_url"], json=body, headers=extra)
            text = r.text
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                datas = [l[5:] for l in text.splitlines() if l.startswith("data:")]
                text = datas[-1] if datas else "null"
            return r.status_code, json.loads(text)

        # Real names for the methods that take one.
        _, listed = await call("resources/list", {})
        uri = ((listed.get("result") or {}).get("resources") or [{}])[0].get("uri", "breeze://server")
        _, listed = await call("prompts/list", {})
        prompt = ((listed.get("result") or {}).get("prompts") or [{}])[0].get("name", "x")
        params_for = {
            "server/discover": ({}, None),
            "tools/list": ({}, None),
            "prompts/list": ({}, None),
            "resources/list": ({}, None),
            "resources/templates/list": ({}, None),
            "resources/read": ({"uri": uri}, uri),
            "prompts/get": ({"name": prompt}, prompt),
            "tools/call": ({"name": "query_devices", "arguments": {}}, "query_devices"),
            "completion/complete": ({"ref": {"type": "ref/prompt", "name": prompt},
                                     "argument": {"name": "x", "value": ""}}, None),
            "subscriptions/listen": ({"notifications": {"toolsListChanged": True}}, None),
        }
        union = wire.ClientRequest
        requests = typing.get_args(union) or (union,)
        for request_cls in requests:
            method = method_of(request_cls)
            if method not in params_for:
                report(False, f"schema {method}", "a method of the revision this check does not know: add its parameters")
                continue
            params, name = params_for[method]
            status, answer = await call(method, params, name)
            try:
                if method == "subscriptions/listen":
                    # The first message is the acknowledgment notification.
                    ack = (answer or {}).get("method")
                    if ack != "notifications/subscriptions/acknowledged":
                        raise ValueError(f"first message {answer}")
                    schema = TypeAdapter(wire.SubscriptionsAcknowledgedNotification).json_schema(by_alias=True)
                    jsonschema.validate(answer, schema)
                elif "error" in (answer or {}):
                    jsonschema.validate(answer, error_schema)
                    code = answer["error"]["code"]
                    if (status, code) != (404, -32601):
                        raise ValueError(f"HTTP {status}, error {answer['error']}")
                else:
                    jsonschema.validate(answer["result"], result_schema(wire, request_cls))
                report(True, f"schema {method}")
            except (jsonschema.ValidationError, ValueError, LookupError, KeyError, TypeError) as e:
                report(False, f"schema {method}", f"{str(e)[:400]} in {json.dumps(answer)[:400]}")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-json", required=True)
    parser.add_argument("--breeze-bin", required=True)
    args = parser.parse_args()
    demo = json.load(open(args.demo_json))
    print(f"python mcp {version('mcp')}, mcp-types {version('mcp-types')}", flush=True)
    out = subprocess.run([args.breeze_bin, "--version"], capture_output=True, text=True)
    print(out.stdout.strip(), flush=True)
    await drive("auto", demo, REVISION)
    await drive("legacy", demo, "2025-11-25")
    await schema_checks(demo)
    return 1 if any(r.startswith("FAIL") for r in results) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
