// Hosted-agent authorization end to end: the official TypeScript SDK client
// (StreamableHTTPClientTransport with an OAuthClientProvider) and mcp-remote 0.15.1 discover
// Switchboard's authorization server from a 401, identify themselves (Dynamic Client
// Registration, or a Client ID Metadata Document served over HTTPS by the Go test), and their
// authorization URL is answered in headless Chromium (Debian's, driven by playwright-core): the
// approval code is typed in and Approve pressed. Then they list the tools, drain a todo, and the
// SDK refreshes its token once the short-lived access token has expired.
// Run by tests/e2e TestOAuthTypeScript, which sets:
//   SB_MCP_URL        the endpoint's MCP URL
//   SB_MINT_URL       POST -> {"code"}: a fresh approval code for the endpoint (endpoint connect)
//   SB_PUSH_URL       POST ?queue=&title= -> {"todo_id"}: a todo for the endpoint
//   SB_CIMD_URL       the https URL of a client metadata document (redirect http://127.0.0.1/callback)
//   SB_CHROMIUM       the Chromium executable
//   SB_ACCESS_TTL     the server's access token life, in seconds
//   SB_SCREENSHOT     where to save a screenshot of the consent page (optional)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };
const mcpURL = new URL(env('SB_MCP_URL'));
const ttl = Number(env('SB_ACCESS_TTL'));
const here = path.dirname(fileURLToPath(import.meta.url));

async function post(url) {
  const res = await fetch(url, { method: 'POST' });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}
const mint = async () => (await post(env('SB_MINT_URL'))).code;
const push = async (title) => (await post(`${env('SB_PUSH_URL')}?${new URLSearchParams({ queue: 'inbox', title })}`)).todo_id;

// issuer is the issuer of the server metadata: every authorization response names it (RFC 9207).
async function issuer() {
  const res = await fetch(new URL('/.well-known/oauth-authorization-server', mcpURL));
  const meta = await res.json();
  assert.equal(meta.authorization_response_iss_parameter_supported, true);
  assert.ok(meta.issuer);
  return meta.issuer;
}

// approve opens the authorization URL in headless Chromium, types a fresh approval code and
// presses Approve (or decision); it resolves once the browser has been sent to the redirect
// URI. It counts the browser's requests to the server.
async function approve(authorizationURL, { screenshot, decision = 'approve' } = {}) {
  const t0 = performance.now();
  const browser = await chromium.launch({ executablePath: env('SB_CHROMIUM'), headless: true, args: ['--no-sandbox'] });
  const launchMs = performance.now() - t0;
  try {
    const page = await browser.newPage();
    let requests = 0;
    page.on('request', (r) => { if (new URL(r.url()).origin === mcpURL.origin) requests++; });
    const code = await mint();
    const res = await page.goto(String(authorizationURL));
    assert.equal(res.status(), 200, await res.text());
    assert.equal(await page.locator('script').count(), 0, 'the consent page has no script');
    await page.fill('input[name="approval_code"]', code, { timeout: 5000 }).catch(async (err) => {
      throw new Error(`${err.message}\n${authorizationURL}\n${await page.content()}`);
    });
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    // Done when the redirect URI has answered (or the client's server hung up on the browser).
    const away = (r) => new URL(r.url()).origin !== mcpURL.origin;
    const answered = Promise.race([
      page.waitForEvent('response', { predicate: away }).then((r) => r.url()),
      page.waitForEvent('requestfailed', { predicate: away }).then((r) => r.url()),
    ]);
    await page.click(`button[name="decision"][value="${decision}"]`);
    const timeout = new Promise((_, reject) => setTimeout(async () => {
      reject(new Error(`the browser stayed at ${page.url()}:\n${await page.content().catch(() => '')}`));
    }, 15000));
    return { requests, launchMs, landed: await Promise.race([answered, timeout]) };
  } finally {
    await browser.close();
  }
}

