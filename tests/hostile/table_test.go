package hostile

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// hostileCase is one malformed request and the answer it must get.
type hostileCase struct {
	name   string
	send   func() answer
	status int      // HTTP status
	codes  []string // acceptable codes ("ok" for a successful tool call, "" for no JSON error body)
}

func deep(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// toolBases are a valid call of each tool that changes nothing (it names things that do not
// exist, or only reads), and the code it answers. Malformed variants are derived from them.
type toolBase struct {
	args map[string]string // argument -> JSON text
	code string
	// kinds of the arguments: s string, i integer, b boolean, o object, a array, j any JSON
	kinds map[string]byte
}

func TestHostileTable(t *testing.T) {
	p := start(t, "SWITCHBOARD_READ_TIMEOUT=1s")
	ep := p.vend("ann")
	other := p.vend("bob")
	gh := p.hook(ep, "github")
	gen := p.hook(ep, "generic")
	p.push(ep, "inbox", "pending work")
	s := p.session(ep)
	nobody := uuid()
	q := func(v string) string { return fmt.Sprintf("%q", v) }

	bases := map[string]toolBase{
		"list_todos": {args: map[string]string{"queue": q("inbox"), "state": q("pending"), "limit": "5"}, code: "ok", kinds: map[string]byte{"queue": 's', "state": 's', "limit": 'i'}},
		"get_todo":   {args: map[string]string{"id": q(nobody)}, code: "not_found", kinds: map[string]byte{"id": 's'}},
		"claim":      {args: map[string]string{"id": q(nobody), "lease_ttl_seconds": "60", "require_fence": "true"}, code: "not_found", kinds: map[string]byte{"id": 's', "lease_ttl_seconds": 'i', "require_fence": 'b'}},
		"claim_next": {args: map[string]string{"queue": q("ops"), "lease_ttl_seconds": "60", "require_fence": "false"}, code: "ok", kinds: map[string]byte{"queue": 's', "lease_ttl_seconds": 'i', "require_fence": 'b'}},
		"complete":   {args: map[string]string{"id": q(nobody), "result": `{"ok":true}`, "lease_token": q("x")}, code: "not_found", kinds: map[string]byte{"id": 's', "result": 'j', "lease_token": 's'}},
		"fail":       {args: map[string]string{"id": q(nobody), "result": `"why"`, "next": `{"queue":"ops"}`}, code: "not_found", kinds: map[string]byte{"id": 's', "result": 'j', "next": 'o'}},
		"heartbeat":  {args: map[string]string{"id": q(nobody), "lease_ttl_seconds": "60"}, code: "not_found", kinds: map[string]byte{"id": 's', "lease_ttl_seconds": 'i'}},
		"release":    {args: map[string]string{"id": q(nobody)}, code: "not_found", kinds: map[string]byte{"id": 's'}},
		"create_webhook": {args: map[string]string{"source_type": q("generic"), "target_queue": q("nope")}, code: "forbidden",
			kinds: map[string]byte{"source_type": 's', "target_queue": 's'}},
		"list_webhooks":        {args: map[string]string{}, code: "ok", kinds: map[string]byte{}},
		"rotate_webhook":       {args: map[string]string{"webhook_id": q(nobody)}, code: "not_found", kinds: map[string]byte{"webhook_id": 's'}},
		"delete_webhook":       {args: map[string]string{"webhook_id": q(nobody)}, code: "not_found", kinds: map[string]byte{"webhook_id": 's'}},
		"add_webhook_route":    {args: map[string]string{"webhook_id": q(nobody), "target_endpoint_id": q(other.ID)}, code: "not_found", kinds: map[string]byte{"webhook_id": 's', "target_endpoint_id": 's'}},
		"list_webhook_routes":  {args: map[string]string{"webhook_id": q(gen.ID)}, code: "ok", kinds: map[string]byte{"webhook_id": 's'}},
		"remove_webhook_route": {args: map[string]string{"webhook_id": q(nobody), "target_endpoint_id": q(other.ID)}, code: "not_found", kinds: map[string]byte{"webhook_id": 's', "target_endpoint_id": 's'}},
		"list_webhook_rules":   {args: map[string]string{"webhook_id": q(gen.ID)}, code: "ok", kinds: map[string]byte{"webhook_id": 's'}},
		"set_webhook_rules": {args: map[string]string{"webhook_id": q(nobody), "rules": `[]`, "params": `{"a":1}`}, code: "not_found",
			kinds: map[string]byte{"webhook_id": 's', "rules": 'a', "params": 'j'}},
		"add_webhook_rule": {args: map[string]string{"webhook_id": q(nobody), "expr": q("true"), "action": `{"drop":true}`, "position": "0", "name": q("n")}, code: "not_found",
			kinds: map[string]byte{"webhook_id": 's', "expr": 's', "action": 'o', "position": 'i', "name": 's'}},
		"update_webhook_rule": {args: map[string]string{"webhook_id": q(nobody), "rule_id": q("r1"), "expr": q("true")}, code: "not_found",
			kinds: map[string]byte{"webhook_id": 's', "rule_id": 's', "expr": 's'}},
		"move_webhook_rule": {args: map[string]string{"webhook_id": q(nobody), "rule_id": q("r1"), "position": "0"}, code: "not_found",
			kinds: map[string]byte{"webhook_id": 's', "rule_id": 's', "position": 'i'}},
		"remove_webhook_rule": {args: map[string]string{"webhook_id": q(nobody), "rule_id": q("r1")}, code: "not_found",
			kinds: map[string]byte{"webhook_id": 's', "rule_id": 's'}},
		"test_webhook_rules": {args: map[string]string{"webhook_id": q(gen.ID), "payload": `{"a":[1,2]}`, "headers": `{"x-a":"b"}`}, code: "ok",
			kinds: map[string]byte{"webhook_id": 's', "payload": 'j', "headers": 'o'}},
		"list_webhook_events": {args: map[string]string{"limit": "5", "before_id": "1000000"}, code: "ok", kinds: map[string]byte{"limit": 'i', "before_id": 'i'}},
		"get_webhook_event":   {args: map[string]string{"id": "999999999"}, code: "not_found", kinds: map[string]byte{"id": 'i'}},
	}

	var cases []hostileCase
	tool := func(name, tl, args string, codes ...string) {
		cases = append(cases, hostileCase{name: tl + ": " + name, status: 200, codes: codes,
			send: func() answer { return s.call(tl, args) }})
	}
	with := func(b toolBase, k, v string) string {
		var parts []string
		keys := make([]string, 0, len(b.args))
		for key := range b.args {
			keys = append(keys, key)
		}
		if _, ok := b.args[k]; !ok && k != "" {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, key := range keys {
			val := b.args[key]
			if key == k {
				val = v
			}
			parts = append(parts, fmt.Sprintf("%q:%s", key, val))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	names := make([]string, 0, len(bases))
	for n := range bases {
		names = append(names, n)
	}
	slices.Sort(names)
	const bad = "invalid_argument"
	for _, tl := range names {
		b := bases[tl]
		tool("valid base", tl, with(b, "", ""), b.code)
		tool("arguments an array", tl, `[]`, bad)
		tool("arguments a string", tl, `"x"`, bad)
		tool("unknown argument", tl, with(b, "zz_unknown", "1"), bad)
		tool("argument name with NUL", tl, with(b, "a\\u0000", "1"), bad)
		tool("arguments nested 200 deep", tl, with(b, "zz", deep(200)), bad)
		keys := make([]string, 0, len(b.kinds))
		for k := range b.kinds {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			switch b.kinds[k] {
			case 's':
				tool(k+" a number", tl, with(b, k, "1"), bad)
				tool(k+" with NUL", tl, with(b, k, `"in\u0000box"`), bad)
				tool(k+" a lone surrogate", tl, with(b, k, `"\ud800"`), bad)
				tool(k+" invalid UTF-8", tl, with(b, k, "\"\xff\xfe\""), bad)
				tool(k+" 100 KB long", tl, with(b, k, q(strings.Repeat("x", 100_000))), bad, "not_found", "forbidden", "ok", "invalid_expression")
			case 'i':
				tool(k+" a string", tl, with(b, k, `"5"`), bad)
				tool(k+" a fraction", tl, with(b, k, "1.5"), bad)
				tool(k+" 1e400", tl, with(b, k, "1e400"), bad)
				tool(k+" beyond int64", tl, with(b, k, "99999999999999999999"), bad)
				tool(k+" max int64 (clamped)", tl, with(b, k, "9223372036854775807"), b.code)
				tool(k+" min int64 (clamped)", tl, with(b, k, "-9223372036854775808"), b.code)
			case 'b':
				tool(k+" a string", tl, with(b, k, `"true"`), bad)
				tool(k+" a number", tl, with(b, k, `1`), bad)
			case 'o':
				tool(k+" a string", tl, with(b, k, `"x"`), bad)
				tool(k+" nested 65 deep", tl, with(b, k, `{"a":`+deep(64)+`}`), bad)
				tool(k+" holding NUL", tl, with(b, k, `{"queue":"\u0000"}`), bad)
			case 'a':
				tool(k+" an object", tl, with(b, k, `{}`), bad)
				tool(k+" nested 65 deep", tl, with(b, k, deep(65)), bad)
			case 'j':
				tool(k+" nested 65 deep", tl, with(b, k, deep(65)), bad)
				cases = append(cases, hostileCase{name: tl + ": " + k + " nested 1001 deep (the SDK refuses the message)", status: 400, codes: []string{bad},
					send: func() answer { return s.call(tl, with(b, k, deep(1001))) }})
				tool(k+" 1e400", tl, with(b, k, `{"n":1e400}`), bad)
				tool(k+" -1e400", tl, with(b, k, `[-1e400]`), bad)
				tool(k+" 1e-400", tl, with(b, k, `1e-400`), bad)
				tool(k+" a 2000-digit number", tl, with(b, k, "1."+strings.Repeat("0", 2000)), bad)
				tool(k+" at 64 levels (accepted)", tl, with(b, k, deep(64)), b.code, "invalid_params")
			}
		}
	}

	// JSON-RPC and HTTP level on /mcp.
	mcpURL := "/mcp/" + ep.Slug
	auth := func(extra map[string]string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + ep.Cred, "Mcp-Session-Id": s.sid}
		for k, v := range mcpHeaders {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	// A message the SDK refuses before JSON-RPC (it does not parse, or names no method it has)
	// gets the SDK's plain-text 400, which Switchboard answers in its own JSON error shape.
	rpc := func(name, body string, status int, codes ...string) {
		cases = append(cases, hostileCase{name: "mcp: " + name, status: status, codes: codes,
			send: func() answer { return p.do("POST", mcpURL, []byte(body), auth(nil), nil) }})
	}
	rpc("not JSON", `{"jsonrpc":`, 400, bad, "jsonrpc:-32700")
	rpc("message nested 10000 deep", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_todos","arguments":{"a":`+deep(10000)+`}}}`,
		400, bad)
	rpc("unknown tool", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop_tables","arguments":{}}}`, 200, "jsonrpc:-32602", "not_found")
	rpc("tool name with NUL", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list\u0000todos","arguments":{}}}`, 200, "jsonrpc:-32602", "not_found")
	rpc("unknown method", `{"jsonrpc":"2.0","id":1,"method":"x/y","params":{}}`, 400, bad)
	rpc("id 1e400", `{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}`, 400, bad, "jsonrpc:-32700", "jsonrpc:-32600")
	rpc("duplicate keys", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_todo","arguments":{"id":"a","id":"`+nobody+`"}}}`,
		200, "not_found", bad, "jsonrpc:-32700", "jsonrpc:-32600")
	rpc("arguments 1e400", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_todos","arguments":1e400}}`, 200, bad, "jsonrpc:-32602", "jsonrpc:-32700")
	httpCase := func(name, method string, body []byte, hdr map[string]string, extra http.Header, status int, codes ...string) {
		cases = append(cases, hostileCase{name: "mcp http: " + name, status: status, codes: codes,
			send: func() answer { return p.do(method, mcpURL, body, hdr, extra) }})
	}
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	noAuth := auth(nil)
	delete(noAuth, "Authorization")
	httpCase("no credential", "POST", list, noAuth, nil, 401, "unauthenticated")
	httpCase("unknown credential", "POST", list, auth(map[string]string{"Authorization": "Bearer sbk_" + randHex(20)}), nil, 401, "unauthenticated")
	cases = append(cases, hostileCase{name: "mcp http: credential with a NUL byte", status: 400, codes: []string{""},
		send: func() answer {
			return p.raw("POST " + mcpURL + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sbk_\x00x\r\n" +
				"Content-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(list)) + "\r\n\r\n" + string(list))
		}})
	httpCase("credential of another endpoint", "POST", list, auth(map[string]string{"Authorization": "Bearer " + other.Cred}), nil, 403, "forbidden")
	httpCase("duplicate Authorization, stranger's first", "POST", list, noAuth,
		http.Header{"Authorization": {"Bearer sbk_" + randHex(20), "Bearer " + ep.Cred}}, 401, "unauthenticated")
	httpCase("a 64 KiB credential", "POST", list, auth(map[string]string{"Authorization": "Bearer " + strings.Repeat("a", 64<<10)}), nil, 401, "unauthenticated")
	httpCase("headers over 1 MiB", "POST", list, auth(map[string]string{"X-Big": strings.Repeat("a", 2<<20)}), nil, 431, "")
	httpCase("body over 1 MiB", "POST", bytes.Repeat([]byte("a"), 1<<20+1), auth(nil), nil, 413, "payload_too_large")
	httpCase("unknown session", "POST", list, auth(map[string]string{"Mcp-Session-Id": "nope"}), nil, 404, "", "not_found")
	httpCase("session id 10 KB", "POST", list, auth(map[string]string{"Mcp-Session-Id": strings.Repeat("s", 10_000)}), nil, 404, "", "not_found")
	httpCase("wrong content type", "POST", list, auth(map[string]string{"Content-Type": "text/plain"}), nil, 415, bad)
	httpCase("method PUT", "PUT", list, auth(nil), nil, 405, "method_not_allowed")
	httpCase("foreign Host", "POST", list, auth(map[string]string{"Host": "evil.example"}), nil, 403, "forbidden")
	httpCase("slug 10 KB", "POST", list, auth(nil), nil, 403, "forbidden")
	cases[len(cases)-1].send = func() answer { return p.do("POST", "/mcp/"+strings.Repeat("z", 10_000), list, auth(nil), nil) }

	// The receiver.
	rcv := func(name, token string, body []byte, hdr http.Header, status int, codes ...string) {
		cases = append(cases, hostileCase{name: "receiver: " + name, status: status, codes: codes,
			send: func() answer { return p.deliver(token, body, hdr) }})
	}
	big := bytes.Repeat([]byte("a"), 5<<20)
	js := http.Header{"Content-Type": {"application/json"}}
	signed := func(body []byte, id string) http.Header { return githubHeaders(gh, body, id) }
	rcv("unknown token, 5 MiB body", randHex(24), big, js, 404, "not_found")
	rcv("unknown token, 2 KB long", strings.Repeat("t", 2000), []byte(`{}`), js, 404, "not_found")
	rcv("token with NUL", "abc%00def", []byte(`{}`), js, 404, "not_found")
	rcv("token not UTF-8", "abc%FF%FE", []byte(`{}`), js, 404, "not_found")
	rcv("generic, over 5 MiB", gen.Token, append(big, 'x'), js, 413, "payload_too_large")
	rcv("generic, nested 65 deep", gen.Token, []byte(deep(65)), js, 422, "invalid_payload")
	rcv("generic, nested 1001 deep", gen.Token, []byte(`{"a":`+deep(1000)+`}`), js, 422, "invalid_payload")
	rcv("generic, nested 100000 deep", gen.Token, []byte(deep(100000)), js, 422, "invalid_payload")
	rcv("generic, 1e400", gen.Token, []byte(`{"n":1e400}`), js, 422, "invalid_payload")
	rcv("generic, -1e400", gen.Token, []byte(`[-1e400]`), js, 422, "invalid_payload")
	rcv("generic, 1e-400", gen.Token, []byte(`{"n":1e-400}`), js, 422, "invalid_payload")
	rcv("generic, 400-digit integer", gen.Token, []byte(`{"n":`+strings.Repeat("9", 400)+`}`), js, 422, "invalid_payload")
	rcv("generic, 2000-digit number", gen.Token, []byte(`{"n":1.`+strings.Repeat("0", 2000)+`}`), js, 422, "invalid_payload")
	rcv("generic, delivery id 257 bytes", gen.Token, []byte(`{}`), http.Header{"X-Delivery-Id": {strings.Repeat("d", 257)}}, 422, "invalid_delivery_id")
	rcv("generic, delivery id 4 KB", gen.Token, []byte(`{}`), http.Header{"X-Delivery-Id": {strings.Repeat("d", 4096)}}, 422, "invalid_delivery_id")
	rcv("generic, delivery id not UTF-8", gen.Token, []byte(`{}`), http.Header{"X-Delivery-Id": {"\xff\xfe"}}, 422, "invalid_delivery_id")
	rcv("generic, Webhook-Id 300 bytes", gen.Token, []byte(`{}`), http.Header{"Webhook-Id": {strings.Repeat("w", 300)}}, 422, "invalid_delivery_id")
	cases = append(cases, hostileCase{name: "receiver: generic, header with a control byte", status: 400, codes: []string{""},
		send: func() answer {
			return p.raw("POST /webhooks/w/" + gen.Token + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Event-Type: a\x01b\r\n" +
				"Content-Length: 2\r\n\r\n{}")
		}})
	cases = append(cases, hostileCase{name: "receiver: generic, Content-Length larger than the body sent (read timeout)", status: 400, codes: []string{bad},
		send: func() answer {
			return p.raw("POST /webhooks/w/" + gen.Token + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{}")
		}})
	rcv("generic, headers over 1 MiB", gen.Token, []byte(`{}`), http.Header{"X-Big": {strings.Repeat("h", 2<<20)}}, 431, "")
	ok := []byte(`{"action":"opened"}`)
	rcv("github, no signature", gh.Token, ok, js, 401, "unauthenticated")
	rcv("github, wrong signature", gh.Token, ok, http.Header{"X-Hub-Signature-256": {"sha256=" + strings.Repeat("0", 64)}}, 401, "unauthenticated")
	rcv("github, signature of another body", gh.Token, ok, signed([]byte(`{}`), "d1"), 401, "unauthenticated")
	rcv("github, signature not hex", gh.Token, ok, http.Header{"X-Hub-Signature-256": {"sha256=zz"}}, 401, "unauthenticated")
	rcv("github, signature 64 KB", gh.Token, ok, http.Header{"X-Hub-Signature-256": {"sha256=" + strings.Repeat("a", 64<<10)}}, 401, "unauthenticated")
	dup := signed(ok, "d2")
	dup["X-Hub-Signature-256"] = append(dup["X-Hub-Signature-256"], "sha256="+strings.Repeat("0", 64))
	rcv("github, duplicate signature headers", gh.Token, ok, dup, 401, "unauthenticated")
	dup2 := signed(ok, "d3")
	dup2["X-Hub-Signature-256"] = append([]string{"sha256=" + strings.Repeat("0", 64)}, dup2["X-Hub-Signature-256"]...)
	rcv("github, duplicate signature headers, bad first", gh.Token, ok, dup2, 401, "unauthenticated")
	for _, b := range []struct{ name, body string }{
		{"nested 65 deep", deep(65)}, {"nested 1001 deep", `{"a":` + deep(1000) + `}`}, {"1e400", `{"n":1e400}`},
	} {
		rcv("github signed, "+b.name, gh.Token, []byte(b.body), signed([]byte(b.body), "d-"+randHex(4)), 422, "invalid_payload")
	}
	rcv("github signed, delivery id 300 bytes", gh.Token, ok, signed(ok, strings.Repeat("g", 300)), 422, "invalid_delivery_id")
	rcv("github unsigned, nested 1001 deep (401 before 422)", gh.Token, []byte(deep(1001)), js, 401, "unauthenticated")
	chunked := func(path, hdr string, n int) string {
		return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n" + hdr +
			"\r\n" + fmt.Sprintf("%x\r\n", n) + strings.Repeat("a", n) + "\r\n0\r\n\r\n"
	}
	cases = append(cases, hostileCase{name: "receiver: generic, chunked body over 5 MiB", status: 413, codes: []string{"payload_too_large"},
		send: func() answer { return p.raw(chunked("/webhooks/w/"+gen.Token, "", 5<<20+1)) }})
	cases = append(cases, hostileCase{name: "mcp http: chunked body over 1 MiB", status: 413, codes: []string{"", "payload_too_large"},
		send: func() answer {
			return p.raw(chunked(mcpURL, "Authorization: Bearer "+ep.Cred+"\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: "+s.sid+"\r\n", 1<<20+1))
		}})
	cases = append(cases, hostileCase{name: "receiver: GET", status: 405, codes: []string{""},
		send: func() answer { return p.do("GET", "/webhooks/w/"+gen.Token, nil, nil, nil) }})

	before := p.checksum()
	for i, c := range cases {
		a := c.send()
		if a.status != c.status || !slices.Contains(c.codes, a.code) {
			t.Errorf("%d %s: got %d %q, want %d %q (%.200s)", i, c.name, a.status, a.code, c.status, c.codes, a.text)
		}
		if a.status >= 500 || a.code == "internal" {
			t.Errorf("%s: %d %s", c.name, a.status, a.code)
		}
	}
	after := p.checksum()
	for tb, sum := range before {
		// Refused deliveries are counted there (and only counted: no body, no signature).
		if tb == "webhook_refusals" {
			continue
		}
		if after[tb] != sum {
			t.Errorf("table %s changed: %s -> %s", tb, sum, after[tb])
		}
	}
	if a := p.do("GET", "/healthz", nil, nil, nil); a.status != 200 {
		t.Fatalf("healthz after the table: %d", a.status)
	}
	if logs := p.logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `"level":"ERROR"`) {
				t.Errorf("error logged: %.300s", l)
			}
		}
	}
	t.Logf("hostile table: %d requests", len(cases))
	if len(cases) < 150 {
		t.Fatalf("only %d cases", len(cases))
	}
}

// A remove_webhook_route refused for the NUL (or lone surrogate, or bytes that are not UTF-8) in
// its target id changes nothing: the refusal happens before any SQL (server/tool's argument check),
// so the route stays, and every table, the doorbell's and the refusal counts included, reads the
// same afterwards. The server's own writers (reaper, purge) are off here: a drill that finds a
// row changed beside such a refusal is seeing one of them (reap() requeues expired leases and
// rings, which stamps switchboard.doorbell), not the call. Issue 33.
func TestRefusedRouteRemovalChangesNothing(t *testing.T) {
	p := start(t, "SWITCHBOARD_PURGE_INTERVAL=0")
	ep := p.vend("ann")
	other := p.vend("ann") // the same human: the route is allowed
	gen := p.hook(ep, "generic")
	p.exec(`SELECT switchboard.route_add($1, $2, $3)`, ep.ID, gen.ID, other.ID)
	s := p.session(ep)
	routes := func() string {
		return p.scalar(`SELECT string_agg(target_endpoint_id::text, ',') FROM switchboard.webhook_routes WHERE webhook_id = $1`, gen.ID)
	}
	if routes() != other.ID {
		t.Fatalf("route before: %q", routes())
	}
	before := p.checksum()
	for _, target := range []string{
		`"` + other.ID + `\u0000"`, `"\u0000` + other.ID + `"`, `"` + other.ID[:8] + `\u0000` + other.ID[9:] + `"`,
		`"` + other.ID + `\ud800"`, "\"" + other.ID + "\xff\"",
	} {
		a := s.call("remove_webhook_route", fmt.Sprintf(`{"webhook_id":%q,"target_endpoint_id":%s}`, gen.ID, target))
		if a.status != 200 || a.code != "invalid_argument" {
			t.Errorf("target %.60q: %d %q %.200s", target, a.status, a.code, a.text)
		}
	}
	after := p.checksum()
	for tb, sum := range before {
		if after[tb] != sum {
			t.Errorf("table %s changed: %s -> %s", tb, sum, after[tb])
		}
	}
	if routes() != other.ID {
		t.Fatalf("route after the refusals: %q", routes())
	}
	// The same call without the NUL removes it: the refusals above were not vacuous.
	if a := s.call("remove_webhook_route", fmt.Sprintf(`{"webhook_id":%q,"target_endpoint_id":%q}`, gen.ID, other.ID)); a.code != "ok" || routes() != "" {
		t.Fatalf("removal: %s %q, routes %q", a.code, a.text, routes())
	}
}
