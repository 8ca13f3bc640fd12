#!/usr/bin/env python3
"""OAuth 2.1 end to end with the official MCP Python SDK's OAuth client provider
(`mcp.client.auth.OAuthClientProvider`) against a RUNNING Breeze started with MCP_OAUTH_ENABLED,
OAUTH_DCR_ENABLED and OAUTH_DCR_ALLOW_ANONYMOUS:

discovery (401 challenge -> protected-resource and server metadata) -> DCR -> authorization (the
consent is answered headless: the redirect handler signs in as the demo admin and posts the
consent form, the callback handler hands the SDK the code) -> token -> tools/list and a call ->
refresh (the access token's expiry passes) -> scope step-up (a read-only grant calling a Tier 2
tool gets 403 insufficient_scope; the SDK asks again with the challenged scopes and retries) ->
the user revokes the grant -> 401 and the refresh fails -> the SDK re-authorizes.

Runs on the SDK 1.x and 2.x alike (CI runs the pinned 1.x and the newest release).

Usage: python py_oauth.py --demo-json PATH/breeze-data/demo.json [--label py-oauth]
Prints "PASS <label> <step>" / "FAIL <label> <step>: why" lines; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
import warnings
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import anyio
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# The SDK 2.x (httpx2, `streamable_http_client`, a callback answering AuthorizationCodeResult)
# and 1.x (httpx, `streamablehttp_client`, a callback answering (code, state)): the same steps
# run on both, so the pinned 1.x and the newest release are held to one test.
try:
    import httpx2 as httpx
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult

    MODERN = True
except ImportError:
    import httpx
    from mcp.client.streamable_http import streamablehttp_client

    MODERN = False

warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*streamable_http_client.*")

REDIRECT = "http://127.0.0.1:53683/callback"


class Storage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The person at the browser: signed in to Breeze, approving every consent page the SDK
    sends them to (optionally asking for fewer scopes than the client did, once)."""

    def __init__(self, base: str, email: str, password: str) -> None:
        self.base = base
        self.http = httpx.AsyncClient(follow_redirects=False, timeout=30)
        self.email, self.password = email, password
        self.code: str | None = None
        self.state: str | None = None
        self.narrow_to: str | None = None
        self.authorizations = 0
        self.scopes_asked: list[str] = []

    async def sign_in(self) -> None:
        r = await self.http.post(
            f"{self.base}/api/v1/auth/login", json={"email": self.email, "password": self.password}
        )
        if r.status_code != 200:
            raise RuntimeError(f"sign-in answered {r.status_code}: {r.text[:200]}")

    async def redirect_handler(self, url: str) -> None:
        """The SDK 'opens' the authorization URL: consent as the signed-in person."""
        self.authorizations += 1
        parts = urlparse(url)
        query = parse_qs(parts.query)
        if self.narrow_to is not None:
            query["scope"] = [self.narrow_to]
            self.narrow_to = None
            url = urlunparse(parts._replace(query=urlencode(query, doseq=True)))
        self.scopes_asked.append(query.get("scope", [""])[0])
        page = await self.http.get(url)
        if page.status_code != 200:
            raise RuntimeError(f"consent page answered {page.status_code}: {page.text[:300]}")
        csp = page.headers.get("content-security-policy", "")
        if "frame-ancestors 'none'" not in csp:
            raise RuntimeError(f"consent CSP lacks frame-ancestors: {csp}")
        fields = [
            (html.unescape(k), html.unescape(v))
            for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text)
        ]
        org = re.search(r'<option value="([^"]+)">', page.text)
        if not org:
            raise RuntimeError("no organization to choose")
        fields += [("org_id", html.unescape(org.group(1))), ("decision", "approve")]
        r = await self.http.post(
            f"{self.base}/oauth/auth",
            content=urlencode(fields),
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        if r.status_code != 303:
            raise RuntimeError(f"consent post answered {r.status_code}: {r.text[:300]}")
        back = urlparse(r.headers["location"])
        if f"{back.scheme}://{back.netloc}{back.path}" != REDIRECT:
            raise RuntimeError(f"redirected to {r.headers['location']}")
        q = parse_qs(back.query)
        if q.get("iss", [None])[0] != self.base:
            raise RuntimeError(f"iss {q.get('iss')}")
        self.code, self.state = q["code"][0], q.get("state", [None])[0]

    async def callback_handler(self):
        """The SDK waits for the redirect back: the code the consent produced."""
        if self.code is None:
            raise RuntimeError("no authorization code")
        code, state, self.code = self.code, self.state, None
        if MODERN:
            return AuthorizationCodeResult(code=code, state=state, iss=self.base)
        return code, state

    async def grants(self) -> list[dict]:
        r = await self.http.get(f"{self.base}/api/v1/oauth/grants")
        r.raise_for_status()
        return r.json()["grants"]

    async def revoke(self, grant_id: str) -> int:
        return (await self.http.delete(f"{self.base}/api/v1/oauth/grants/{grant_id}")).status_code


def provider(mcp_url: str, storage: Storage, browser: Browser) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="Breeze Python SDK OAuth test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


async def session_run(mcp_url: str, auth: OAuthClientProvider, work):
    if MODERN:
        async with httpx.AsyncClient(auth=auth, timeout=30) as http:
            async with streamable_http_client(mcp_url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await work(session)
    async with streamablehttp_client(mcp_url, auth=auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo-json", required=True)
    ap.add_argument("--label", default="py-oauth", help="the name on each PASS/FAIL line")
    args = ap.parse_args()
    with open(args.demo_json, encoding="utf-8") as f:
        demo = json.load(f)
    mcp_url = demo["mcp_url"]
    u = urlparse(mcp_url)
    base = f"{u.scheme}://{u.netloc}"
    browser = Browser(base, demo["admin"]["email"], demo["admin"]["password"])
    storage = Storage()
    auth = provider(mcp_url, storage, browser)
    failed = 0

    async def step(name: str, fn) -> None:
        nonlocal failed
        try:
            await fn()
            print(f"PASS {args.label} {name}", flush=True)
        except BaseException as e:  # noqa: BLE001 - the report names whatever went wrong
            failed += 1
            while isinstance(e, BaseExceptionGroup) and e.exceptions:
                e = e.exceptions[0]
            print(f"FAIL {args.label} {name}: {type(e).__name__}: {str(e)[:400]}", flush=True)

    async def authorize_and_list() -> None:
        await browser.sign_in()

        async def work(s: ClientSession):
            tools = (await s.list_tools()).tools
            return [t.name for t in tools]

        names = await session_run(mcp_url, auth, work)
        if not storage.client or not storage.client.client_id.startswith("bzcl_"):
            raise RuntimeError(f"no registered client: {storage.client}")
        if storage.client.client_secret:
            raise RuntimeError("a public client got a secret")
        if not storage.tokens or not storage.tokens.refresh_token:
            raise RuntimeError("no refresh token")
        if "query_devices" not in names:
            raise RuntimeError(f"query_devices not listed: {names}")

    async def call_a_tool() -> None:
        async def work(s: ClientSession):
            return await s.call_tool("query_devices", {})

        r = await session_run(mcp_url, auth, work)
        if getattr(r, "is_error", None) or getattr(r, "isError", None):
            raise RuntimeError(f"query_devices failed: {r.content}")

    async def refresh() -> None:
        before = storage.tokens.refresh_token
        # The access token's lifetime passes: the SDK refreshes before its next request.
        auth.context.token_expiry_time = time.time() - 1
        authorizations = browser.authorizations
        await session_run(mcp_url, auth, lambda s: s.list_tools())
        if storage.tokens.refresh_token == before:
            raise RuntimeError("the refresh token did not rotate")
        if browser.authorizations != authorizations:
            raise RuntimeError("the SDK asked the user again instead of refreshing")

    async def step_up() -> None:
        # A separate client whose first grant is read-only (the person narrowed it).
        s2 = Storage()
        a2 = provider(mcp_url, s2, browser)
        browser.narrow_to = "mcp:read"

        async def work(s: ClientSession):
            first = browser.authorizations
            # Tier 2: 403 insufficient_scope; the SDK re-authorizes with the challenged scopes.
            r = await s.call_tool("set_device_context", {})
            return first, r

        first, r = await session_run(mcp_url, a2, work)
        if s2.tokens is None or "mcp:write" not in (s2.tokens.scope or ""):
            raise RuntimeError(f"no stepped-up token: {s2.tokens and s2.tokens.scope}")
        if browser.authorizations != first + 1:
            raise RuntimeError(f"{browser.authorizations - first} authorizations for the step-up")
        asked = browser.scopes_asked[-1].split()
        # 1.x asks for the challenged scopes; 2.x for their union with what it asked before
        # (SEP-2350): everything the resource lists, of which the person granted only mcp:read.
        if MODERN and not {"mcp:read", "mcp:write"} <= set(asked):
            raise RuntimeError(f"the step-up asked for {asked}")
        if not MODERN and sorted(asked) != ["mcp:read", "mcp:write"]:
            raise RuntimeError(f"the step-up asked for {asked}")
        text = " ".join(getattr(c, "text", "") for c in r.content)
        if "scope" in text and "mcp:write" in text:
            raise RuntimeError(f"still refused for scope after stepping up: {text[:200]}")

    async def revoke_then_reauth() -> None:
        grants = await browser.grants()
        mine = [
            g for g in grants if g["client_id"] == storage.client.client_id and g["state"] == "Connected"
        ]
        if not mine:
            raise RuntimeError(f"no Connected grant: {grants}")
        for g in mine:
            status = await browser.revoke(g["id"])
            if status != 200:
                raise RuntimeError(f"revoke answered {status}")
        async with httpx.AsyncClient() as raw:
            r = await raw.post(
                mcp_url,
                headers={
                    "authorization": f"Bearer {storage.tokens.access_token}",
                    "accept": "application/json, text/event-stream",
                },
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
        if r.status_code != 401:
            raise RuntimeError(f"a revoked grant's token got {r.status_code}")
        if 'error="invalid_token"' not in r.headers.get("www-authenticate", ""):
            raise RuntimeError(f"challenge: {r.headers.get('www-authenticate')}")
        # The refresh is refused too ("Needs re-auth"); the SDK then asks the person again.
        old_refresh = storage.tokens.refresh_token
        async with httpx.AsyncClient() as raw:
            r = await raw.post(
                f"{base}/oauth/token",
                data={
                    "grant_type": "refresh_token",
                    "client_id": storage.client.client_id,
                    "refresh_token": old_refresh,
                },
            )
        if r.status_code != 400 or r.json().get("error") != "invalid_grant":
            raise RuntimeError(f"refresh after revocation: {r.status_code} {r.text[:200]}")
        auth.context.token_expiry_time = time.time() - 1
        authorizations = browser.authorizations
        names = await session_run(mcp_url, auth, lambda s: s.list_tools())
        if browser.authorizations != authorizations + 1:
            raise RuntimeError("the SDK did not re-authorize")
        if not names.tools:
            raise RuntimeError("no tools after re-authorizing")
        if storage.tokens.refresh_token == old_refresh:
            raise RuntimeError("no new tokens")

    await step("discovery-dcr-authorize-token-list", authorize_and_list)
    await step("tools-call", call_a_tool)
    await step("refresh-on-expiry", refresh)
    await step("scope-step-up-on-403", step_up)
    await step("revoke-then-401-then-reauth", revoke_then_reauth)
    total = 5
    print(f"{args.label}: {total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
