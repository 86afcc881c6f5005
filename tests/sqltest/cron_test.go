package sqltest

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// The reaper can be scheduled with pg_cron: the job lands in cron.job (in the database pg_cron
// lives in) pointed at our database, and its command runs there.
func TestPgCronSchedulesReap(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	dbname := strings.TrimPrefix(u.Path, "/")

	var cronDB string
	if err := d.QueryRow(ctx(), "SHOW cron.database_name").Scan(&cronDB); err != nil {
		t.Skipf("pg_cron is not preloaded on this server (%v)", err)
	}
	admin, err := testdb.AdminURL()
	if err != nil {
		t.Fatal(err)
	}
	cron := connect(t, testdb.WithDatabase(admin, cronDB))
	// Other packages may create the extension at the same moment; a lost race is not a failure.
	for i := 0; ; i++ {
		_, err = cron.Exec(ctx(), "CREATE EXTENSION IF NOT EXISTS pg_cron")
		if err == nil {
			break
		}
		if i == 5 {
			t.Fatalf("CREATE EXTENSION pg_cron in %s: %v", cronDB, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	job := "switchboard-reap-" + dbname
	const command = "SELECT switchboard.reap()"
	var jobID int64
	if err := cron.QueryRow(ctx(), "SELECT cron.schedule_in_database($1, '* * * * *', $2, $3)",
		job, command, dbname).Scan(&jobID); err != nil {
		t.Fatalf("cron.schedule_in_database: %v", err)
	}
	t.Cleanup(func() {
		_, _ = cron.Exec(ctx(), "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = $1", job)
	})

	var gotCommand, gotDB, gotSchedule string
	var active bool
	if err := cron.QueryRow(ctx(), "SELECT command, database, schedule, active FROM cron.job WHERE jobid = $1 AND jobname = $2",
		jobID, job).Scan(&gotCommand, &gotDB, &gotSchedule, &active); err != nil {
		t.Fatalf("job %s not in cron.job: %v", job, err)
	}
	if gotCommand != command || gotDB != dbname || gotSchedule != "* * * * *" || !active {
		t.Fatalf("cron.job row: command=%q database=%q schedule=%q active=%v", gotCommand, gotDB, gotSchedule, active)
	}

	// The job's command text does the reaper's work in the test database.
	ep := d.vend("alice", "cronned", "inbox")
	id := d.create(ep, "inbox", "stuck")
	d.mustClaim(ep, id)
	d.expireLease(id)
	if _, err := d.Exec(ctx(), gotCommand); err != nil {
		t.Fatalf("running the job command %q: %v", gotCommand, err)
	}
	if r := d.row(id); r.State != "pending" {
		t.Fatalf("after the job command the todo is %s, want pending", r.State)
	}

	var unscheduled bool
	if err := cron.QueryRow(ctx(), "SELECT cron.unschedule($1)", job).Scan(&unscheduled); err != nil || !unscheduled {
		t.Fatalf("cron.unschedule: %v, %v", unscheduled, err)
	}
	var left int
	if err := cron.QueryRow(ctx(), "SELECT count(*) FROM cron.job WHERE jobname = $1", job).Scan(&left); err != nil || left != 0 {
		t.Fatalf("job still scheduled after unschedule: %d, %v", left, err)
	}
}
