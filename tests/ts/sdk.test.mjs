// Switchboard through the official TypeScript MCP SDK, with the SDK's own validation on (zod
// for every result, JSON Schema for each tool's structuredContent against its outputSchema).
// Run by tests/e2e TestTypeScriptSDK, which starts a server on real PostgreSQL, vends an
// all-verbs endpoint with queues inbox and other, and sets:
//   SB_MCP_URL     the endpoint's MCP URL
//   SB_CREDENTIAL  its bearer credential
//   SB_PUSH_URL    a hook that creates a todo with SQL: POST ?queue=&title= -> {"todo_id"}
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListToolsResultSchema } from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.env.SB_MCP_URL);
const credential = process.env.SB_CREDENTIAL;
const pushURL = process.env.SB_PUSH_URL;

const VERBS = [
  'list_todos', 'get_todo', 'claim', 'claim_next', 'complete', 'fail', 'heartbeat', 'release',
  'create_webhook', 'list_webhooks', 'rotate_webhook', 'delete_webhook',
  'add_webhook_route', 'list_webhook_routes', 'remove_webhook_route',
  'list_webhook_rules', 'set_webhook_rules', 'add_webhook_rule', 'update_webhook_rule',
  'move_webhook_rule', 'remove_webhook_rule', 'test_webhook_rules',
  'list_webhook_events', 'get_webhook_event',
];

// connect opens a session, ended (DELETE) when the test ends: the doorbell rings one session of
// an endpoint per todo, so a session left over from another test could take the ring. streamOpen
// resolves when the server has accepted the session's standalone GET stream (the SDK opens it
// after initialize), which carries the doorbell.
async function connect(t, name) {
  let opened;
  const streamOpen = new Promise((resolve) => { opened = resolve; });
  const watchingFetch = async (input, init) => {
    const res = await fetch(input, init);
    if ((init?.method ?? 'GET') === 'GET' && res.ok &&
        (res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      opened();
    }
    return res;
  };
  const client = new Client({ name, version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${credential}` } },
    fetch: watchingFetch,
  });
  await client.connect(transport);
  t.after(async () => {
    await transport.terminateSession();
    await client.close();
  });
  return { client, streamOpen };
}

async function push(queue, title) {
  const res = await fetch(`${pushURL}?${new URLSearchParams({ queue, title })}`, { method: 'POST' });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).todo_id;
}

// call makes a tool call that must succeed, and returns its structuredContent.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.ok(!res.isError, `${name}: ${JSON.stringify(res.content)}`);
  assert.ok(res.structuredContent, `${name}: no structuredContent`);
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent, `${name}: text and structuredContent differ`);
  return res.structuredContent;
}

const timeout = (ms, what) => new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms).unref());

test('initialize declares tools, resources with subscribe, and the claude/channel experiment', async (t) => {
  const { client } = await connect(t, 'ts-init');
  const caps = client.getServerCapabilities();
  assert.ok(caps.tools);
  assert.deepEqual(caps.experimental?.['claude/channel'], {});
  assert.equal(caps.resources?.subscribe, true); // the granted queues (issue 23)
  assert.equal(caps.prompts, undefined);
  assert.equal(caps.logging, undefined);
  assert.match(client.getInstructions() ?? '', /claim_next/);
});

test('listTools shows the 24 tools, valid for the SDK', async (t) => {
  const { client } = await connect(t, 'ts-list');
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), [...VERBS].sort());
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.ok(t.description, t.name);
    if (t.outputSchema) assert.equal(t.outputSchema.type, 'object', t.name);
  }
});

// docsTable reads the table of docs/clients.md ("What each tool does to the world"): tool name ->
// [title, readOnly, destructive, idempotent, openWorld], the hints as yes/no.
function docsTable() {
  const doc = fs.readFileSync(new URL('../../docs/clients.md', import.meta.url), 'utf8');
  const head = '| Tool | Title | readOnly | destructive | idempotent | openWorld | Why |';
  assert.ok(doc.includes(head), 'docs/clients.md has no tool table');
  const rows = {};
  for (const line of doc.split(head)[1].split('\n').slice(2)) {
    if (!line.startsWith('| `')) break;
    const cells = line.replace(/^\| | \|$/g, '').split(' | ');
    assert.equal(cells.length, 7, line);
    rows[cells[0].replaceAll('`', '')] = cells.slice(1, 6);
  }
  return rows;
}

// checkHints: every tool has a title and all four hints, as the docs table says.
function checkHints(tools, protocol) {
  const docs = docsTable();
  assert.deepEqual(Object.keys(docs).sort(), [...VERBS].sort(), 'the docs table lists the 24 verbs');
  assert.equal(tools.length, VERBS.length, protocol);
  for (const t of tools) {
    const a = t.annotations ?? {};
    assert.ok(t.title, `${protocol} ${t.name}: no title`);
    assert.equal(a.title, t.title, `${protocol} ${t.name}: annotations.title`);
    const hints = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'].map((h) => {
      assert.equal(typeof a[h], 'boolean', `${protocol} ${t.name}: ${h} is ${a[h]}`);
      return a[h] ? 'yes' : 'no';
    });
    assert.deepEqual([t.title, ...hints], docs[t.name], `${protocol} ${t.name}: server vs docs/clients.md`);
  }
}

