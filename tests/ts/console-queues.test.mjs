// The console's queue and webhook screens end to end, in headless Chromium (Debian's, driven by
// playwright-core) with the browser's virtual WebAuthn authenticator: alice registers a passkey
// from her invite; she sets the Stripe secret of her webhook in the password field, and then a
// delivery signed with it is accepted while one signed with the secret Switchboard minted is
// refused and counted on the screen; a todo fails into the dead letters (claimed and failed
// through the official TypeScript SDK) and she redrives it from the dead-letter view, with the
// count shown before it happens. Every screen is screenshotted and checked with
// @axe-core/playwright (no serious or critical violation).
// Run by tests/e2e TestConsoleQueuesBrowser, which sets:
//   SB_BASE        the console's base URL (http://localhost:PORT)
//   SB_INVITE      alice's one-time sign-in link
//   SB_MCP_URL     alice's endpoint's MCP URL; SB_CRED its credential
//   SB_WEBHOOK     the id of alice's stripe webhook; SB_INGEST_URL its ingest URL
//   SB_MINTED      the secret Switchboard minted for it (Stripe never uses it)
//   SB_PUSH_URL    POST ?title= -> {"todo_id"}: a todo in alice's queue inbox
//   SB_ROLLUP_URL  POST: runs the home chart's rollup (the server's maintenance loop is off)
//   SB_CHROMIUM    the Chromium executable
//   SB_SHOTS       the directory for the screenshots
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };
const base = env('SB_BASE');
const shots = env('SB_SHOTS');
const webhook = env('SB_WEBHOOK');
fs.mkdirSync(shots, { recursive: true });

const structured = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

async function push(title) {
  const res = await fetch(`${env('SB_PUSH_URL')}?${new URLSearchParams({ title })}`, { method: 'POST' });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).todo_id;
}

async function rollup() {
  const res = await fetch(env('SB_ROLLUP_URL'), { method: 'POST' });
  assert.equal(res.status, 200, await res.text());
}

