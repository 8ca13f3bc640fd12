#!/usr/bin/env python3
"""Drives a RUNNING Breeze with the official MCP Python SDK (PyPI package `mcp`, 1.x) over the
Streamable HTTP client (`streamablehttp_client`) and the legacy HTTP+SSE client (`sse_client`).

Usage: python py_client.py --demo-json PATH/breeze-data/demo.json --breeze-bin PATH/breeze
       [--only http,sse,consolidated]

`consolidated` is a consolidated-catalog session over Streamable HTTP (`?catalog=consolidated`):
tools/list, breeze_discover (every page), breeze_describe, breeze_read of query_devices.

Prints one "PASS py <transport>" line per transport; exits non-zero with a clear message when a
check fails.
"""

from __future__ import annotations

import argparse
import subprocess
import json
import sys
import warnings
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from importlib.metadata import version
from typing import Any

import anyio
from mcp import ClientSession, McpError
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client

# `streamablehttp_client` is deprecated in favour of `streamable_http_client` in mcp 1.2x+; it is
# still the documented headers= entry point of the 1.x line this test pins.
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*streamable_http_client.*")

SERVER_NAME = "breeze-rmm"
# The tools each key should see come from the binary's own registry (`breeze mcp tools
# --json`, read in `main`), not from a list kept here: every tool with a Tier 1 call (read), and
# those whose lowest call is Tier 2 (write).
REGISTRY: list[dict] = []
READ_TOOLS: list[str] = []
WRITE_ONLY_TOOLS: list[str] = []
WRITE_TOOLS: list[str] = []


def load_expected_tools(breeze_bin: str) -> None:
    """Fills the expected tool lists from `breeze mcp tools --json`."""
    out = subprocess.run(
        [breeze_bin, "mcp", "tools", "--json"], check=True, capture_output=True, text=True
    ).stdout
    tools = json.loads(out)["tools"]
    REGISTRY[:] = tools
    READ_TOOLS[:] = sorted(t["name"] for t in tools if min(t["tiers"]) == 1)
    WRITE_ONLY_TOOLS[:] = sorted(t["name"] for t in tools if min(t["tiers"]) == 2)
    WRITE_TOOLS[:] = sorted(READ_TOOLS + WRITE_ONLY_TOOLS)


SCOPE_ERROR = 'Tool "set_device_context" requires ai:write scope'
TIMEOUT = timedelta(seconds=20)
UNKNOWN_ID = "0190c0de-0000-7000-8000-000000000000"


def synthesize_args(name: str, schema: dict, d: str) -> dict:
    """Arguments for a tool every_tool_args does not know, made from its listed input schema: its
    lowest-tier action (from the registry), and for every other required property the first enum
    value, the demo device for a device id, an unknown id for other ids, the smallest valid string
    or number. The call may fail (an unknown id); what is checked is that its result, error or
    not, passes the SDK's outputSchema validation."""
    tool = next((t for t in REGISTRY if t["name"] == name), {})
    actions = sorted(tool.get("actions") or [], key=lambda a: a["tier"])
    action = actions[0]["name"] if actions else None

    def resolve(s):
        ref = (s or {}).get("$ref")
        if not ref:
            return s or {}
        node = schema
        for k in ref.removeprefix("#/").split("/"):
            node = (node or {}).get(k)
        return resolve(node)

    def value(key, s0):
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
        is_id = key.lower().endswith("id") or s.get("format") == "uuid"
        if t == "string":
            if is_id:
                return d if key.lower() == "deviceid" else UNKNOWN_ID
            return "x" * max(1, s.get("minLength", 1))
        if t in ("integer", "number"):
            return s.get("minimum", 1)
        if t == "boolean":
            return False
        if t == "array":
            if key.lower() == "deviceids":
                return [d]
            return [value(key.removesuffix("s"), s.get("items")) for _ in range(s.get("minItems", 0))]
        return obj(s)

    def obj(s, top=False):
        props = s.get("properties") or {}
        required = s.get("required") or []
        out = {}
        if top and action and "action" in props:
            out["action"] = action
        for k in required:
            out.setdefault(k, value(k, props.get(k)))
        return out

    return obj(resolve(schema), top=True)


