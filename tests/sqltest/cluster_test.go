package sqltest

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// On the private cluster (db/pgcluster.sh), another local OS user gets nowhere: not over TCP
// without the password or with a guessed one, not through the socket, not by reading the
// password file. Runs when the tests run as root on that cluster (as `make test` does here).
func TestPrivateClusterKeepsLocalUsersOut(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run commands as another OS user")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql")
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Skip("no runuser")
	}
	d := fresh(t)
	var dataDir string
	if err := d.QueryRow(ctx(), "SHOW data_directory").Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("../../db/pgcluster.sh", "dir").Output()
	if err != nil || filepath.Join(strings.TrimSpace(string(out)), "data") != dataDir {
		t.Skipf("the test database is not on this checkout's private cluster (%s)", dataDir)
	}
	clusterDir := filepath.Dir(dataDir)

	const secret = "s3cr3t-signing-secret-of-the-test"
	ep := d.vend("alice", "worker", "inbox")
	d.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, ep)
	d.exec(`SELECT switchboard.webhook_create($1, 'github', 'inbox', repeat('t', 40), $2)`, ep, secret)

	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	dbname := strings.TrimPrefix(u.Path, "/")
	query := "SELECT signing_secret, ingest_token FROM switchboard.webhooks"
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tcp, no password", []string{psql, "-wXAt", "postgres://postgres@127.0.0.1:" + u.Port() + "/" + dbname + "?sslmode=disable", "-c", query}},
		{"tcp, guessed password", []string{psql, "-wXAt", "postgres://postgres:postgres@127.0.0.1:" + u.Port() + "/" + dbname + "?sslmode=disable", "-c", query}},
		{"socket", []string{psql, "-wXAt", "host=" + clusterDir + " port=" + u.Port() + " user=postgres dbname=" + dbname, "-c", query}},
		{"password file", []string{"cat", filepath.Join(clusterDir, "password")}},
	} {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(cctx, "runuser", append([]string{"-u", "nobody", "--"}, c.args...)...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"} // no PGPASSWORD from the test's environment
		got, err := cmd.CombinedOutput()
		cancel()
		if err == nil || strings.Contains(string(got), secret) {
			t.Errorf("as nobody, %s: succeeded (%v): %s", c.name, err, got)
			continue
		}
		if !strings.Contains(string(got), "password") && !strings.Contains(string(got), "Permission denied") {
			t.Errorf("as nobody, %s: failed for another reason: %s", c.name, got)
		}
	}
}
