package tool

import "github.com/modelcontextprotocol/go-sdk/mcp"

// Effect is what a tool does to the world, published as MCP's four tool hints (readOnlyHint,
// destructiveHint, idempotentHint, openWorldHint), all set explicitly: hosts run read-only tools
// freely and ask the user before a destructive one, and the connector directories want every
// hint stated. Every tool names one of the values below (docs/clients.md has the table and a
// reason per verb); the zero Effect is refused by Registry.Add. No tool reaches outside
// Switchboard's own database, so none is open-world.
type Effect struct {
	set                               bool
	readOnly, destructive, idempotent bool
}

var (
	// ReadOnly changes nothing; a repeat changes nothing either.
	ReadOnly = Effect{set: true, readOnly: true, idempotent: true}
	// Changes changes state and discards nothing; a repeat acts again (or is refused).
	Changes = Effect{set: true}
	// Settles sets an end condition and discards nothing; a repeat has no further effect.
	Settles = Effect{set: true, idempotent: true}
	// Destroys deletes or overwrites what is not kept anywhere; a repeat acts again.
	Destroys = Effect{set: true, destructive: true}
	// DestroysSettling deletes or overwrites to an end condition; a repeat has no further effect.
	DestroysSettling = Effect{set: true, destructive: true, idempotent: true}
)

// annotations are the hints as tools/list shows them. The title is repeated there for clients
// of 2025-03-26, which knew only annotations.title.
func (e Effect) annotations(title string) *mcp.ToolAnnotations {
	destructive, openWorld := e.destructive, false
	return &mcp.ToolAnnotations{
		Title:           title,
		ReadOnlyHint:    e.readOnly,
		DestructiveHint: &destructive,
		IdempotentHint:  e.idempotent,
		OpenWorldHint:   &openWorld,
	}
}