def every_tool_args(d: str) -> dict[str, dict]:
    """Arguments of one call of every tool, for the execute key on the demo's local device `d`.

    Tier 3 calls answer "pending approval" at once (clients.sh runs the demo with
    MCP_APPROVAL_WAIT_SECONDS=0); a few calls are errors on purpose (unknown ids). A listed
    tool missing here is called with arguments made from its input schema (synthesize_args).
    """
    return {
        "analyze_disk_usage": {"deviceId": d, "refresh": True, "path": "/tmp", "topFiles": 5},
        "analyze_metrics": {"deviceId": d},
        "apply_configuration_policy": {"configPolicyId": UNKNOWN_ID, "level": "device", "targetId": d},
        "disk_cleanup": {"deviceId": d, "action": "preview"},
        "execute_command": {"deviceId": d, "commandType": "list_processes", "payload": {"limit": 3}},
        "file_operations": {"deviceId": d, "action": "list", "path": "/tmp"},
        "generate_report": {"action": "history", "limit": 5},
        "get_active_users": {},
        "get_approval_status": {"approvalId": UNKNOWN_ID},
        "get_device_context": {"deviceId": d},
        "get_device_details": {"deviceId": d},
        "get_device_software": {"deviceId": d, "name": "lib", "limit": 5},
        "get_effective_configuration": {"deviceId": d},
        "get_user_experience_metrics": {},
        "list_configuration_policies": {},
        "manage_alert_rules": {"action": "test", "condition": {"kind": "metric", "metric": "cpu", "comparison": "above", "threshold": 90, "durationMinutes": 5}},
        "manage_alerts": {"action": "list", "status": "active"},
        "manage_automations": {"action": "list"},
        "manage_groups": {"action": "list"},
        "manage_maintenance_windows": {"action": "active_now", "target": {"type": "device", "deviceId": d}},
        "manage_services": {"deviceId": d, "action": "list"},
        "network_discovery": {"deviceId": d, "subnet": "127.0.0.0/30", "scanType": "ping"},
        "preview_configuration_change": {"deviceId": d, "remove": [UNKNOWN_ID]},
        "query_audit_log": {"limit": 5},
        "query_devices": {},
        "remove_configuration_policy_assignment": {"assignmentId": UNKNOWN_ID},
        "resolve_device_context": {"contextId": UNKNOWN_ID},
        "run_script": {"scriptId": UNKNOWN_ID, "deviceIds": [d]},
        "search_agent_logs": {"limit": 5},
        "set_agent_log_level": {"deviceId": d, "level": "info", "durationMinutes": 1},
        "set_device_context": {"deviceId": d, "contextType": "followup", "summary": "written by the Python client test"},
    }


class CheckFailed(Exception):
    pass


async def _names(session) -> list[str]:
    return sorted(t.name for t in (await session.list_tools()).tools)


