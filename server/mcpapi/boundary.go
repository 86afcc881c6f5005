package mcpapi

// Answers at the HTTP and JSON-RPC boundary that a client can act on: what to send when the
// credential is missing or wrong (and where OAuth starts), and which capabilities exist.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// credentialHint is the action a client takes on a 401. ASCII only: it goes into a header
// (RFC 6750 allows no other characters in error_description).
const credentialHint = "send Authorization: Bearer sbk_... with the credential vended for this endpoint"

// unauthenticated answers 401 with RFC 6750's error: invalid_request when no bearer credential
// was sent, invalid_token when it is unknown, revoked, expired or issued for another endpoint.
// resource_metadata (RFC 9728) points an OAuth client at the endpoint's protected resource
// metadata (server/oauth): a hosted agent gets its token there. The JSON body says the same.
func (h *Handler) unauthenticated(w http.ResponseWriter, r *http.Request, missing bool) {
	oauthErr, what := "invalid_token", "unknown or revoked bearer credential"
	if missing {
		oauthErr, what = "invalid_request", "missing bearer credential"
	}
	desc := what + ": " + credentialHint
	meta := h.o.BaseURL + "/.well-known/oauth-protected-resource/mcp/" + url.PathEscape(r.PathValue("slug"))
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(
		`Bearer realm="switchboard", resource_metadata="%s", error="%s", error_description="%s"`, meta, oauthErr, desc))
	writeError(w, http.StatusUnauthorized, "unauthenticated", desc)
}

// undeclared answers -32601 for the methods of capabilities the server does not declare in
// initialize (prompts, logging, completions), which the SDK would otherwise answer with empty
// lists or success. Resources are declared: the granted queues (resources.go).
func undeclared(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "prompts/") ||
			method == "logging/setLevel" || method == "completion/complete" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
				Message: fmt.Sprintf("method not found: %s (this server declares only the tools and resources capabilities)", method)}
		}
		return next(ctx, method, req)
	}
}
