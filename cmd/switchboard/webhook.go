package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"switchboard/server/store"
)

// maxSecret bounds what set-secret reads: providers' secrets are under 100 bytes.
const maxSecret = 4096

// switchboard webhook set-secret WEBHOOK_ID [--from-env VAR | --from-file PATH] [--previous-ttl 24h]
// → the webhook with secret_source provider (never the secret). The secret is read from stdin
// by default, so it never stands in a command line (ps, shell history) or an agent's transcript.
func runWebhookSetSecret(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	fromEnv := fs.String("from-env", "", "read the secret from this environment variable")
	fromFile := fs.String("from-file", "", "read the secret from this file")
	ttl := fs.Duration("previous-ttl", 0, "keep the secret in force before verifying this long (e.g. 24h; at most 720h); default: it stops at once")
	pos, err := c.parse(fs, args, "WEBHOOK_ID")
	if err != nil {
		return err
	}
	if *fromEnv != "" && *fromFile != "" {
		return usagef("webhook set-secret: give --from-env or --from-file, not both")
	}
	if *ttl < 0 || *ttl > 30*24*time.Hour {
		return usagef("webhook set-secret: --previous-ttl must be between 0 and 720h, got %s", *ttl)
	}
	secret, err := readSecret(*fromEnv, *fromFile)
	if err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var ttlArg *time.Duration // nil: the old secret stops at once
	if *ttl > 0 {
		ttlArg = ttl
	}
	w, err := asObject(conn.WebhookSetSecret(ctx, pos[0], secret, ttlArg))
	if err != nil {
		return err
	}
	return c.emit(w, func(out io.Writer) {
		old := "stopped verifying now"
		if w["previous_secret_until"] != nil {
			old = "verifies until " + text(w["previous_secret_until"])
		}
		fmt.Fprintf(out, "the provider's secret is in force for webhook %s (%s); it is not shown again\n",
			text(w["webhook_id"]), text(w["source_type"]))
		pairs(out, "secret_source", text(w["secret_source"]), "previous secret", old)
	})
}

// readSecret reads the secret from an environment variable, a file or stdin, trimmed of the
// whitespace a paste or echo adds. Error messages never include it.
func readSecret(fromEnv, fromFile string) (string, error) {
	var raw string
	switch {
	case fromEnv != "":
		v, ok := os.LookupEnv(fromEnv)
		if !ok || v == "" {
			return "", usagef("webhook set-secret: environment variable %s is unset or empty", fromEnv)
		}
		raw = v
	case fromFile != "":
		f, err := os.Open(fromFile)
		if err != nil {
			return "", usagef("webhook set-secret: cannot read --from-file: %v", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
		if err != nil {
			return "", usagef("webhook set-secret: cannot read --from-file: %v", err)
		}
		raw = string(b)
	default:
		if term.IsTerminal(int(os.Stdin.Fd())) {
			// Not echoed: the secret stays off the screen (and any screen recording) too.
			fmt.Fprint(os.Stderr, "paste the provider's signing secret, then Enter: ")
			b, err := term.ReadPassword(int(os.Stdin.Fd()))
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return "", usagef("webhook set-secret: cannot read the secret from the terminal: %v", err)
			}
			raw = string(b)
			break
		}
		// One line: a terminal paste ends with Enter, a pipe with EOF.
		line, err := bufio.NewReader(io.LimitReader(os.Stdin, maxSecret+1)).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", usagef("webhook set-secret: cannot read the secret from stdin: %v", err)
		}
		raw = line
	}
	s := strings.TrimSpace(raw)
	switch {
	case s == "":
		return "", usagef("webhook set-secret: the secret is empty")
	case len(s) > maxSecret:
		return "", usagef("webhook set-secret: the secret is over %d bytes", maxSecret)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "", usagef("webhook set-secret: the secret must be printable ASCII without spaces")
		}
	}
	return s, nil
}

// switchboard webhook list [--human NAME] → array of webhooks with their owner, whose secret is
// in force and their refusals (never a secret or an ingest token).
func runWebhookList(ctx context.Context, c *cli, args []string) error {
	list, err := c.listForHuman(ctx, args, "only the webhooks of this human's agents", (*store.Operator).WebhookAdminList)
	if err != nil {
		return err
	}
	for _, w := range list {
		delete(w, "ingest_token") // webhook_admin_list never has it; make sure it never appears here
		delete(w, "signing_secret")
	}
	return c.emit(list, func(out io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, w := range list {
			ref, _ := w["refusals"].(map[string]any)
			last := "-"
			if l, ok := ref["last"].(map[string]any); ok {
				last = text(l["reason"]) + " at " + text(l["at"])
				if l["delivery_id"] != nil {
					last += " (" + text(l["delivery_id"]) + ")"
				}
			}
			secret := text(w["secret_source"])
			if secret == "" {
				secret = "-"
			}
			rows = append(rows, []string{text(w["webhook_id"]), text(w["human"]), text(w["agent"]),
				text(w["source_type"]), text(w["target_queue"]), secret, text(ref["total"]), last})
		}
		table(out, []string{"WEBHOOK_ID", "HUMAN", "AGENT", "SOURCE", "QUEUE", "SECRET", "REFUSED", "LAST_REFUSAL"}, rows)
	})
}

// switchboard events list [--endpoint ID|SLUG] → array of MCP Events webhook subscriptions
// {id, endpoint_id, name, arguments, url, refresh_before, active, last_error}: never a secret.
func runEventsList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	endpoint := fs.String("endpoint", "", "only this endpoint's subscriptions (id or slug)")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var ep *string
	if *endpoint != "" {
		ep = endpoint
	}
	list, err := asList(conn.EventSubscriptions(ctx, ep))
	if err != nil {
		return err
	}
	return c.emit(list, func(out io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, s := range list {
			lastErr := text(s["last_error"])
			if lastErr == "" {
				lastErr = "-"
			}
			args, _ := json.Marshal(s["arguments"])
			rows = append(rows, []string{text(s["id"]), text(s["endpoint_id"]), text(s["name"]), string(args),
				text(s["url"]), text(s["refresh_before"]), text(s["active"]), lastErr})
		}
		table(out, []string{"ID", "ENDPOINT", "EVENT", "ARGUMENTS", "URL", "REFRESH_BEFORE", "ACTIVE", "LAST_ERROR"}, rows)
	})
}
