package mcpapi

// Answers at the HTTP and JSON-RPC boundary that a client can act on: what to send when the
// credential is missing or wrong (and where OAuth starts), that a request needs a
// session, which protocol versions are spoken, and that only the tools capability exists.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/store"
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

// legacyVersions are the protocol versions this server speaks, newest first.
func legacyVersions() []string {
	var out []string
	for _, pv := range mcp.SupportedProtocolVersions() {
		if pv < newProtocol {
			out = append(out, pv)
		}
	}
	return out
}

// unsupportedVersion answers a request whose MCP-Protocol-Version this server does not speak.
func unsupportedVersion(w http.ResponseWriter, v string) {
	writeError(w, http.StatusBadRequest, store.CodeInvalidArgument, fmt.Sprintf(
		"unsupported MCP-Protocol-Version %q: this server speaks %s (initialize negotiates one)",
		v, strings.Join(legacyVersions(), ", ")))
}

// initializeOrRefuse lets through a session-less POST that carries initialize (or that does not
// parse, for the SDK to answer). Anything else is answered here with HTTP 400 and the JSON-RPC
// error -32600, before a session is made for it. The body is put back for the SDK.
func initializeOrRefuse(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get(versionHeader) >= newProtocol {
		return true // a sessionless-protocol probe (server/discover): newSession refuses it as such
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds 1 MiB")
		} else {
			writeError(w, http.StatusBadRequest, store.CodeInvalidArgument, "request body could not be read")
		}
		return false
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return true
	}
	var id jsonrpc.ID
	if req, ok := msg.(*jsonrpc.Request); ok {
		if req.Method == "initialize" {
			return true
		}
		id = req.ID
	}
	writeRPCError(w, http.StatusBadRequest, id, jsonrpc.CodeInvalidRequest,
		"Mcp-Session-Id header required: send initialize first, then the session id it returns")
	return false
}

// writeRPCError answers with a JSON-RPC error response as the HTTP body.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, message string) {
	out, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: message}})
	if err != nil { // an id that does not encode: answer without it
		out, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": code, "message": message}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(out)
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
