// Package webhooktools is the agent's webhook tools (contract §4.4, §6): self-management of
// webhooks within the ceiling, routes, rules and event history. Each verb is a thin call of one
// SQL function through server/store; Go adds only what SQL cannot do: minting secrets, building
// ingest URLs, and parsing and evaluating jq. The deliveries themselves arrive at another
// package, server/receiver. Errors are *store.Error or errors store.Classify maps.
package webhooktools

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	"switchboard/server/rules"
	"switchboard/server/store"
)

// Service runs the webhook verbs for one calling endpoint at a time.
type Service struct {
	st      *store.Store
	baseURL string // e.g. http://127.0.0.1:8080, for ingest URLs
}

// New builds the service. baseURL is the public base of the server (no trailing slash).
func New(st *store.Store, baseURL string) *Service {
	return &Service{st: st, baseURL: baseURL}
}

// decode decodes what a store call answered into out.
func decode(raw []byte, err error, out any) error {
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return store.Internal(err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// ruleError turns a rules validation error into its wire error.
func ruleError(err error) error {
	if re, ok := err.(*rules.Error); ok {
		return store.Errorf(re.Code, "%s", re.Message)
	}
	return err
}
