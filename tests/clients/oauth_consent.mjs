// The person's side of an OAuth authorization, answered headless the way a signed-in browser
// would: sign in with the demo admin, open the consent page the client was sent to, choose the
// first organization and press Allow. Shared by the OAuth suites (ts_oauth.mjs, mcp_remote.mjs).

const unescape = (s) => s
  .replace(/&#x([0-9a-f]+);/gi, (_, h) => String.fromCodePoint(parseInt(h, 16)))
  .replace(/&#([0-9]+);/g, (_, d) => String.fromCodePoint(parseInt(d, 10)))
  .replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

const cookieOf = (res, name) => {
  const all = res.headers.getSetCookie ? res.headers.getSetCookie() : [];
  const c = all.find((v) => v.startsWith(`${name}=`));
  return c ? c.split(';')[0] : undefined;
};

/** Signs `demo.admin` in at `base`: the session cookie (`name=value`). */
export async function signIn(base, demo) {
  const res = await fetch(`${base}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: demo.admin.email, password: demo.admin.password }),
  });
  if (res.status !== 200) throw new Error(`sign-in answered ${res.status}`);
  return cookieOf(res, 'breeze_session');
}

/**
 * Approves the authorization at `authUrl` as the person signed in with `session`: the URL the
 * server redirects back to (the client's redirect URI with `code`, `state` and `iss`).
 */
export async function consent(base, authUrl, session) {
  const page = await fetch(authUrl, { headers: { cookie: session }, redirect: 'manual' });
  if (page.status !== 200) throw new Error(`consent page answered ${page.status}: ${(await page.text()).slice(0, 300)}`);
  const html = await page.text();
  const csp = page.headers.get('content-security-policy') || '';
  if (!csp.includes("frame-ancestors 'none'")) throw new Error(`consent CSP lacks frame-ancestors: ${csp}`);
  const fields = new URLSearchParams();
  for (const m of html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    fields.append(unescape(m[1]), unescape(m[2]));
  }
  const org = html.match(/<option value="([^"]+)">/);
  if (!org) throw new Error('no organization to choose');
  fields.append('org_id', unescape(org[1]));
  fields.append('decision', 'approve');
  const cookies = `${session}; ${cookieOf(page, 'breeze_consent') || cookieOf(page, '__Host-breeze_consent')}`;
  const res = await fetch(`${base}/oauth/auth`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: cookies },
    body: fields.toString(),
    redirect: 'manual',
  });
  if (res.status !== 303) throw new Error(`consent post answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
  const back = new URL(res.headers.get('location'));
  if (back.searchParams.get('iss') !== base) throw new Error(`iss ${back.searchParams.get('iss')}`);
  return back;
}
