// Command switchboard is the one binary of Switchboard: the server (`serve`), the migrations
// (`migrate`) and the operator CLI of contract §8. The logic lives in the PL/pgSQL functions of
// the schema `switchboard`; every command here parses and checks its arguments, calls one or two
// of those functions over a single connection (store.Operator: the CLI's SQL lives in
// server/store like the server's), and prints the result. One file per command group:
// endpoint.go, human.go, friend.go, webhook.go, todo.go, settings.go, maintenance.go (reap,
// purge), demo.go, migrate.go, serve.go.
//
// Output: with --json (accepted anywhere after the command words) exactly one JSON value on
// stdout; without it a short human-readable form. Errors: one line `switchboard: <message>` on
// stderr. Exit status: 0 success, 2 bad input or a domain refusal from SQL (SQLSTATE class SB,
// nothing written), 1 anything else.
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
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgconn"

	"switchboard/server/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one entry of the CLI: its command words, a synopsis for help, and its body.
type command struct {
	words    string
	synopsis string
	run      func(ctx context.Context, c *cli, args []string) error
}

var commands = []command{
	{"migrate", "migrate [--reinstall] [--lock-timeout 500ms] [--retry-for 2m]", runMigrate},
	{"serve", "serve [--addr HOST:PORT]", func(ctx context.Context, _ *cli, args []string) error { return runServe(ctx, args) }},
	{"demo", "demo", runDemo},
	{"human add", "human add NAME [--operator]", runHumanAdd},
	{"human set-operator", "human set-operator NAME [--off]", runHumanSetOperator},
	{"human invite", "human invite NAME [--ttl 24h]", runHumanInvite},
	{"endpoint vend", "endpoint vend --human NAME --agent NAME --queues a,b [--verbs v1,v2 | --verbs all] [--webhook-max N] [--webhook-sources github,generic] [--webhook-queues a] [--lease-ttl SECONDS]", runEndpointVend},
	{"endpoint list", "endpoint list [--human NAME]", runEndpointList},
	{"endpoint revoke", "endpoint revoke ID|SLUG", runEndpointRevoke},
	{"endpoint rotate", "endpoint rotate ID|SLUG [--grace 10m]", runEndpointRotate},
	{"endpoint connect", "endpoint connect ID|SLUG [--ttl 10m]", runEndpointConnect},
	{"endpoint grants", "endpoint grants ID|SLUG", runEndpointGrants},
	{"endpoint revoke-grant", "endpoint revoke-grant GRANT_ID", runEndpointRevokeGrant},
	{"friend request", "friend request --from NAME --to NAME", runFriendRequest},
	{"friend approve", "friend approve ID", friendDecide("approved")},
	{"friend deny", "friend deny ID", friendDecide("denied")},
	{"friend revoke", "friend revoke ID", friendDecide("revoked")},
	{"friend list", "friend list [--human NAME]", runFriendList},
	{"webhook set-secret", "webhook set-secret WEBHOOK_ID [--from-env VAR | --from-file PATH] [--previous-ttl 24h]", runWebhookSetSecret},
	{"webhook list", "webhook list [--human NAME]", runWebhookList},
	{"events list", "events list [--endpoint ID|SLUG]", runEventsList},
	{"todo push", "todo push --endpoint ID|SLUG --queue Q (--title T [--payload JSON] [--key K] | --file PATH|-)", runTodoPush},
	{"todo dead", "todo dead --endpoint ID|SLUG [--queue Q] [--limit N]", runTodoDead},
	{"todo redrive", "todo redrive ID | todo redrive --endpoint ID|SLUG --queue Q [--since 1h|RFC3339]", runTodoRedrive},
	{"todo cancel", "todo cancel ID", runTodoCancel},
	{"reap", "reap", runReap},
	{"purge", "purge [--dry-run]", runPurge},
	{"settings", "settings | settings set KEY VALUE", runSettings},
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: switchboard COMMAND [ARGS] [--json]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  switchboard %s\n", c.synopsis)
	}
	b.WriteString(`
Environment:
  DATABASE_URL          every command but help connects to it (serve too); required
  SWITCHBOARD_BASE_URL  the public URL; serve records it in the database at start, and
                        endpoint vend/list and demo print MCP URLs from that record unless
                        this variable is set for the CLI itself
  SWITCHBOARD_ADDR      serve's listen address (default 127.0.0.1:8080)

--json prints exactly one JSON value on stdout. -h after any command prints its flags.
`)
	return b.String()
}

