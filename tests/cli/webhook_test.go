package cli_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// sbIn runs the binary with stdin and extra environment variables.
func sbIn(t *testing.T, dsn, stdin string, extra []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(env(dsn), extra...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		r.code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// webhook set-secret reads the provider's secret from stdin, an environment variable or a file,
// never prints it, refuses bad input with one line and exit 2 writing nothing; webhook list
// never shows a secret or an ingest token.
func TestWebhookSetSecretAndList(t *testing.T) {
	dsn := testdb.New(t)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "inbox",
		"--webhook-max", "2", "--webhook-sources", "stripe,github", "--webhook-queues", "inbox", "--json")
	conn := db(t, dsn)
	token := strings.Repeat("t", 40)
	id := scalar[string](t, conn, `SELECT switchboard.webhook_create($1, 'stripe', 'inbox', $2, 'whsec_minted') ->> 'webhook_id'`,
		e["endpoint_id"], token)
	secretNow := func() string {
		return scalar[string](t, conn, `SELECT signing_secret FROM switchboard.webhooks WHERE id = $1`, id)
	}

	one, two, three := "whsec_"+strings.Repeat("a1", 16), "whsec_"+strings.Repeat("b2", 16), "whsec_"+strings.Repeat("c3", 16)
	var outputs []string
	r := sbIn(t, dsn, one+"\n", nil, "webhook", "set-secret", id)
	outputs = append(outputs, r.stdout, r.stderr)
	if r.code != 0 || secretNow() != one || !strings.Contains(r.stdout, "not shown again") {
		t.Fatalf("set-secret from stdin: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = sbIn(t, dsn, "", []string{"PROVIDER_SECRET=" + two}, "webhook", "set-secret", id, "--from-env", "PROVIDER_SECRET", "--previous-ttl", "24h", "--json")
	outputs = append(outputs, r.stdout, r.stderr)
	w := decodeOne[obj](t, r.stdout)
	if r.code != 0 || secretNow() != two || w["secret_source"] != "provider" || w["previous_secret_until"] == nil {
		t.Fatalf("set-secret --from-env: exit %d %v", r.code, w)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(three+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = sbIn(t, dsn, "", nil, "webhook", "set-secret", id, "--from-file", file, "--json")
	outputs = append(outputs, r.stdout, r.stderr)
	if r.code != 0 || secretNow() != three {
		t.Fatalf("set-secret --from-file: exit %d %q", r.code, r.stderr)
	}

	// Bad input: one line, exit 2, the secret in force unchanged, the input never echoed.
	bad := "whsec_" + strings.Repeat("d4", 16) + "!"
	for _, c := range []struct {
		stdin string
		extra []string
		args  []string
	}{
		{"", nil, nil},
		{"   \n", nil, nil},
		{bad, nil, nil},
		{"sk_live_" + strings.Repeat("e", 30), nil, nil},
		{one, nil, []string{"--previous-ttl", "721h"}},
		{one, nil, []string{"--from-env", "NOT_SET_ANYWHERE"}},
		{one, []string{"X=" + one}, []string{"--from-env", "X", "--from-file", file}},
		{one, nil, []string{"--from-file", filepath.Join(t.TempDir(), "missing")}},
	} {
		args := append([]string{"webhook", "set-secret", id}, c.args...)
		r := sbIn(t, dsn, c.stdin, c.extra, args...)
		outputs = append(outputs, r.stdout, r.stderr)
		if r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || secretNow() != three {
			t.Errorf("set-secret %v with stdin %.12q: exit %d, stdout %q, stderr %q", c.args, c.stdin, r.code, r.stdout, r.stderr)
		}
	}
	github := scalar[string](t, conn, `SELECT switchboard.webhook_create($1, 'github', 'inbox', $2, 'whsec_minted') ->> 'webhook_id'`,
		e["endpoint_id"], strings.Repeat("g", 40))
	r = sbIn(t, dsn, one, nil, "webhook", "set-secret", github)
	if r.code != 2 || !strings.Contains(r.stderr, "minted") {
		t.Errorf("set-secret on a github webhook: exit %d %q", r.code, r.stderr)
	}
	refused(t, dsn, "webhook", "set-secret", "00000000-0000-4000-8000-000000000000")

	list := ok[[]obj](t, dsn, "webhook", "list", "--human", "alice", "--json")
	if len(list) != 2 || list[0]["secret_source"] != "provider" || list[0]["human"] != "alice" || list[0]["refusals"] == nil {
		t.Fatalf("webhook list: %v", list)
	}
	for _, w := range list {
		for _, k := range []string{"ingest_token", "signing_secret", "previous_secret", "ingest_url"} {
			if _, has := w[k]; has {
				t.Errorf("webhook list shows %s", k)
			}
		}
	}
	human := sb(t, dsn, "webhook", "list")
	outputs = append(outputs, human.stdout, human.stderr)
	if human.code != 0 || !strings.Contains(human.stdout, "provider") || !strings.Contains(human.stdout, id) {
		t.Errorf("webhook list: %q", human.stdout)
	}
	refused(t, dsn, "webhook", "list", "--human", "nobody")
	all := strings.Join(outputs, "\n")
	for _, s := range []string{one, two, three, bad, token, "whsec_minted"} {
		if strings.Contains(all, s) {
			t.Errorf("a secret (%.8s…) appears in the CLI's output", s)
		}
	}
}