// callbackServer is the client's loopback redirect URI: it hands over the authorization code.
async function callbackServer() {
  let deliver;
  const code = new Promise((resolve) => { deliver = resolve; });
  const srv = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://127.0.0.1');
    res.end('You can close this window.');
    if (u.searchParams.get('error')) console.log('callback:', req.url);
    if (u.pathname === '/callback') {
      deliver({ code: u.searchParams.get('code'), error: u.searchParams.get('error'), iss: u.searchParams.get('iss') });
    }
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${srv.address().port}/callback`, code, close: () => srv.close() };
}

// provider is an in-memory OAuthClientProvider; it records what the SDK saves.
function provider(redirectUrl, clientMetadataUrl, onRedirect) {
  const saved = { tokens: [], client: undefined, verifier: undefined };
  return {
    saved,
    clientMetadataUrl,
    get redirectUrl() { return redirectUrl; },
    get clientMetadata() {
      return { client_name: 'Switchboard SDK test', redirect_uris: [redirectUrl],
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

// countingFetch counts the client's HTTP requests to the server, by path.
function countingFetch(log) {
  return async (input, init) => {
    const u = new URL(input instanceof Request ? input.url : String(input));
    log.push(`${init?.method ?? (input instanceof Request ? input.method : 'GET')} ${u.pathname}`);
    return fetch(input, init);
  };
}

const structured = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

async function drain(client, title) {
  const id = await push(title);
  const claimed = structured(await client.callTool({ name: 'claim_next', arguments: { queue: 'inbox' } }));
  assert.equal(claimed.todo?.id, id, JSON.stringify(claimed));
  const done = structured(await client.callTool({ name: 'complete', arguments: { id } }));
  assert.equal(done.state, 'done');
}

// sdkFlow runs the SDK's whole flow; clientMetadataUrl selects a metadata document over DCR.
async function sdkFlow(t, clientMetadataUrl, screenshot) {
  const cb = await callbackServer();
  t.after(cb.close);
  const requests = [];
  let authorizeAt;
  let redirected;
  const toBrowser = new Promise((resolve) => { redirected = resolve; });
  // The document registers http://127.0.0.1/callback: a loopback redirect matches on any port.
  const p = provider(cb.url, clientMetadataUrl, (url) => { authorizeAt = performance.now(); redirected(url); });
  const fetchFn = countingFetch(requests);
  const started = performance.now();

  // 1. initialize -> 401 -> discovery, registration, the authorization URL.
  let transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: p, fetch: fetchFn });
  let client = new Client({ name: 'sdk-oauth', version: '0.0.0' });
  await assert.rejects(client.connect(transport), UnauthorizedError);
  const authURL = await toBrowser;
  assert.equal(authURL.searchParams.get('resource'), mcpURL.href);
  assert.equal(authURL.searchParams.get('code_challenge_method'), 'S256');
  if (clientMetadataUrl) assert.equal(authURL.searchParams.get('client_id'), clientMetadataUrl);
  const beforeBrowser = requests.length;

  // 2. the human, in Chromium.
  const browser = await approve(authURL, { screenshot });
  const { code, error, iss } = await cb.code;
  assert.equal(error, null);
  assert.ok(code);
  assert.equal(iss, await issuer());

  // 3. the exchange, then a session with the token.
  await transport.finishAuth(code);
  transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: p, fetch: fetchFn });
  client = new Client({ name: 'sdk-oauth', version: '0.0.0' });
  await client.connect(transport);
  t.after(async () => { await transport.terminateSession().catch(() => {}); await client.close(); });
  const { tools } = await client.listTools();
  assert.ok(tools.some((x) => x.name === 'claim_next'));
  const id = await push('first');
  const claimed = structured(await client.callTool({ name: 'claim_next', arguments: { queue: 'inbox' } }));
  const firstCall = performance.now();
  assert.equal(claimed.todo?.id, id);
  assert.equal(structured(await client.callTool({ name: 'complete', arguments: { id } })).state, 'done');
  // One token so far, unless a loaded machine took longer than its lifetime over the calls above.
  const issued = p.saved.tokens.length;
  assert.ok(issued >= 1);
  // Every HTTP request of the flow, up to the first tool call's answer (the complete is after).
  const flow = requests.slice(0, -1);
  console.log(`[${clientMetadataUrl ? 'cimd' : 'dcr'}] round trips: client ${flow.length} (${flow.join(', ')}) ` +
    `+ browser ${browser.requests} (GET /authorize, POST /authorize -> redirect); ` +
    `/authorize to the first tool call's answer ${(firstCall - authorizeAt).toFixed(0)} ms ` +
    `(Chromium's launch ${browser.launchMs.toFixed(0)} ms of it); from the first 401 ${(firstCall - started).toFixed(0)} ms`);

  // 4. the access token expires; the next call gets 401 and the SDK refreshes (rotation). A
  // loaded machine may take longer than a token's lifetime over the drain: then it refreshes
  // again, each time with a new refresh token.
  await new Promise((r) => setTimeout(r, (ttl + 1.5) * 1000));
  await drain(client, 'after expiry');
  const tokens = p.saved.tokens;
  assert.ok(tokens.length > issued, 'the SDK refreshed');
  for (let i = issued; i < tokens.length; i++) {
    assert.notEqual(tokens[i].access_token, tokens[i - 1].access_token);
    assert.notEqual(tokens[i].refresh_token, tokens[i - 1].refresh_token);
  }
}

