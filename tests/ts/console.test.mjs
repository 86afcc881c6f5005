// The human console end to end, in headless Chromium (Debian's, driven by playwright-core) with
// the browser's virtual WebAuthn authenticator (Chrome DevTools Protocol, WebAuthn domain): alice
// and bob open the invite links the operator minted, each registers a passkey, signs out and
// signs in again with the passkey alone; alice vends an endpoint with the keyboard alone and the
// credential she copies from the page drains a todo through the official TypeScript SDK; bob
// asks alice for friendship and she approves it; alice approves the SDK's OAuth connection on
// /authorize without an approval code. Every screen is screenshotted and checked with
// @axe-core/playwright (no serious or critical violation).
// Run by tests/e2e TestConsoleBrowser, which sets:
//   SB_BASE            the console's base URL (http://localhost:PORT)
//   SB_INVITE_ALICE    alice's one-time sign-in link; SB_INVITE_ALICE2 a second one (another
//                      device); SB_INVITE_BOB bob's
//   SB_PUSH_URL        POST ?endpoint=&queue=&title= -> {"todo_id"}: a todo for an endpoint
//   SB_CHROMIUM        the Chromium executable
//   SB_SHOTS           the directory for the screenshots
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };
const base = env('SB_BASE');
const shots = env('SB_SHOTS');
fs.mkdirSync(shots, { recursive: true });

const structured = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

async function push(endpoint, title) {
  const res = await fetch(`${env('SB_PUSH_URL')}?${new URLSearchParams({ endpoint, queue: 'inbox', title })}`, { method: 'POST' });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).todo_id;
}

// human is one person's browser: a context of their own (cookies) and a page with a virtual
// platform authenticator (resident keys, user verification) attached.
async function human(browser, name) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true,
      isUserVerified: true, automaticPresenceSimulation: true },
  });
  return { name, context, page };
}

const checked = [];
// look screenshots the page and checks it with axe: no serious or critical violation.
async function look(page, shot) {
  const file = path.join(shots, `${shot}.png`);
  await page.screenshot({ path: file, fullPage: true });
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join('; ')}`), [],
    `accessibility of ${shot} (${page.url()})`);
  checked.push(shot);
}

async function register(h, inviteURL) {
  const res = await h.page.goto(inviteURL);
  assert.equal(res.status(), 200, await res.text());
  await look(h.page, `invite-${h.name}`);
  await Promise.all([h.page.waitForURL(`${base}/console/`), h.page.click('#passkey-register')]);
  assert.match(await h.page.textContent('header'), new RegExp(h.name));
}

async function signOutAndIn(h) {
  await Promise.all([h.page.waitForURL(`${base}/console/signin`), h.page.click('button:has-text("Sign out")')]);
  // Signed out: the console sends the browser back to the sign-in page.
  await h.page.goto(`${base}/console/`);
  assert.equal(h.page.url(), `${base}/console/signin`);
  await look(h.page, `signin-${h.name}`);
  await Promise.all([h.page.waitForURL(`${base}/console/`), h.page.click('#passkey-signin')]);
  assert.match(await h.page.textContent('header'), new RegExp(h.name));
}

// callbackServer is the OAuth client's loopback redirect URI.
async function callbackServer() {
  let deliver;
  const code = new Promise((resolve) => { deliver = resolve; });
  const srv = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://127.0.0.1');
    res.end('You can close this window.');
    if (u.pathname === '/callback') deliver({ code: u.searchParams.get('code'), error: u.searchParams.get('error') });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${srv.address().port}/callback`, code, close: () => srv.close() };
}

