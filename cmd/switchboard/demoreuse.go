package main

// The parts of `switchboard demo` that make `make run` repeatable: reuse the demo endpoint
// vended by an earlier run, and stop before vending anything when the listen address is taken.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"switchboard/server/store"
)

// checkAddrFree refuses when SWITCHBOARD_ADDR (default 127.0.0.1:8080) is taken, so a second
// `make run` stops before it vends anything.
func checkAddrFree() error {
	addr := getenvDefault("SWITCHBOARD_ADDR", "127.0.0.1:8080")
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		host, port, _ := net.SplitHostPort(addr)
		return usagef("port %s is busy (%s is taken, perhaps by a running `make run` or switchboard serve): stop that, or choose another port, e.g. SWITCHBOARD_ADDR=%s make run",
			port, addr, net.JoinHostPort(host, nextPort(port)))
	}
	return usagef("cannot listen on SWITCHBOARD_ADDR=%s: %v", addr, err)
}

func nextPort(port string) string {
	var n int
	if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n <= 0 || n >= 65535 {
		return "8081"
	}
	return fmt.Sprint(n + 1)
}

// existingDemo finds the demo endpoint an earlier demo vended (active, newest) and its demo
// webhook. Its credential is not stored, so it cannot be shown again: Credential stays empty
// and the report says how to rotate it.
func existingDemo(ctx context.Context, conn *store.Operator) (demoInfo, bool, error) {
	d, ok, err := conn.FindDemoEndpoint(ctx, demoHuman, demoAgent, demoQueue)
	if !ok || err != nil {
		return demoInfo{}, false, err
	}
	info := demoInfo{EndpointID: d.ID, Slug: d.Slug, WebhookID: d.WebhookID}
	token := d.IngestToken
	info.Human, info.Agent, info.Queue = demoHuman, demoAgent, demoQueue
	info.MCPURL = mcpURL(info.Slug)
	info.Reused = true
	if token != nil {
		info.IngestURL = baseURL() + "/webhooks/w/" + *token
	}
	return info, true, nil
}

// rotateHint is what the reused demo prints instead of the credential.
func rotateHint(slug string) string {
	return "not shown again (it is stored hashed); print a new one with (DATABASE_URL exported as below): " + selfPath() + " endpoint rotate " + slug
}