test('tools/list: a title and all four hints on every tool, as docs/clients.md says, on 2025-11-25', async (t) => {
  const { client } = await connect(t, 'ts-hints');
  const { tools } = await client.listTools();
  checkHints(tools, '2025-11-25');
});

// SDK 1.32.2 does not speak 2026-07-28: the request is sent by hand, the answer parsed with the
// SDK's own schema.
const MODERN = '2026-07-28';
async function modern(method, params = {}) {
  const meta = {
    'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientInfo': { name: 'ts-modern', version: '0.0.0' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${credential}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': method },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: meta } }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal(res.headers.get('mcp-session-id'), null);
  const body = await res.json();
  assert.ok(body.result, JSON.stringify(body));
  return body.result;
}

test('tools/list on 2026-07-28: the same titles and hints; server/discover has the same instructions', async (t) => {
  const listed = ListToolsResultSchema.parse(await modern('tools/list'));
  checkHints(listed.tools, MODERN);
  const { client } = await connect(t, 'ts-instructions');
  const discovered = await modern('server/discover');
  assert.ok(client.getInstructions());
  assert.equal(discovered.instructions, client.getInstructions());
});

test('drain with claim_next, complete and complete with next', async (t) => {
  const { client } = await connect(t, 'ts-drain');
  await client.listTools(); // the SDK validates structuredContent against what this lists
  const pushed = [await push('inbox', 'one'), await push('other', 'two'), await push('inbox', 'three')];

  const first = await call(client, 'claim_next', {});
  assert.equal(first.empty, false);
  assert.equal(first.todo.state, 'claimed');
  const done = [first.todo.id];
  let held = first.todo;
  for (;;) {
    const out = await call(client, 'complete', { id: held.id, result: { ok: true }, next: {} });
    assert.equal(out.id, held.id);
    assert.equal(out.state, 'done');
    assert.ok(out.next, 'complete with next answers next');
    if (out.next.empty) break;
    held = out.next.todo;
    assert.equal(held.state, 'claimed');
    done.push(held.id);
  }
  assert.deepEqual([...done].sort(), [...pushed].sort());
  assert.deepEqual(await call(client, 'claim_next', {}), { empty: true });

  const listed = await call(client, 'list_todos', { state: 'done' });
  for (const id of pushed) assert.ok(JSON.stringify(listed).includes(id), `list_todos lacks ${id}`);
});

test('a batch: claim_next with max, then one complete with items', async (t) => {
  const { client } = await connect(t, 'ts-batch');
  await client.listTools(); // the SDK validates structuredContent against what this lists
  const pushed = [await push('inbox', 'b1'), await push('inbox', 'b2'), await push('inbox', 'b3')];

  const got = await call(client, 'claim_next', { queue: 'inbox', max: 10, require_fence: true });
  assert.equal(got.empty, false);
  assert.deepEqual(got.todos.map((td) => td.id), pushed);
  assert.equal(new Set(got.todos.map((td) => td.lease_token)).size, 3, 'one fence per todo');
  const items = got.todos.map((td) => ({ id: td.id, lease_token: td.lease_token, result: { label: td.title } }));
  items.push({ id: pushed[0], lease_token: got.todos[0].lease_token }); // the same id again
  const out = await call(client, 'complete', { items });
  assert.deepEqual(out.results.map((r) => [r.id, r.ok, r.code]),
    [...pushed.map((id) => [id, true, undefined]), [pushed[0], false, 'conflict']]);
  for (const r of out.results.slice(0, 3)) assert.equal(r.todo.state, 'done');
  assert.deepEqual(await call(client, 'claim_next', { queue: 'inbox', max: 10 }), { todos: [], empty: true });
});

test('bad arguments answer invalid_argument as a tool error', async (t) => {
  const { client } = await connect(t, 'ts-bad');
  await client.listTools();
  for (const args of [{ lease_seconds: 5 }, { lease_ttl_seconds: 'soon' }, { queue: 7 }]) {
    const res = await client.callTool({ name: 'claim_next', arguments: args });
    assert.equal(res.isError, true, JSON.stringify(args));
    assert.match(res.content[0].text, /^invalid_argument: /, JSON.stringify(args));
  }
  const res = await client.callTool({ name: 'complete', arguments: {} });
  assert.equal(res.isError, true);
  assert.match(res.content[0].text, /^invalid_argument: /);
});

test('a todo pushed after connecting rings notifications/claude/channel on the GET stream', async (t) => {
  const { client, streamOpen } = await connect(t, 'ts-bell');
  const rung = new Promise((resolve) => {
    client.fallbackNotificationHandler = async (n) => {
      if (n.method === 'notifications/claude/channel') resolve(n);
    };
  });
  await Promise.race([streamOpen, timeout(10000, 'the GET stream')]);
  const id = await push('inbox', 'ring me');
  const note = await Promise.race([rung, timeout(10000, 'notifications/claude/channel')]);
  assert.equal(note.params.meta.todo_id, id);
  assert.equal(note.params.meta.queue, 'inbox');
  assert.match(note.params.content, new RegExp(`New todo ${id} in queue inbox`));
  assert.match(note.params.content, /ring me/);

  // The ringing todo is claimable by id from this session.
  const claimed = await call(client, 'claim', { id });
  assert.equal(claimed.todo?.id ?? claimed.id, id);
});

test('a wrong credential is refused with what to send', async () => {
  const client = new Client({ name: 'ts-wrong', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: 'Bearer sbk_wrong' } },
  });
  await assert.rejects(client.connect(transport), (err) => {
    assert.equal(err.code, 401, String(err)); // StreamableHTTPError carries the HTTP status
    assert.match(String(err), /unknown or revoked bearer credential: send Authorization: Bearer sbk_/);
    return true;
  });
});