function provider(redirectUrl, onRedirect) {
  const saved = { tokens: [], client: undefined, verifier: undefined };
  return {
    get redirectUrl() { return redirectUrl; },
    get clientMetadata() {
      return { client_name: 'Switchboard console test', redirect_uris: [redirectUrl],
        grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
    },
    clientInformation() { return saved.client; },
    saveClientInformation(info) { saved.client = info; },
    tokens() { return saved.tokens.at(-1); },
    saveTokens(t) { saved.tokens.push(t); },
    redirectToAuthorization(url) { onRedirect(url); },
    saveCodeVerifier(v) { saved.verifier = v; },
    codeVerifier() { return saved.verifier; },
  };
}

test('the console: passkeys, vend, friends, OAuth consent, every screen accessible', async (t) => {
  const browser = await chromium.launch({ executablePath: env('SB_CHROMIUM'), headless: true, args: ['--no-sandbox'] });
  t.after(() => browser.close());
  const alice = await human(browser, 'alice');
  const bob = await human(browser, 'bob');

  // 1. Each registers a passkey from their invite, then signs in with it alone.
  await register(alice, env('SB_INVITE_ALICE'));
  await register(bob, env('SB_INVITE_BOB'));
  // The session cookie: __Host- prefixed, Secure, HttpOnly, SameSite=Lax, Path=/ (Chromium
  // keeps a Secure cookie from http://localhost, a secure context).
  const [cookie] = (await alice.context.cookies(base)).filter((c) => c.name.startsWith('__Host-sb_session'));
  assert.ok(cookie, 'a session cookie');
  assert.deepEqual([cookie.name, cookie.secure, cookie.httpOnly, cookie.sameSite, cookie.path],
    ['__Host-sb_session', true, true, 'Lax', '/']);
  await signOutAndIn(alice);
  await signOutAndIn(bob);
  await look(alice.page, 'home-empty');

  // A used invite link is refused.
  const again = await bob.page.goto(env('SB_INVITE_ALICE'));
  assert.equal(again.status(), 404);
  await look(bob.page, 'invite-used');

  // 2. alice vends an endpoint with the keyboard alone: Tab to each field, type, Enter sends.
  const p = alice.page;
  await p.goto(`${base}/console/vend`);
  await look(p, 'vend');
  const tabTo = async (id) => {
    for (let i = 0; i < 60; i++) {
      if (await p.evaluate(() => document.activeElement?.id) === id) return;
      await p.keyboard.press('Tab');
    }
    assert.fail(`Tab never reached #${id}`);
  };
  await tabTo('agent');
  await p.keyboard.type('worker');
  await tabTo('queues');
  await p.keyboard.type('inbox');
  await p.keyboard.press('Enter');
  await p.waitForSelector('#credential');
  const credential = (await p.textContent('#credential')).trim();
  const mcpURL = new URL((await p.textContent('#mcp-url')).trim());
  assert.match(credential, /^sbk_/);
  assert.match(await p.textContent('#claude-add'), new RegExp(credential));
  await look(p, 'credential');
  const endpointHref = await p.getAttribute('a[href^="/console/endpoints/"]', 'href');
  const endpointID = endpointHref.split('/').pop();

  // Bad input: an inline message, nothing written.
  await p.goto(`${base}/console/vend`);
  await p.fill('#agent', 'worker');
  await p.fill('#queues', 'not a queue!');
  await p.click('button[type=submit]:has-text("Vend")');
  await p.waitForSelector('[role=alert]');
  assert.match(await p.textContent('[role=alert]'), /queue names/i);
  await look(p, 'vend-error');

  // 3. The copied credential drains a todo through the TypeScript SDK.
  {
    const transport = new StreamableHTTPClientTransport(mcpURL, { requestInit: { headers: { Authorization: `Bearer ${credential}` } } });
    const client = new Client({ name: 'console-test', version: '0.0.0' });
    await client.connect(transport);
    const id = await push(endpointID, 'from the console');
    const claimed = structured(await client.callTool({ name: 'claim_next', arguments: { queue: 'inbox' } }));
    assert.equal(claimed.todo?.id, id, JSON.stringify(claimed));
    assert.equal(structured(await client.callTool({ name: 'complete', arguments: { id } })).state, 'done');
    await transport.terminateSession().catch(() => {});
    await client.close();
  }

  // The endpoint's page and its two confirmations.
  await p.goto(`${base}${endpointHref}`);
  await look(p, 'endpoint');
  await p.goto(`${base}${endpointHref}/rotate`);
  await look(p, 'rotate-confirm');
  await p.goto(`${base}${endpointHref}/revoke`);
  await look(p, 'revoke-confirm');
  await p.goto(`${base}/console/`);
  await push(endpointID, 'waiting');
  await p.reload();
  assert.match(await p.textContent('main'), /worker/);
  await look(p, 'home');

  // 4. bob asks alice for friendship; alice approves.
  await bob.page.goto(`${base}/console/friends`);
  await bob.page.fill('#to', 'alice');
  await bob.page.click('button:has-text("Send request")');
  await bob.page.locator('main', { hasText: 'you → alice' }).waitFor();
  assert.match(await bob.page.textContent('main'), /you → alice · pending/);
  await look(bob.page, 'friends-bob');
  await p.goto(`${base}/console/friends`);
  await p.click('button:has-text("Approve")');
  await p.locator('main', { hasText: 'approved' }).waitFor();
  assert.match(await p.textContent('main'), /bob → you · approved/);
  await look(p, 'friends-alice');

  // bob sees alice's endpoint as not found, like an unknown id.
  const theirs = await bob.page.goto(`${base}${endpointHref}`);
  assert.equal(theirs.status(), 404);
  await look(bob.page, 'notfound');

  // 5. alice approves the SDK's OAuth connection on /authorize, signed in: no approval code.
  {
    const cb = await callbackServer();
    t.after(cb.close);
    let redirected;
    const toBrowser = new Promise((resolve) => { redirected = resolve; });
    const prov = provider(cb.url, redirected);
    let transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: prov });
    let client = new Client({ name: 'console-oauth', version: '0.0.0' });
    await assert.rejects(client.connect(transport), UnauthorizedError);
    const authURL = await toBrowser;
    const res = await p.goto(String(authURL));
    assert.equal(res.status(), 200, await res.text());
    assert.equal(await p.locator('input[name="approval_code"]').count(), 0, 'no approval code for the signed-in owner');
    assert.match(await p.textContent('main'), /signed in as alice/);
    await look(p, 'consent');
    const away = p.waitForEvent('request', { predicate: (r) => r.url().startsWith(cb.url) });
    await p.click('button[name="decision"][value="approve"]');
    await away;
    const { code, error } = await cb.code;
    assert.equal(error, null);
    assert.ok(code);
    await transport.finishAuth(code);
    transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: prov });
    client = new Client({ name: 'console-oauth', version: '0.0.0' });
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.ok(tools.some((x) => x.name === 'claim_next'));
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
  // The grant is listed on the endpoint's page.
  await p.goto(`${base}${endpointHref}`);
  assert.match(await p.textContent('main'), /Switchboard console test/);
  await look(p, 'endpoint-grant');

  // Revoking the grant ends it.
  await p.click('button:has-text("Revoke grant")');
  await p.locator('main', { hasText: 'revoked' }).waitFor();

  // Rotate (no grace: the old credential stops at once), then revoke, each through its
  // confirmation page.
  await p.goto(`${base}${endpointHref}/rotate`);
  await p.fill('#grace', '');
  await p.click('button:has-text("Rotate the credential")');
  await p.waitForSelector('#credential');
  const rotated = (await p.textContent('#credential')).trim();
  assert.notEqual(rotated, credential);
  {
    const old = new Client({ name: 'console-old', version: '0.0.0' });
    await assert.rejects(old.connect(new StreamableHTTPClientTransport(mcpURL,
      { requestInit: { headers: { Authorization: `Bearer ${credential}` } } })), 'the rotated-out credential is refused');
    const fresh = new Client({ name: 'console-new', version: '0.0.0' });
    const tr = new StreamableHTTPClientTransport(mcpURL, { requestInit: { headers: { Authorization: `Bearer ${rotated}` } } });
    await fresh.connect(tr);
    await tr.terminateSession().catch(() => {});
    await fresh.close();
  }
  await p.goto(`${base}${endpointHref}/revoke`);
  await p.click('button:has-text("Revoke the endpoint")');
  await p.locator('main', { hasText: 'revoked' }).waitFor();
  assert.equal(await p.locator('a:has-text("Rotate the credential")').count(), 0);

  // 6. A second invite adds a passkey (alice on another device); she lists and removes one.
  {
    const device2 = await human(browser, 'alice');
    await register(device2, env('SB_INVITE_ALICE2'));
    await device2.page.goto(`${base}/console/passkeys`);
    assert.equal(await device2.page.locator('button:has-text("Remove")').count(), 2);
    await device2.page.click('button:has-text("Remove") >> nth=0');
    await device2.page.locator('main').waitFor();
    await device2.page.waitForFunction(() => document.querySelectorAll('button.danger').length === 1);
    await device2.context.close();
  }

  // 7. Audit and passkeys.
  await p.goto(`${base}/console/audit`);
  assert.match(await p.textContent('main'), /grant\.approve/);
  assert.match(await p.textContent('main'), /friend\.approved/);
  await look(p, 'audit');
  await p.goto(`${base}/console/passkeys`);
  await look(p, 'passkeys');

  // Readable on a phone.
  await p.setViewportSize({ width: 390, height: 844 });
  await p.goto(`${base}/console/`);
  await look(p, 'home-phone');
  await p.goto(`${base}/console/vend`);
  await look(p, 'vend-phone');

  console.log(`screenshots (${checked.length}, each checked with axe): ${shots}`);
});