// look screenshots the page and checks it with axe: no serious or critical violation.
async function look(page, shot) {
  await page.screenshot({ path: path.join(shots, `queues-${shot}.png`), fullPage: true });
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join('; ')}`), [],
    `accessibility of ${shot} (${page.url()})`);
}

// stripe sends one delivery signed with secret, as Stripe does (Stripe-Signature t=,v1=).
async function stripe(secret, id) {
  const body = JSON.stringify({ id, object: 'event', type: 'payment_intent.succeeded', data: { object: { amount: 4200 } } });
  const t = Math.floor(Date.now() / 1000);
  const v1 = crypto.createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  return fetch(env('SB_INGEST_URL'), { method: 'POST', body,
    headers: { 'Content-Type': 'application/json', 'Stripe-Signature': `t=${t},v1=${v1}` } });
}

test('the console: a Stripe secret set in the form, a dead letter redriven, every screen accessible', async (t) => {
  const browser = await chromium.launch({ executablePath: env('SB_CHROMIUM'), headless: true, args: ['--no-sandbox'] });
  t.after(() => browser.close());
  const context = await browser.newContext();
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true,
      isUserVerified: true, automaticPresenceSimulation: true },
  });
  const res = await page.goto(env('SB_INVITE'));
  assert.equal(res.status(), 200, await res.text());
  await Promise.all([page.waitForURL(`${base}/console/`), page.click('#passkey-register')]);

  // 1. The Stripe secret, in the password field.
  const provided = `whsec_${crypto.randomBytes(24).toString('hex')}`;
  await page.goto(`${base}/console/webhooks`);
  await look(page, 'webhooks');
  await page.click(`a[href="/console/webhooks/${webhook}"]`);
  await page.waitForSelector('#secret');
  assert.equal(await page.getAttribute('#secret', 'type'), 'password');
  await look(page, 'webhook');
  // A wrong shape first: refused inline, the field empty again, nothing written.
  await page.fill('#secret', 'sk_live_not_a_webhook_secret');
  await page.click('button:has-text("Set the secret")');
  await page.waitForSelector('[role=alert]');
  assert.match(await page.textContent('[role=alert]'), /Stripe signing secret/);
  assert.equal(await page.inputValue('#secret'), '');
  assert.ok(!(await page.content()).includes('sk_live_not_a_webhook_secret'), 'the refused secret is echoed');
  await look(page, 'webhook-secret-refused');
  await page.fill('#secret', provided);
  await Promise.all([page.waitForURL(/secret=set/), page.click('button:has-text("Set the secret")')]);
  assert.match(await page.textContent('[role=status]'), /in force/);
  assert.equal(await page.inputValue('#secret'), '');
  assert.ok(!(await page.content()).includes(provided), 'the secret is in the page');

  // A delivery signed with the provider's secret is accepted; one signed with the minted secret
  // is refused, and the screen counts it (the receiver writes refusals at most once a second).
  const ok = await stripe(provided, `evt_${crypto.randomUUID()}`);
  assert.ok(ok.status >= 200 && ok.status < 300, `provider-signed delivery: ${ok.status} ${await ok.text()}`);
  const refused = await stripe(env('SB_MINTED'), `evt_${crypto.randomUUID()}`);
  assert.equal(refused.status, 401, await refused.text());
  const deadline = Date.now() + 20000;
  for (;;) {
    await page.goto(`${base}/console/webhooks/${webhook}`);
    if ((await page.textContent('#refused-total')).trim() === '1') break;
    assert.ok(Date.now() < deadline, `refused count stays ${await page.textContent('#refused-total')}`);
    await page.waitForTimeout(300);
  }
  const main = await page.textContent('main');
  assert.match(main, /bad signature 1/);
  assert.match(main, /accepted/);
  await look(page, 'webhook-log');
  await page.click('a[href*="/deliveries/"]');
  await page.waitForSelector('h1:has-text("Delivery")');
  await look(page, 'delivery');
  await page.click('a:has-text("Dry run the rules")');
  await page.waitForSelector('h3:has-text("would be")');
  await look(page, 'webhook-dry-run');

  // 2. A todo fails into the dead letters (max_attempts is 1 here), through the SDK.
  const transport = new StreamableHTTPClientTransport(new URL(env('SB_MCP_URL')),
    { requestInit: { headers: { Authorization: `Bearer ${env('SB_CRED')}` } } });
  const client = new Client({ name: 'console-queues-test', version: '0.0.0' });
  await client.connect(transport);
  t.after(() => client.close());
  // Drain what the accepted delivery made, then the todo that will fail.
  for (;;) {
    const c = structured(await client.callTool({ name: 'claim_next', arguments: { queue: 'inbox' } }));
    if (c.empty) break;
    await client.callTool({ name: 'complete', arguments: { id: c.todo.id } });
  }
  const id = await push('charge the card');
  const claimed = structured(await client.callTool({ name: 'claim_next', arguments: { queue: 'inbox' } }));
  assert.equal(claimed.todo?.id, id, JSON.stringify(claimed));
  const failed = structured(await client.callTool({ name: 'fail', arguments: { id, result: { error: 'card declined' } } }));
  assert.equal(failed.dead_letter, true, JSON.stringify(failed));
  await rollup(); // the chart counts the dead letter before it is redriven

  await page.goto(`${base}/console/queues`);
  await look(page, 'queues');
  await page.goto(`${base}/console/todos/${id}`);
  assert.match(await page.textContent('main'), /card declined/);
  await look(page, 'todo-dead');
  await page.goto(`${base}/console/deadletters`);
  assert.match(await page.textContent('main'), /charge the card/);
  await look(page, 'deadletters');
  await page.check(`input[name=id][value="${id}"]`);
  await page.click('button[value="redrive:selected"]');
  await page.waitForSelector('h1:has-text("Redrive 1 todo(s)?")');
  await look(page, 'redrive-confirm');
  await Promise.all([page.waitForURL(/acted=redrive/), page.click('button:has-text("Redrive 1 todo(s)")')]);
  assert.match(await page.textContent('[role=status]'), /1 todo\(s\) redriven/);
  assert.ok(!(await page.textContent('main')).includes('charge the card'), 'still in the dead letters');
  const again = structured(await client.callTool({ name: 'get_todo', arguments: { id } }));
  assert.equal(again.state, 'pending', JSON.stringify(again));
  await page.goto(`${base}/console/todos/${id}`);
  assert.match(await page.textContent('main'), /human:alice/);
  await look(page, 'todo-redriven');
  await rollup();
  await page.goto(`${base}/console/`);
  await page.waitForSelector('svg[role=img]');
  // The chart's description counts what finished: the delivery's todo done, the card dead-lettered.
  assert.match(await page.textContent('#chart-m-d'), /1 done, 0 failed, 1 dead-lettered/);
  await look(page, 'home-chart');
});
