// MCP Events with the Vercel AI SDK's MCP client (@ai-sdk/mcp, pinned in the lockfile): the
// client lists the event types on 2026-07-28, subscribes with its own webhook handler
// (experimental_createMCPEventWebhook) served on 127.0.0.1, passes the server's verification
// challenge, receives signed events after a todo push and after a signed GitHub delivery, then
// claims and completes the todo through the same client's tools. Run by tests/e2e
// TestAISDKEvents (server with SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS=1), which sets:
//   SB_MCP_URL        the endpoint's MCP URL
//   SB_CREDENTIAL     its bearer credential
//   SB_PUSH_URL       a hook that creates a todo with SQL: POST ?queue=&title= -> {"todo_id"}
//   SB_GITHUB_URL     the endpoint's GitHub webhook (target queue inbox)
//   SB_GITHUB_SECRET  its signing secret
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import crypto from 'node:crypto';
import {
  experimental_createMCPClient as createMCPClient,
  experimental_createMCPEventWebhook as createMCPEventWebhook,
} from '@ai-sdk/mcp';

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };

// The client's private subscription store (the SDK asks for a durable one; memory is enough here).
function memoryStore() {
  const byKey = new Map();
  return {
    async get(key) { return byKey.get(key); },
    async getById(id) { return [...byKey.values()].find((s) => s.id === id); },
    async set(s) { byKey.set(s.key, structuredClone(s)); },
    async update(key, patch) { const s = byKey.get(key); if (s) byKey.set(key, { ...s, ...structuredClone(patch) }); },
    async delete(key) { byKey.delete(key); },
  };
}

// serve runs a Web-standard handler on 127.0.0.1 with node:http.
async function serve(handler) {
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const request = new Request(`http://127.0.0.1:${server.address().port}${req.url}`, {
      method: req.method, headers: req.headers, body: req.method === 'POST' ? Buffer.concat(chunks) : undefined,
    });
    const response = await handler(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

test('@ai-sdk/mcp subscribes to todo.claimable by webhook, is rung, and does the todo', async (t) => {
  const store = memoryStore();
  const received = [];
  const waiters = [];
  const onEvent = async ({ subscription, event }) => {
    received.push({ at: Date.now(), subscription, event });
    for (const w of waiters.splice(0)) w();
  };
  const errors = [];
  const hook = await serve(createMCPEventWebhook({ store, onEvent, onError: (e) => errors.push(e) }));
  t.after(() => hook.close());
  const callback = `http://127.0.0.1:${hook.address().port}/mcp-events`;

  const client = await createMCPClient({
    transport: { type: 'http', url: env('SB_MCP_URL'), headers: { Authorization: `Bearer ${env('SB_CREDENTIAL')}` } },
    experimental_events: { store },
  });
  t.after(() => client.close());

  // Listing: both event types, each with its schemas and webhook among its modes.
  const listed = await client.experimental_events.list();
  const names = listed.events.map((e) => e.name).sort();
  assert.deepEqual(names, ['todo.claimable', 'webhook.delivery']);
  for (const e of listed.events) {
    assert.ok(e.delivery.includes('webhook') && e.inputSchema && e.payloadSchema, JSON.stringify(e));
  }

  // Subscribing: the server's signed verification challenge is answered by the SDK's handler.
  const sub = await client.experimental_events.subscribe({
    name: 'todo.claimable', arguments: { queue: 'inbox' },
    delivery: { mode: 'webhook', url: callback, allowInsecureLocalhost: true },
  });
  assert.match(sub.id, /^sub_/);
  assert.ok(sub.refreshBefore && sub.truncated === false, JSON.stringify(sub));

  async function eventFor(todoID, since, what) {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const hit = received.find((r) => r.event.data?.todo?.id === todoID);
      if (hit) {
        console.log(`${what}: event ${hit.event.eventId} ${hit.at - since} ms after it`);
        return hit;
      }
      assert.ok(Date.now() < deadline, `no todo.claimable for ${what} (errors: ${errors.map(String)})`);
      await new Promise((resolve) => { waiters.push(resolve); setTimeout(resolve, 200); });
    }
  }

  // A todo push rings it.
  const pushedAt = Date.now();
  const res = await fetch(`${env('SB_PUSH_URL')}?${new URLSearchParams({ queue: 'inbox', title: 'from a push' })}`, { method: 'POST' });
  assert.equal(res.status, 200);
  const pushed = (await res.json()).todo_id;
  const first = await eventFor(pushed, pushedAt, 'todo push');
  assert.equal(first.event.name, 'todo.claimable');
  assert.equal(first.subscription.id, sub.id);
  assert.equal(first.event.data.todo.title, 'from a push');

  // A signed GitHub delivery makes a todo, and that rings it too.
  const body = JSON.stringify({ action: 'opened', number: 7 });
  const sig = crypto.createHmac('sha256', env('SB_GITHUB_SECRET')).update(body).digest('hex');
  const sentAt = Date.now();
  const gh = await fetch(env('SB_GITHUB_URL'), {
    method: 'POST', body,
    headers: { 'Content-Type': 'application/json', 'X-GitHub-Event': 'issues',
      'X-GitHub-Delivery': crypto.randomUUID(), 'X-Hub-Signature-256': `sha256=${sig}` },
  });
  const ghText = await gh.text();
  assert.equal(gh.status / 100 | 0, 2, ghText);
  const ingested = JSON.parse(ghText);
  const ghTodo = ingested.todos?.[0]?.id ?? ingested.todo_ids?.[0];
  assert.ok(ghTodo, JSON.stringify(ingested));
  const second = await eventFor(ghTodo, sentAt, 'signed GitHub delivery');
  assert.equal(second.event.data.todo.source, 'github');

  // The agent does the pushed todo through the same client's tools.
  const tools = await client.tools();
  const opts = { toolCallId: 'call-1', messages: [] };
  const text = (r) => JSON.parse(r.content.find((c) => c.type === 'text').text);
  const claimed = text(await tools.claim.execute({ id: pushed }, opts));
  assert.equal(claimed.todo?.state ?? claimed.state, 'claimed', JSON.stringify(claimed));
  const done = text(await tools.complete.execute({ id: pushed, result: { ok: true } }, { ...opts, toolCallId: 'call-2' }));
  assert.equal(done.todo?.state ?? done.state, 'done', JSON.stringify(done));

  assert.deepEqual(errors, []);
  await client.experimental_events.unsubscribe({ id: sub.id });
});