test('SDK client with Dynamic Client Registration', async (t) => {
  await sdkFlow(t, undefined, process.env.SB_SCREENSHOT);
});

test('SDK client with a Client ID Metadata Document', async (t) => {
  await sdkFlow(t, env('SB_CIMD_URL'));
});

test('Deny in the browser returns access_denied, with the issuer', async (t) => {
  const cb = await callbackServer();
  t.after(cb.close);
  let redirected;
  const toBrowser = new Promise((resolve) => { redirected = resolve; });
  const p = provider(cb.url, undefined, redirected);
  const client = new Client({ name: 'sdk-oauth-deny', version: '0.0.0' });
  await assert.rejects(client.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: p })), UnauthorizedError);
  await approve(await toBrowser, { decision: 'deny' });
  const { code, error, iss } = await cb.code;
  assert.equal(code, null);
  assert.equal(error, 'access_denied');
  assert.equal(iss, await issuer());
});

test('mcp-remote 0.15.1 with the browser the test opens', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sb-mcp-remote-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const urls = path.join(dir, 'browser-urls');
  fs.writeFileSync(urls, '');
  const port = await new Promise((resolve) => {
    const s = http.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [path.join(here, 'node_modules/mcp-remote/dist/proxy.js'), mcpURL.href, String(port), '--allow-http'],
    env: { ...process.env, BROWSER: path.join(here, 'browser-shim.sh'), SB_BROWSER_URLS: urls,
      MCP_REMOTE_CONFIG_DIR: dir, DISPLAY: '', WAYLAND_DISPLAY: '' },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d) => { stderr += d; });
  const client = new Client({ name: 'mcp-remote-test', version: '0.0.0' });
  t.after(async () => { await client.close().catch(() => {}); });

  // mcp-remote connects, gets 401, registers, and opens "the browser": the shim hands the URL
  // here, and Chromium answers the consent page while the connect waits.
  const connecting = client.connect(transport);
  const authURL = await new Promise((resolve, reject) => {
    const deadline = Date.now() + 30000;
    const poll = setInterval(() => {
      const line = fs.readFileSync(urls, 'utf8').split('\n').find((l) => l.startsWith('http'));
      if (line) { clearInterval(poll); resolve(new URL(line)); }
      else if (Date.now() > deadline) { clearInterval(poll); reject(new Error(`mcp-remote opened no browser:\n${stderr}`)); }
    }, 100);
  });
  assert.equal(authURL.searchParams.get('resource'), mcpURL.href, stderr);
  const landed = await approve(authURL).catch((err) => { throw new Error(`${err.message}\nmcp-remote:\n${stderr}`); });
  assert.match(landed.landed, /\/oauth\/callback\?code=/);
  await connecting;
  const { tools } = await client.listTools();
  assert.ok(tools.some((x) => x.name === 'claim_next'), stderr);
  await drain(client, 'through mcp-remote');
});
