package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server"
)

// Every schema in tools/list is one that the ecosystem's clients accept: the TypeScript and
// Python SDKs reject a bare `true` where a property schema belongs (and with it the whole
// tools/list), and MCP Inspector --strict flags schemas with no keyword at all ({} or only a
// description) and type arrays. The one boolean allowed is `additionalProperties: false` on
// input objects, which every client accepts and OpenAI's strict mode requires.
func TestToolSchemasArePortable(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv, err := server.New(server.DefaultConfig(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := srv.Tools().Published()
	if len(tools) != 24 {
		t.Fatalf("%d tools registered, want the 24 verbs", len(tools))
	}
	for _, tool := range tools {
		for name, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			if schema == nil {
				continue
			}
			raw, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatal(err)
			}
			for _, p := range unportable(v, tool.Name+"."+name, false) {
				t.Error(p)
			}
		}
	}
}

// unportable lists the places in a schema that clients reject or Inspector --strict flags.
func unportable(v any, path string, additional bool) []string {
	switch s := v.(type) {
	case bool:
		if additional && !s {
			return nil
		}
		return []string{fmt.Sprintf("%s: boolean schema %v", path, s)}
	case map[string]any:
		var out []string
		keyword := false
		for k, sub := range s {
			switch k {
			case "description", "title":
				continue
			case "type":
				if _, many := sub.([]any); many {
					out = append(out, path+": type array (use anyOf)")
				}
			case "properties":
				for name, p := range sub.(map[string]any) {
					out = append(out, unportable(p, path+".properties."+name, false)...)
				}
			case "items", "not":
				out = append(out, unportable(sub, path+"."+k, false)...)
			case "additionalProperties":
				out = append(out, unportable(sub, path+"."+k, true)...)
			case "anyOf", "oneOf", "allOf":
				for i, b := range sub.([]any) {
					out = append(out, unportable(b, fmt.Sprintf("%s.%s[%d]", path, k, i), false)...)
				}
			}
			keyword = true
		}
		if !keyword {
			out = append(out, path+": schema without a keyword (accepts anything; say what it is)")
		}
		return out
	}
	return []string{fmt.Sprintf("%s: not a schema (%T)", path, v)}
}

// Every tool has a title and all four hints, as the connector directories require, and they are
// the ones docs/clients.md gives (the table under "What each tool does to the world").
func TestToolsSayWhatTheyDo(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv, err := server.New(server.DefaultConfig(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	docs := toolTable(t, "../docs/clients.md")
	tools := srv.Tools().Published()
	for _, tool := range tools {
		raw, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Name        string
			Title       string
			Annotations map[string]any
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.Title == "" || len(got.Name) > 64 {
			t.Errorf("%s: title %q; want a title and a name of at most 64 characters", got.Name, got.Title)
		}
		row := []string{got.Title}
		for _, hint := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
			b, ok := got.Annotations[hint].(bool)
			if !ok {
				t.Errorf("%s: %s is %v, want a boolean", got.Name, hint, got.Annotations[hint])
			}
			row = append(row, map[bool]string{true: "yes", false: "no"}[b])
		}
		if want, ok := docs[got.Name]; !ok {
			t.Errorf("%s: not in the table of docs/clients.md", got.Name)
		} else if !slices.Equal(row, want) {
			t.Errorf("%s: the server says %v, docs/clients.md %v (title, readOnly, destructive, idempotent, openWorld)", got.Name, row, want)
		}
		delete(docs, got.Name)
	}
	for name := range docs {
		t.Errorf("docs/clients.md lists %s, which the server does not register", name)
	}
}

// toolTable reads the tool table of docs/clients.md: tool name -> title and the four hints as
// yes/no, in the table's column order.
func toolTable(t *testing.T, path string) map[string][]string {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| Tool | Title | readOnly | destructive | idempotent | openWorld | Why |")
	if !ok {
		t.Fatalf("%s has no tool table", path)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 7 {
			t.Fatalf("%s: a table row without 7 cells: %s", path, line)
		}
		out[strings.Trim(cells[0], "`")] = cells[1:6]
	}
	return out
}