// groupUsage lists the subcommands of a command group such as "todo".
func groupUsage(group string) (string, bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: switchboard %s SUBCOMMAND [ARGS] [--json]\n\n", group)
	found := false
	for _, c := range commands {
		if g, _, ok := strings.Cut(c.words, " "); ok && g == group {
			fmt.Fprintf(&b, "  switchboard %s\n", c.synopsis)
			found = true
		}
	}
	b.WriteString("\nswitchboard " + group + " SUBCOMMAND -h prints the flags of one subcommand.\n")
	return b.String(), found
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	args, asJSON := extractJSON(args)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	if len(args) == 2 && isHelp(args[1]) {
		if u, ok := groupUsage(args[0]); ok {
			fmt.Fprint(stdout, u)
			return 0
		}
	}
	cmd, rest, err := lookup(args)
	if err != nil {
		return report(stderr, err)
	}
	c := &cli{stdout: stdout, json: asJSON, words: cmd.words, synopsis: cmd.synopsis}
	return report(stderr, cmd.run(ctx, c, rest))
}

// extractJSON removes --json (or -json) from the arguments, wherever it stands before a "--".
func extractJSON(args []string) ([]string, bool) {
	out := make([]string, 0, len(args))
	found := false
	for i, a := range args {
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		if a == "--json" || a == "-json" {
			found = true
			continue
		}
		out = append(out, a)
	}
	return out, found
}

// lookup finds the command named by the leading words of args and returns the remaining args.
func lookup(args []string) (command, []string, error) {
	if len(args) >= 2 {
		if i := slices.IndexFunc(commands, func(c command) bool { return c.words == args[0]+" "+args[1] }); i >= 0 {
			return commands[i], args[2:], nil
		}
	}
	if i := slices.IndexFunc(commands, func(c command) bool { return c.words == args[0] }); i >= 0 {
		return commands[i], args[1:], nil
	}
	var subs []string
	for _, c := range commands {
		if group, sub, ok := strings.Cut(c.words, " "); ok && group == args[0] {
			subs = append(subs, sub)
		}
	}
	if len(subs) == 0 {
		return command{}, nil, usagef("unknown command %q (see switchboard help)", args[0])
	}
	if len(args) == 1 {
		return command{}, nil, usagef("%s: missing subcommand (one of %s)", args[0], strings.Join(subs, ", "))
	}
	return command{}, nil, usagef("unknown command %q (%s takes one of %s)", args[0]+" "+args[1], args[0], strings.Join(subs, ", "))
}

// --- errors and exit status ---

// exitError carries the exit status of a failure that is not a database error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usagef is bad input: exit status 2, nothing written.
func usagef(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// errHelp ends a command after it printed its help on request (exit 0).
var errHelp = errors.New("help requested")

// report prints err as one line on stderr and returns the exit status. A domain refusal of the SQL
// functions (SQLSTATE class SB) is bad input: its message is fixed human text, exit 2. Any other
// database error is unexpected: exit 1.
func report(stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return 0
	}
	code, msg := 1, err.Error()
	var pgErr *pgconn.PgError
	var exitErr *exitError
	switch {
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "SB"):
		code, msg = 2, pgErr.Message
	case errors.As(err, &pgErr):
		msg = fmt.Sprintf("database error: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	case errors.As(err, &exitErr):
		code = exitErr.code
	}
	msg = strings.Join(strings.Fields(msg), " ") // one line
	fmt.Fprintf(stderr, "switchboard: %s\n", msg)
	return code
}

// sqlState is the SQLSTATE of a database error ("" for anything else).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// --- the per-command context: flags, database, output ---

type cli struct {
	stdout   io.Writer
	json     bool
	words    string // e.g. "endpoint vend"
	synopsis string
}

// flags returns a FlagSet that reports instead of printing or exiting.
func (c *cli) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("switchboard "+c.synopsis, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses the flags and returns exactly `positional` positional arguments.
func (c *cli) parse(fs *flag.FlagSet, args []string, positional ...string) ([]string, error) {
	// Flags may follow positional arguments (endpoint rotate SLUG --grace 10m).
	var rest []string
	err := fs.Parse(args)
	for err == nil && fs.NArg() > 0 {
		rest = append(rest, fs.Arg(0))
		if fs.Arg(0) == "--" {
			rest = append(rest[:len(rest)-1], fs.Args()[1:]...)
			break
		}
		err = fs.Parse(fs.Args()[1:])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(c.stdout, "usage: switchboard %s\n", c.synopsis)
			fs.SetOutput(c.stdout)
			fs.PrintDefaults()
			return nil, errHelp
		}
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			msg = "unknown flag -" + strings.TrimLeft(name, "-")
		}
		return nil, usagef("%s: %s%s (see switchboard %s -h)", c.words, msg, suggestFlag(fs, err), c.words)
	}
	switch {
	case len(rest) < len(positional):
		return nil, usagef("%s: missing %s (usage: switchboard %s)", c.words, positional[len(rest)], c.synopsis)
	case len(rest) > len(positional):
		return nil, usagef("%s: unexpected argument %q (usage: switchboard %s)", c.words, rest[len(positional)], c.synopsis)
	}
	return rest, nil
}