test('methods of undeclared capabilities answer -32601; resources list the granted queues', async (t) => {
  const { client } = await connect(t, 'ts-undeclared');
  const { resources } = await client.listResources();
  assert.deepEqual(resources.map((r) => r.name).sort(), ['inbox', 'other']);
  for (const call of [() => client.listPrompts(), () => client.setLoggingLevel('info')]) {
    await assert.rejects(call(), (err) => {
      assert.equal(err.code, -32601, String(err));
      return true;
    });
  }
});

test('claim_next with wait_seconds returns a todo pushed during the wait', async (t) => {
  const { client } = await connect(t, 'ts-wait');
  await client.listTools();
  const start = Date.now();
  const waiting = call(client, 'claim_next', { wait_seconds: 5 });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const pushedAt = Date.now();
  const id = await push('inbox', 'while waiting');
  const got = await waiting;
  const lag = Date.now() - pushedAt;
  assert.equal(got.empty, false);
  assert.equal(got.todo.id, id);
  assert.equal(got.todo.state, 'claimed');
  assert.ok(lag < 1500, `returned ${lag} ms after the push`);
  assert.ok(Date.now() - start < 5000, 'waited out the full time');
  await call(client, 'complete', { id });
});

test('claim_next with wait_seconds and nothing to do answers empty when the time is up', async (t) => {
  const { client } = await connect(t, 'ts-wait-empty');
  await client.listTools();
  const start = Date.now();
  const got = await call(client, 'claim_next', { wait_seconds: 5 });
  const took = Date.now() - start;
  assert.deepEqual(got, { empty: true });
  assert.ok(took >= 4500 && took <= 5500, `answered after ${took} ms, want 5 s ± 0.5 s`);
});
