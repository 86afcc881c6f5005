// Command bench measures Switchboard's hot paths on this machine and prints one small table:
// each measurement beside a bare baseline taken in the same run, their ratio, and the target.
//
//	go run ./tests/bench                 (make bench sets SWITCHBOARD_TEST_DATABASE_URL)
//	go run ./tests/bench -d 5s -rounds 3 -only create,claim
//	go run ./tests/bench -json
//	go run ./tests/bench -sql candidate.sql   (try a SQL fix on the bench databases before it is a migration)
//
// It is a benchmark program, not a timed test: nothing fails on a slow machine, the PASS/FAIL
// column only compares against the targets of the issue. Every section gets fresh databases from
// tests/testdb and drops them at the end (-keep leaves them for inspection).
//
// Adding a section: put it in its own file, build rows with the Row type and register it from an
// init func with register(Section{...}). Shared helpers: Bench.NewDB, Bench.Connect, Bench.Run.
//
// Connections are plain *pgx.Conn, one per client: pgxpool's dependency (jackc/puddle) is not in
// go.mod, and a benchmark client wants a pinned session per worker anyway.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/server"
	"switchboard/tests/e2e/mcpbench"
	"switchboard/tests/testdb"
)

// Row is one line of the table. Value and Baseline are in Unit; Ratio is the measured path's
// speed relative to the baseline (1.0 = as fast, higher is better), whatever the unit.
type Row struct {
	Section  string  `json:"section"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline float64 `json:"baseline,omitempty"` // 0: no baseline
	BaseName string  `json:"baseline_name,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"` // 0: no ratio
	Target   string  `json:"target,omitempty"`
	Pass     *bool   `json:"pass,omitempty"` // nil: no target
	Note     string  `json:"note,omitempty"`
}

// Section is one group of measurements. Run returns its rows; an error aborts only this section.
type Section struct {
	Name  string // used by -only
	Order int    // table order (lower first)
	Doc   string
	Run   func(ctx context.Context, b *Bench) ([]Row, error)
}

var sections []Section

func register(s Section) { sections = append(sections, s) }

// Config holds the flags every section may read.
type Config struct {
	Duration  time.Duration
	Warmup    time.Duration
	Rounds    int
	Producers int
	Endpoints []int
	Workers   []int
	Prefill   int
	ReapRows  int
	JSON      bool
	Keep      bool
	Verbose   bool
	Only      map[string]bool
	ExtraSQL  string // -sql: applied to every fresh database after the migrations
}

// Bench is what a section gets: the config and helpers for databases, sessions and timed runs.
type Bench struct {
	Cfg    Config
	log    io.Writer
	mu     sync.Mutex
	drops  []func()
	dir    string // the run's build directory (BuildDir)
	server string // switchboard serve's binary there (ServerBin)
}

// BuildDir is a directory for the run's compiled programs, made on first use and removed when
// the program ends.
func (b *Bench) BuildDir() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		dir, err := os.MkdirTemp("", "switchboard-bench")
		if err != nil {
			return "", err
		}
		b.dir = dir
		b.drops = append(b.drops, func() { os.RemoveAll(dir) })
	}
	return b.dir, nil
}

// ServerBin compiles switchboard once per run (every section that starts servers shares it).
func (b *Bench) ServerBin(ctx context.Context) (string, error) {
	dir, err := b.BuildDir()
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.server == "" {
		bin, err := mcpbench.Build(ctx, dir)
		if err != nil {
			return "", err
		}
		b.server = bin
	}
	return b.server, nil
}

// Logf prints progress on stderr with -v.
func (b *Bench) Logf(format string, args ...any) {
	if b.Cfg.Verbose {
		fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
	}
}

// NewDB creates a fresh migrated database (tests/testdb) and applies -sql to it; it is dropped
// when the program ends.
func (b *Bench) NewDB(ctx context.Context) (string, error) {
	url, drop, err := testdb.Create(ctx)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	if b.Cfg.Keep {
		fmt.Fprintf(b.log, "bench: keeping database %s\n", url)
	} else {
		b.drops = append(b.drops, drop)
	}
	b.mu.Unlock()
	if b.Cfg.ExtraSQL != "" {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return "", err
		}
		defer c.Close(context.Background())
		// Simple protocol: the file may hold several statements.
		if _, err := c.Exec(ctx, b.Cfg.ExtraSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return "", fmt.Errorf("-sql: %w", err)
		}
	}
	return url, nil
}

func (b *Bench) dropAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.drops {
		d()
	}
	b.drops = nil
}

// Connect opens n sessions on url. Close them with CloseAll.
func (b *Bench) Connect(ctx context.Context, url string, n int) ([]*pgx.Conn, error) {
	out := make([]*pgx.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			CloseAll(out)
			return nil, fmt.Errorf("connect: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}

// CloseAll closes sessions opened by Connect.
func CloseAll(conns []*pgx.Conn) {
	for _, c := range conns {
		_ = c.Close(context.Background())
	}
}

// Op is one operation of a client: ok=false means it found nothing to do (an empty queue), which
// is counted as a miss rather than as an operation.
type Op func(ctx context.Context, worker int, c *pgx.Conn) (ok bool, err error)

// Result of a timed run. Ops and Misses cover the measured window only; Total also counts warm-up.
type Result struct {
	Ops     int64
	Misses  int64
	Total   int64
	Elapsed time.Duration
}

// Rate is operations per second in the measured window.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Add accumulates another round.
func (r Result) Add(o Result) Result {
	return Result{Ops: r.Ops + o.Ops, Misses: r.Misses + o.Misses, Total: r.Total + o.Total, Elapsed: r.Elapsed + o.Elapsed}
}

// Run drives one client per session with op: Cfg.Warmup unmeasured, then Cfg.Duration measured.
func (b *Bench) Run(ctx context.Context, conns []*pgx.Conn, op Op) (Result, error) {
	return b.RunFor(ctx, conns, b.Cfg.Warmup, b.Cfg.Duration, op)
}

// RunFor is Run with explicit durations.
func (b *Bench) RunFor(ctx context.Context, conns []*pgx.Conn, warmup, dur time.Duration, op Op) (Result, error) {
	var (
		measuring, stop    atomic.Bool
		ops, misses, total atomic.Int64
		wg                 sync.WaitGroup
		errOnce            sync.Once
		firstErr           error
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c *pgx.Conn) {
			defer wg.Done()
			for !stop.Load() {
				ok, err := op(runCtx, i, c)
				if err != nil {
					if !stop.Load() {
						errOnce.Do(func() { firstErr = err })
						stop.Store(true)
					}
					return
				}
				total.Add(1)
				if measuring.Load() {
					if ok {
						ops.Add(1)
					} else {
						misses.Add(1)
					}
				}
			}
		}(i, c)
	}
	sleep(runCtx, warmup)
	measuring.Store(true)
	start := time.Now()
	sleep(runCtx, dur)
	res := Result{Ops: ops.Load(), Misses: misses.Load(), Elapsed: time.Since(start)}
	stop.Store(true)
	wg.Wait()
	res.Total = total.Load()
	if firstErr != nil {
		return res, firstErr
	}
	return res, ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Ratio returns a/b, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// AtLeast reports v >= min as a Pass pointer.
func AtLeast(v, min float64) *bool { p := v >= min; return &p }

// Below reports v < max as a Pass pointer.
func Below(v, max float64) *bool { p := v < max; return &p }

// --- output -------------------------------------------------------------------------------------

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func printTable(w io.Writer, rows []Row) {
	header := []string{"section", "measurement", "value", "unit", "baseline", "ratio", "target", ""}
	right := []bool{false, false, true, false, true, true, false, false}
	cells := [][]string{header}
	last := ""
	for _, r := range rows {
		sec := r.Section
		if sec == last {
			sec = ""
		}
		last = r.Section
		ratio := "-"
		if r.Ratio != 0 {
			ratio = strconv.FormatFloat(r.Ratio, 'f', 2, 64)
		}
		verdict := ""
		if r.Pass != nil {
			verdict = "PASS"
			if !*r.Pass {
				verdict = "FAIL"
			}
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		cells = append(cells, []string{sec, r.Name, fmtNum(r.Value), r.Unit, fmtNum(r.Baseline), ratio, target, verdict})
	}
	width := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for _, row := range cells {
		var line strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len(c))
			if right[i] {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
			line.WriteString("  ")
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
	var notes []string
	for _, r := range rows {
		if r.BaseName != "" {
			notes = append(notes, fmt.Sprintf("  %s: baseline = %s", r.Name, r.BaseName))
		}
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", r.Name, r.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func machine(ctx context.Context) string {
	admin, err := testdb.AdminURL()
	if err != nil {
		return ""
	}
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return ""
	}
	defer c.Close(ctx)
	var ver, sc string
	_ = c.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('synchronous_commit')").Scan(&ver, &sc)
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = ", load " + strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("PostgreSQL %s, synchronous_commit=%s, %d CPUs%s", ver, sc, runtime.NumCPU(), load)
}

func main() {
	var (
		cfg     Config
		workers string
		only    string
	)
	flag.DurationVar(&cfg.Duration, "d", 2500*time.Millisecond, "measured duration of each timed run")
	flag.DurationVar(&cfg.Warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each timed run")
	flag.IntVar(&cfg.Rounds, "rounds", 2, "alternating rounds per comparison (A B, B A, ...); results are summed")
	flag.IntVar(&cfg.Producers, "producers", 16, "concurrent create-todo producers")
	endpoints := flag.String("endpoints", "1,16", "create-todo: endpoint counts the producers spread over (round robin), each measured doorbell on and off")
	flag.StringVar(&workers, "workers", "1,4,16", "claim+complete worker counts")
	flag.IntVar(&cfg.Prefill, "prefill", 40000, "minimum pending todos before each claim run (grows with the measured rate)")
	flag.IntVar(&cfg.ReapRows, "reap", 100000, "expired leases to reap")
	flag.BoolVar(&cfg.JSON, "json", false, "print the rows as JSON instead of a table")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the benchmark databases (their URLs go to stderr)")
	flag.BoolVar(&cfg.Verbose, "v", false, "progress on stderr")
	flag.StringVar(&only, "only", "", "comma-separated section names to run (default all)")
	sqlFile := flag.String("sql", "", "SQL file applied to every benchmark database after migrating (try a fix before it is a migration)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./tests/bench [flags]\n\nsections (-only):\n")
		sort.SliceStable(sections, func(i, j int) bool { return sections[i].Order < sections[j].Order })
		for _, s := range sections {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-8s %s\n", s.Name, s.Doc)
		}
		fmt.Fprintln(flag.CommandLine.Output(), "\nflags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *sqlFile != "" {
		b, err := os.ReadFile(*sqlFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		cfg.ExtraSQL = string(b)
	}

	var err error
	if cfg.Workers, err = intList(workers); err != nil || len(cfg.Workers) == 0 {
		fmt.Fprintln(os.Stderr, "bench: -workers:", err)
		os.Exit(2)
	}
	if cfg.Endpoints, err = intList(*endpoints); err != nil || len(cfg.Endpoints) == 0 {
		fmt.Fprintln(os.Stderr, "bench: -endpoints:", err)
		os.Exit(2)
	}
	if cfg.Rounds < 1 || cfg.Producers < 1 || cfg.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -rounds, -producers and -d must be positive")
		os.Exit(2)
	}
	sort.SliceStable(sections, func(i, j int) bool { return sections[i].Order < sections[j].Order })
	if only != "" {
		cfg.Only = map[string]bool{}
		known := map[string]bool{}
		for _, s := range sections {
			known[s.Name] = true
		}
		for _, n := range strings.Split(only, ",") {
			n = strings.TrimSpace(n)
			if !known[n] {
				fmt.Fprintf(os.Stderr, "bench: unknown section %q\n", n)
				os.Exit(2)
			}
			cfg.Only[n] = true
		}
	}
	if _, err := testdb.AdminURL(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err, "(or run `make bench`)")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &Bench{Cfg: cfg, log: os.Stderr}
	defer b.dropAll()

	// The harness is the agents' side (MCP clients, pgx baselines, senders, and the in-process
	// receiver of the ingest section): it runs at switchboard serve's GC target. At the default
	// GOGC=100 the go-sdk client spent a third more CPU per call (before the SDK patch, twice as
	// much), CPU taken from the server and PostgreSQL on these shared cores.
	header := machine(ctx) + ", bench " + server.TuneGC()
	started := time.Now()
	var rows []Row
	failed := false
	for _, s := range sections {
		if cfg.Only != nil && !cfg.Only[s.Name] {
			continue
		}
		b.Logf("section %s", s.Name)
		t0 := time.Now()
		r, err := s.Run(ctx, b)
		b.Logf("section %s took %s", s.Name, time.Since(t0).Round(100*time.Millisecond))
		rows = append(rows, r...)
		if err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "bench: section %s: %v\n", s.Name, err)
			if errors.Is(err, context.Canceled) {
				break
			}
		}
	}

	if cfg.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]any{"machine": header, "duration": cfg.Duration.String(),
			"rounds": cfg.Rounds, "elapsed_seconds": time.Since(started).Seconds(), "rows": rows})
	} else {
		fmt.Printf("switchboard bench: %s; %s measured per run (+%s warm-up), %d alternating round(s); took %s\n",
			header, cfg.Duration, cfg.Warmup, cfg.Rounds, time.Since(started).Round(time.Second))
		if *sqlFile != "" {
			fmt.Printf("with -sql %s applied to every benchmark database\n", *sqlFile)
		}
		fmt.Println()
		printTable(os.Stdout, rows)
	}
	if failed {
		b.dropAll()
		os.Exit(1)
	}
}