// suggestFlag is "; did you mean --x?" when err names an undefined flag close to a defined one.
func suggestFlag(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	name = strings.TrimLeft(name, "-")
	best, bestD := "", 3 // at most two edits away
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		var all []string
		fs.VisitAll(func(f *flag.Flag) { all = append(all, "--"+f.Name) })
		if len(all) == 0 {
			return "; this command takes no flags"
		}
		return "; flags: " + strings.Join(all, ", ")
	}
	return "; did you mean --" + best + "?"
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// require refuses a missing required flag value.
func (c *cli) require(name, value string) error {
	if value == "" {
		return usagef("%s: --%s is required (see switchboard %s -h)", c.words, name, c.words)
	}
	return nil
}

// connect opens the single connection a command uses (store.Operator: every SQL call of the
// CLI is one of its methods). DATABASE_URL must be set.
func (c *cli) connect(ctx context.Context) (*store.Operator, error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return nil, usagef("DATABASE_URL is not set")
	}
	conn, err := store.ConnectOperator(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the database: %w", err)
	}
	// The URL the running server serves (recorded by serve at start). Before the first
	// migration or the first serve there is none: baseURL falls back to SWITCHBOARD_ADDR.
	if recorded, ok := conn.BaseURL(ctx); ok {
		servedBaseURL = recorded
	}
	return conn, nil
}

// emit prints v as one JSON value with --json, else calls human.
func (c *cli) emit(v any, human func(w io.Writer)) error {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(c.stdout)
	return nil
}

// --- database helpers ---

// decodeJSON decodes what a store call answered, one jsonb value (numbers kept exact).
func decodeJSON(raw []byte, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	return v, nil
}

// object and list run one store call, answering a JSON object or an array of them, on a
// connection of their own: most commands are one call.
func (c *cli) object(ctx context.Context, call func(*store.Operator) ([]byte, error)) (map[string]any, error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return asObject(call(conn))
}

func (c *cli) list(ctx context.Context, call func(*store.Operator) ([]byte, error)) ([]map[string]any, error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return asList(call(conn))
}

// asObject is decodeJSON for a function returning a JSON object.
func asObject(raw []byte, err error) (map[string]any, error) {
	v, err := decodeJSON(raw, err)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("unexpected result shape %T", v)
	}
	return m, nil
}

// listForHuman parses a list command's only flag, --human NAME, and returns what the list
// call fn answers for it: everything without the flag.
func (c *cli) listForHuman(ctx context.Context, args []string, help string,
	fn func(*store.Operator, context.Context, *string) ([]byte, error)) ([]map[string]any, error) {
	fs := c.flags()
	human := fs.String("human", "", help)
	if _, err := c.parse(fs, args); err != nil {
		return nil, err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var humanArg *string
	if *human != "" {
		humanArg = human
	}
	return asList(fn(conn, ctx, humanArg))
}

// asList is decodeJSON for a function returning a JSON array of objects.
func asList(raw []byte, err error) ([]map[string]any, error) {
	v, err := decodeJSON(raw, err)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected result shape %T", v)
	}
	out := make([]map[string]any, 0, len(arr))
	for _, e := range arr {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("unexpected element shape %T", e)
		}
		out = append(out, m)
	}
	return out, nil
}

// --- human-readable output ---

// text renders a JSON value for a table cell or a key/value line.
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = text(e)
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ",")
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

// table prints aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// pairs prints aligned "key  value" lines, two strings at a time.
func pairs(w io.Writer, kv ...string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(tw, "  %s\t%s\n", kv[i], kv[i+1])
	}
	tw.Flush()
}

// --- configuration shared by vend, list and demo ---

func getenvDefault(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// servedBaseURL is the base URL the server recorded in the database (see connect).
var servedBaseURL string

// baseURL is the CLI's own SWITCHBOARD_BASE_URL, else the URL the server recorded at start,
// else http://SWITCHBOARD_ADDR (default 127.0.0.1:8080).
func baseURL() string {
	if v := os.Getenv("SWITCHBOARD_BASE_URL"); v != "" {
		return strings.TrimRight(v, "/")
	}
	if servedBaseURL != "" {
		return servedBaseURL
	}
	return "http://" + getenvDefault("SWITCHBOARD_ADDR", "127.0.0.1:8080")
}

func mcpURL(slug string) string { return baseURL() + "/mcp/" + slug }
