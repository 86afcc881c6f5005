package provider

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// Sign produces the headers a real provider would send for body (used by tests, benchmarks and
// demo curl lines). deliveryID and eventType fill the provider headers where the provider puts
// them in headers; stripe and cairn carry them in the body, which Sign leaves alone (except that
// cairn also echoes a non-empty deliveryID in X-Cairn-Event-Id). standard signs deliveryID as
// its webhook-id with the decoded whsec_ key. Unknown sources get no headers.
func Sign(source string, secret []byte, body []byte, now time.Time, deliveryID, eventType string) http.Header {
	h := http.Header{}
	set := func(name, value string) {
		if value != "" {
			h.Set(name, value)
		}
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	switch source {
	case "github":
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(secret, body)))
		set("X-GitHub-Delivery", deliveryID)
		set("X-GitHub-Event", eventType)
	case "gitea":
		h.Set("X-Gitea-Signature", hex.EncodeToString(mac(secret, body)))
		set("X-Gitea-Delivery", deliveryID)
		set("X-Gitea-Event", eventType)
	case "stripe":
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac(secret, []byte(ts), []byte("."), body)))
	case "slack":
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac(secret, []byte("v0:"), []byte(ts), []byte(":"), body)))
		h.Set("X-Slack-Request-Timestamp", ts)
	case "cairn":
		h.Set("X-Cairn-Signature", "sha256="+hex.EncodeToString(mac(secret, body)))
		set("X-Cairn-Event-Id", deliveryID)
	case "standard":
		ts, sig := signStandard(secret, body, now, deliveryID)
		h.Set("Webhook-Id", deliveryID)
		h.Set("Webhook-Timestamp", ts)
		h.Set("Webhook-Signature", sig)
	case "generic":
		set("X-Delivery-Id", deliveryID)
		set("X-Event-Type", eventType)
	default:
		return h
	}
	h.Set("Content-Type", "application/json")
	return h
}