def check(cond: Any, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def show(v: Any) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 600 else s[:600] + "…"


def describe(exc: BaseException) -> str:
    if isinstance(exc, CheckFailed):
        return str(exc)
    if isinstance(exc, McpError):
        return f"McpError {exc.error.code}: {exc.error.message}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


@asynccontextmanager
async def session_for(kind: str, demo: dict, api_key: str):
    headers = {"X-API-Key": api_key}
    if kind == "http":
        transport = streamablehttp_client(demo["mcp_url"], headers=headers)
    elif kind == "consolidated":
        transport = streamablehttp_client(demo["mcp_url"] + "?catalog=consolidated", headers=headers)
    else:
        transport = sse_client(demo["mcp_sse_url"], headers=headers)
    async with transport as streams:
        read_stream, write_stream = streams[0], streams[1]
        async with ClientSession(read_stream, write_stream, read_timeout_seconds=TIMEOUT) as session:
            yield session


LABELS = {
    "http": "streamable-http (streamablehttp_client)",
    "sse": "sse (sse_client)",
    "consolidated": "consolidated catalog over streamable-http (?catalog=consolidated)",
}

DISCOVER_BUDGET = 8192


async def run_consolidated(demo: dict) -> list[str]:
    """tools/list -> breeze_discover (every page) -> breeze_describe -> breeze_read, with the SDK's
    output-schema validation on, and the structured errors of the meta-tools."""
    failures: list[str] = []

    async def step(name: str, fn):
        try:
            return True, await fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not raised
            failures.append(f"{name}: {describe(exc)}")
            return False, None

    async with session_for("consolidated", demo, demo["api_keys"]["read"]) as s:
        await s.initialize()

        async def listed():
            names = await _names(s)
            want = ["breeze_describe", "breeze_discover", "breeze_read"]
            check(names == want, f"read key sees {names}, want {want}")

        await step("tools/list (meta-tools only)", listed)

        async def walk():
            names: list[str] = []
            cursor = None
            for _ in range(50):
                res = await s.call_tool("breeze_discover", {"cursor": cursor} if cursor else {})
                check(not res.isError, f"isError: {show(res.model_dump())}")
                sc = res.structuredContent or {}
                size = len(json.dumps(sc, separators=(",", ":"), ensure_ascii=False))
                check(size <= DISCOVER_BUDGET, f"a page of {size} bytes exceeds {DISCOVER_BUDGET}")
                names += [o["name"] for o in sc["operations"]]
                cursor = sc.get("nextCursor")
                if not cursor:
                    check(sc["total"] == len(names), f"total {sc['total']} but {len(names)} listed")
                    check(len(set(names)) == len(names), f"an operation listed twice: {names}")
                    check("query_devices" in names, f"query_devices not discovered: {names}")
                    return
            raise CheckFailed("more than 50 pages")

        await step("breeze_discover, every page", walk)

        async def describe_qd():
            res = await s.call_tool("breeze_describe", {"operations": ["query_devices"]})
            check(not res.isError, f"isError: {show(res.model_dump())}")
            op = (res.structuredContent or {})["operations"][0]
            check(op["name"] == "query_devices" and op["inputSchema"]["type"] == "object", f"bad: {show(op)}")

        await step("breeze_describe query_devices", describe_qd)

        async def read_qd():
            res = await s.call_tool("breeze_read", {"operation": "query_devices", "input": {}})
            check(not res.isError, f"isError: {show(res.model_dump())}")
            check(isinstance((res.structuredContent or {}).get("devices"), list), f"no devices: {show(res.model_dump())}")

        await step("breeze_read query_devices", read_qd)

        async def mismatch():
            res = await s.call_tool(
                "breeze_read", {"operation": "manage_groups", "input": {"action": "create", "name": "x"}}
            )
            code = ((res.structuredContent or {}).get("error") or {}).get("code")
            check(res.isError and code == "TOOL_EFFECT_MISMATCH", f"want TOOL_EFFECT_MISMATCH: {show(res.model_dump())}")

        await step("breeze_read of a write answers TOOL_EFFECT_MISMATCH", mismatch)
    return failures


async def run_checks(kind: str, demo: dict) -> list[str]:
    failures: list[str] = []

    async def step(name: str, fn):
        try:
            return True, await fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not raised
            failures.append(f"{name}: {describe(exc)}")
            return False, None

    async with AsyncExitStack() as stack:

        async def open_session(role: str):
            session = await stack.enter_async_context(session_for(kind, demo, demo["api_keys"][role]))
            init = await session.initialize()
            name = init.serverInfo.name
            check(name == SERVER_NAME, f"serverInfo.name is {name!r}, want {SERVER_NAME!r}")
            return session

        ok, read = await step("initialize with the read key", lambda: open_session("read"))
        if not ok:
            return failures
        wok, write = await step("initialize with the write key", lambda: open_session("write"))

        async def list_names(session, want, role):
            names = sorted(t.name for t in (await session.list_tools()).tools)
            check(names == want, f"{role} key sees tools {names}, want {want}")
            return names

        rok, read_tools = await step("tools/list with the read key", lambda: list_names(read, READ_TOOLS, "read"))
        if wok:
            wlok, write_tools = await step(
                "tools/list with the write key", lambda: list_names(write, WRITE_TOOLS, "write")
            )
            if rok and wlok:

                async def differ():
                    extra = [t for t in write_tools if t not in read_tools]
                    check(extra == WRITE_ONLY_TOOLS, f"write-only tools are {extra}, want {WRITE_ONLY_TOOLS}")

                await step("tools/list read vs write key", differ)

        async def query_devices():
            res = await read.call_tool("query_devices", {})
            check(not res.isError, f"query_devices returned isError: {show(res.model_dump())}")
            sc = res.structuredContent
            check(isinstance(sc, dict), f"query_devices has no structuredContent: {show(res.model_dump())}")
            total = sc.get("total")
            check(
                isinstance(total, (int, float)) and not isinstance(total, bool),
                f"structuredContent.total is {total!r}, want a number",
            )
            check(isinstance(sc.get("devices"), list), f"structuredContent.devices is {sc.get('devices')!r}")
            check(isinstance(sc.get("showing"), int), f"structuredContent.showing is {sc.get('showing')!r}")
            texts = [c.text for c in res.content if c.type == "text"]
            check(texts, f"query_devices has no text content: {show(res.model_dump()['content'])}")
            try:
                parsed = json.loads(texts[0])
            except ValueError:
                raise CheckFailed(f"query_devices text content is not JSON: {texts[0]!r}") from None
            check(parsed == sc, f"query_devices text {show(parsed)} != structuredContent {show(sc)}")

        await step("tools/call query_devices", query_devices)

        async def scope_refused():
            try:
                res = await read.call_tool(
                    "set_device_context",
                    {
                        "deviceId": "00000000-0000-4000-8000-000000000000",
                        "contextType": "issue",
                        "summary": "written by the Python client test (must be refused)",
                    },
                )
            except McpError as exc:
                check(exc.error.code == -32603, f"error code is {exc.error.code}, want -32603 ({exc.error.message})")
                check(
                    exc.error.message == SCOPE_ERROR,
                    f"error message is {exc.error.message!r}, want {SCOPE_ERROR!r}",
                )
                return
            raise CheckFailed(f"expected a JSON-RPC error, got result {show(res.model_dump())}")

        await step("tools/call set_device_context with the read key", scope_refused)

        # Every tool the execute key sees, once, with the SDK's output-schema validation (on by
        # default: a result that does not match the tool's outputSchema raises). Once per run
        # (the http transport): per-user tool limits allow few calls.
        if kind == "http":
            eok, exe = await step("initialize with the execute key", lambda: open_session("execute"))
            if eok:
                lok, listed = await step(
                    "tools/list with the execute key",
                    lambda: _names(exe),
                )

                async def demo_device():
                    res = await exe.call_tool("query_devices", {})
                    devices = (res.structuredContent or {}).get("devices") or []
                    check(devices, f"no device: {show(res.model_dump())}")
                    return devices[0]["id"]

                dok, device = await step("the demo device", demo_device)
                if lok and dok:
                    table = every_tool_args(device)
                    schemas = {t.name: t.inputSchema for t in (await exe.list_tools()).tools}
                    for name in listed:

                        async def call_one(name=name):
                            args = table.get(name) or synthesize_args(name, schemas.get(name) or {}, device)
                            res = await exe.call_tool(name, args, read_timeout_seconds=timedelta(seconds=120))
                            sc = res.structuredContent
                            check(isinstance(sc, dict), f"no structuredContent: {show(res.model_dump())}")
                            if res.isError:
                                check((sc.get("error") or {}).get("code"), f"an error without the envelope: {show(sc)}")

                        await step(f"tools/call {name} (execute key, outputSchema validated)", call_one)

                    async def unknown_device():
                        res = await exe.call_tool("get_device_details", {"deviceId": UNKNOWN_ID})
                        check(res.isError, f"want isError: {show(res.model_dump())}")
                        code = ((res.structuredContent or {}).get("error") or {}).get("code")
                        check(code == "NOT_FOUND", f"want NOT_FOUND: {show(res.model_dump())}")

                    await step("tools/call get_device_details for an unknown device (an error result)", unknown_device)

                    async def pending():
                        res = await exe.call_tool("execute_command", table["execute_command"])
                        status = (res.structuredContent or {}).get("status")
                        check(status == "pending_approval", f"want pending_approval: {show(res.model_dump())}")

                    await step("tools/call execute_command answers pending approval", pending)

        async def server_resource():
            res = await read.read_resource("breeze://server")
            check(res.contents, f"no contents: {show(res.model_dump())}")
            c0 = res.contents[0]
            check(str(c0.uri) == "breeze://server", f"contents uri is {str(c0.uri)!r}")
            text = getattr(c0, "text", None)
            check(isinstance(text, str), f"no text contents: {show(res.model_dump())}")
            try:
                server = json.loads(text)
            except ValueError:
                raise CheckFailed(f"not JSON: {text!r}") from None
            check(server.get("name") == SERVER_NAME, f"name is {server.get('name')!r}, want {SERVER_NAME!r}")

        await step("resources/read breeze://server", server_resource)

        async def prompt_with_device():
            res = await read.get_prompt("breeze-device-investigate", {"device": "web-01"})
            check(res.messages, f"prompt has no messages: {show(res.model_dump())}")
            text = "\n".join(m.content.text for m in res.messages if m.content.type == "text")
            check("web-01" in text, f"prompt text does not mention web-01: {text!r}")

        await step('prompts/get breeze-device-investigate {"device": "web-01"}', prompt_with_device)

        async def prompt_missing_argument():
            try:
                res = await read.get_prompt("breeze-device-investigate", {})
            except McpError as exc:
                check(
                    exc.error.code == -32602,
                    f"error code is {exc.error.code}, want -32602 invalid params ({exc.error.message})",
                )
                return
            raise CheckFailed(f"expected a JSON-RPC error, got result {show(res.model_dump())}")

        await step('prompts/get breeze-device-investigate without the required "device"', prompt_missing_argument)

    return failures


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-json", required=True)
    parser.add_argument("--only", default="http,sse,consolidated")
    parser.add_argument("--breeze-bin", required=True, help="the breeze binary whose registry is expected")
    args = parser.parse_args()
    load_expected_tools(args.breeze_bin)
    with open(args.demo_json, encoding="utf-8") as f:
        demo = json.load(f)
    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    for k in kinds:
        if k not in LABELS:
            print(f"unknown transport {k}; known: {', '.join(LABELS)}", file=sys.stderr)
            return 2
    print(f"(python mcp {version('mcp')})")
    failed = 0
    for kind in kinds:
        try:
            failures = await (run_consolidated(demo) if kind == "consolidated" else run_checks(kind, demo))
        except BaseException as exc:  # noqa: BLE001 - closing a transport can fail too
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            failures = [f"transport: {describe(exc)}"]
        if failures:
            failed += 1
            print(f"FAIL py {LABELS[kind]}")
            for f in failures:
                print(f"  - {f}")
        else:
            print(f"PASS py {LABELS[kind]}")
    print(f"py: {len(kinds) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
