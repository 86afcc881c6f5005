package webhooktools

import (
	"context"
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"

	api "switchboard/server/mcpapi"
)

// verb adapts a Service method to a tool: decode the validated arguments, run it for the
// calling endpoint, encode the result.
func verb[In, Out any](f func(context.Context, string, In) (Out, error)) func(context.Context, *api.Call, json.RawMessage) (json.RawMessage, error) {
	return api.Typed(func(ctx context.Context, c *api.Call, in In) (json.RawMessage, error) {
		out, err := f(ctx, c.Endpoint.ID, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
}

type props = map[string]*jsonschema.Schema

func webhookID() *jsonschema.Schema { return api.String("webhook id") }

func actionSchema() *jsonschema.Schema {
	return api.Object(props{
		"queue":     api.String("queue for this delivery (within the webhook's grant)"),
		"endpoints": api.ArrayOf(api.String("endpoint id"), "narrow the delivery to these of the webhook's current targets (at most 16)"),
		"drop":      api.Boolean("true: store the event, make no todo"),
	})
}

func ruleSchema() *jsonschema.Schema {
	return api.Object(props{
		"id":     api.String("1-64 of [A-Za-z0-9_-]; minted when omitted"),
		"name":   api.String("optional label, at most 128 bytes"),
		"expr":   api.String("jq over {source, kind, webhook_id, trust_mode, verified, content_type, size, headers, payload}; matches when its first output is neither false nor null"),
		"action": actionSchema(),
	}, "expr", "action")
}

func webhookOut() *jsonschema.Schema {
	return api.Out(props{
		"webhook_id":     api.String(""),
		"ingest_url":     api.String("where the producer POSTs deliveries"),
		"source_type":    api.String(""),
		"target_queue":   api.String(""),
		"trust_mode":     api.Enum("signed: HMAC-verified; token: the URL is the credential", "signed", "token"),
		"signing_secret": api.String("signed types only, shown only now: configure it in the producer"),
		"secret_issuer": api.Enum("create only: who issues this source type's secret (provider: stripe and slack "+
			"sign with their own; either: standard)", "switchboard", "provider", "either"),
		"next_step": api.String("create only: what to do now, by secret_issuer"),
		"secret_source": api.Enum("signed types: whose secret verifies now (provider: your human set the "+
			"provider's with switchboard webhook set-secret; agents never handle it)", "switchboard", "provider"),
		"secret_set_at":         api.String("when a provider's secret was set"),
		"previous_secret_until": api.String("the secret in force before still verifies until then"),
		"refusals": api.Out(props{
			"total":           api.Integer(""),
			"bad_signature":   api.Integer("no, malformed or wrong signature (often: the provider's secret is not set)"),
			"stale_timestamp": api.Integer("signed timestamp outside the 5-minute window (clock skew, replays)"),
			"too_large":       api.Integer("body over the source type's cap"),
			"unparseable":     api.Integer("body or delivery id unusable"),
			"last": api.Out(props{"at": api.String(""), "reason": api.String(""),
				"delivery_id": api.String("the provider's, when the headers named one")}),
		}),
	}, "webhook_id", "ingest_url", "source_type", "target_queue", "trust_mode")
}

func ruleSetOut() *jsonschema.Schema {
	return api.Out(props{
		"webhook_id":     api.String(""),
		"target_queue":   api.String(""),
		"rules":          api.ArrayOf(ruleSchema(), "in evaluation order"),
		"default_action": actionSchema(),
		"params":         api.JSONObject("bound as $params"),
		"grant": api.Out(props{
			"queues":    api.ArrayOf(api.String(""), "queues a rule may name"),
			"endpoints": api.ArrayOf(api.String(""), "endpoints a rule may narrow to (the live targets)"),
		}),
	}, "webhook_id", "target_queue", "rules", "params", "grant")
}

// Tools is the webhook family: self-management, routes, rules and events (contract §4.4, §6).
func Tools(s *Service) []api.Tool {
	return []api.Tool{
		{
			Name:   "create_webhook",
			Title:  "Create a webhook",
			Effect: api.Changes,
			Description: "Create an inbound webhook within your ceiling. Returns its ingest URL and, for signed " +
				"source types, the signing secret - shown only here and by rotate_webhook. source_type standard is " +
				"Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature v1; whsec_ secret), as sent by " +
				"OpenAI, Clerk, Resend, Supabase and every Svix-based sender; generic is token-only, unverified. " +
				"Stripe and Slack issue their own secret (secret_issuer provider): follow next_step.",
			Input: api.Object(props{
				"source_type": api.Enum("who sends the deliveries", "github", "gitea", "stripe", "slack", "cairn",
					"standard", "generic"),
				"target_queue": api.String("queue the deliveries land in (one of your ceiling's queues)"),
			}, "source_type", "target_queue"),
			Output:  webhookOut(),
			Webhook: true,
			Run:     verb(s.CreateWebhook),
		},
		{
			Name:   "list_webhooks",
			Title:  "List webhooks",
			Effect: api.ReadOnly,
			Description: "Your webhooks (never their secrets) and your ceiling: max, allowed source types and queues, used. " +
				"Each signed webhook says whose secret is in force (secret_source), and every webhook counts the " +
				"deliveries it refused, by reason, with the last one: a webhook that \"gets nothing\" shows why here.",
			Input: api.Object(props{}),
			Output: api.Out(props{
				"webhooks": api.ArrayOf(webhookOut(), ""),
				"ceiling":  api.Out(props{"max": api.Integer(""), "used": api.Integer("")}),
			}, "webhooks", "ceiling"),
			Run: verb(s.ListWebhooks),
		},
		{
			Name:   "rotate_webhook",
			Title:  "Rotate a webhook's URL and secret",
			Effect: api.Destroys,
			Description: "New ingest URL and (signed types) new secret; the old ones stop working at once. " +
				"Refused (invalid_argument) while a provider's secret is in force: the human rotates it at the " +
				"provider and runs switchboard webhook set-secret.",
			Input:   api.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:  webhookOut(),
			Webhook: true,
			Run:     verb(s.RotateWebhook),
		},
		{
			Name:        "delete_webhook",
			Title:       "Delete a webhook",
			Effect:      api.Destroys,
			Description: "Delete one of your webhooks; its URL answers 404 from now on.",
			Input:       api.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:      api.Out(props{"webhook_id": api.String(""), "deleted": api.Boolean("")}, "webhook_id", "deleted"),
			Webhook:     true,
			Run:         verb(s.DeleteWebhook),
		},
		{
			Name:   "add_webhook_route",
			Title:  "Route a webhook to an endpoint",
			Effect: api.Settles,
			Description: "Also deliver a webhook's deliveries to another endpoint (one todo per target): one of your " +
				"human's, or of a human who approved your deliveries. Idempotent.",
			Input: api.Object(props{"webhook_id": webhookID(), "target_endpoint_id": api.String("endpoint id")},
				"webhook_id", "target_endpoint_id"),
			Output: api.Out(props{"webhook_id": api.String(""), "target_endpoint_id": api.String(""), "routed": api.Boolean("")}),
			Run:    verb(s.AddRoute),
		},
		{
			Name:        "list_webhook_routes",
			Title:       "List a webhook's routes",
			Effect:      api.ReadOnly,
			Description: "The owning endpoint and every route of a webhook.",
			Input:       api.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output: api.Out(props{
				"webhook_id":        api.String(""),
				"owner_endpoint_id": api.String("always a target"),
				"routes": api.ArrayOf(api.Out(props{"target_endpoint_id": api.String(""), "granted_at": api.String("")}),
					"in grant order"),
			}, "webhook_id", "owner_endpoint_id", "routes"),
			Run: verb(s.ListRoutes),
		},
		{
			Name:        "remove_webhook_route",
			Title:       "Remove a webhook route",
			Effect:      api.DestroysSettling,
			Description: "Stop delivering a webhook to an endpoint. Idempotent; the owner cannot be removed.",
			Input: api.Object(props{"webhook_id": webhookID(), "target_endpoint_id": api.String("endpoint id")},
				"webhook_id", "target_endpoint_id"),
			Output: api.Out(props{"webhook_id": api.String(""), "target_endpoint_id": api.String(""), "removed": api.Boolean("")}),
			Run:    verb(s.RemoveRoute),
		},
		{
			Name:        "list_webhook_rules",
			Title:       "List a webhook's rules",
			Effect:      api.ReadOnly,
			Description: "A webhook's routing rules, default action, params and grant.",
			Input:       api.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:      ruleSetOut(),
			Run:         verb(s.ListRules),
		},
		{
			Name:   "set_webhook_rules",
			Title:  "Replace a webhook's rules",
			Effect: api.DestroysSettling,
			Description: "Replace a webhook's rule list (at most 32; first match wins). The whole list is checked; " +
				"a refused save keeps the previous list.",
			Input: api.Object(props{
				"webhook_id":     webhookID(),
				"rules":          api.ArrayOf(ruleSchema(), "ordered"),
				"default_action": actionSchema(),
				"params":         api.AnyJSON("a JSON object of at most 16 KiB, bound as $params; omit to keep the stored one"),
			}, "webhook_id", "rules"),
			Output: ruleSetOut(),
			Run:    verb(s.SetRules),
		},
		{
			Name:        "add_webhook_rule",
			Title:       "Add a webhook rule",
			Effect:      api.Changes,
			Description: "Insert one rule at a 0-based position (default: append).",
			Input: api.Object(props{
				"webhook_id": webhookID(),
				"id":         api.String("rule id; minted when omitted"),
				"name":       api.String("optional label"),
				"expr":       api.String("jq expression"),
				"action":     actionSchema(),
				"position":   api.Integer("0-based; clamped; default append"),
			}, "webhook_id", "expr", "action"),
			Output: ruleSetOut(),
			Run:    verb(s.AddRule),
		},
		{
			Name:        "update_webhook_rule",
			Title:       "Update a webhook rule",
			Effect:      api.DestroysSettling,
			Description: "Change the name, expression or action of one rule.",
			Input: api.Object(props{
				"webhook_id": webhookID(),
				"rule_id":    api.String("rule id"),
				"name":       api.String("new label"),
				"expr":       api.String("new jq expression"),
				"action":     actionSchema(),
			}, "webhook_id", "rule_id"),
			Output: ruleSetOut(),
			Run:    verb(s.UpdateRule),
		},
		{
			Name:        "move_webhook_rule",
			Title:       "Move a webhook rule",
			Effect:      api.Settles,
			Description: "Move one rule to a 0-based position (clamped).",
			Input: api.Object(props{"webhook_id": webhookID(), "rule_id": api.String("rule id"), "position": api.Integer("0-based")},
				"webhook_id", "rule_id", "position"),
			Output: ruleSetOut(),
			Run:    verb(s.MoveRule),
		},
		{
			Name:        "remove_webhook_rule",
			Title:       "Remove a webhook rule",
			Effect:      api.DestroysSettling,
			Description: "Remove one rule; removing an absent rule succeeds.",
			Input:       api.Object(props{"webhook_id": webhookID(), "rule_id": api.String("rule id")}, "webhook_id", "rule_id"),
			Output:      ruleSetOut(),
			Run:         verb(s.RemoveRule),
		},
		{
			Name:   "test_webhook_rules",
			Title:  "Test webhook rules",
			Effect: api.ReadOnly,
			Description: "Dry run: evaluate a sample payload or a stored event of the webhook against the saved rules " +
				"or candidate ones. Persists nothing, rings nothing.",
			Input: api.Object(props{
				"webhook_id":     webhookID(),
				"payload":        api.AnyJSON("sample payload (exactly one of payload and event_id)"),
				"event_id":       api.Integer("a stored event of this webhook"),
				"headers":        &jsonschema.Schema{Type: "object", AdditionalProperties: api.String("")},
				"rules":          api.ArrayOf(ruleSchema(), "candidate rules (default: the saved ones)"),
				"default_action": actionSchema(),
				"params":         api.AnyJSON("candidate params (a JSON object)"),
			}, "webhook_id"),
			Output: api.Out(props{
				"decision": api.Out(props{
					"drop":        api.Boolean(""),
					"queue":       api.String(""),
					"endpoints":   api.ArrayOf(api.String(""), ""),
					"disposition": api.String(""),
					"faulted":     api.Boolean(""),
				}),
				"trace":    api.JSONObject("which rule decided, or the default, or the fault"),
				"envelope": api.JSONObject("the jq input document"),
			}, "decision", "trace", "envelope"),
			Run: verb(s.TestRules),
		},
		{
			Name:        "list_webhook_events",
			Title:       "List webhook events",
			Effect:      api.ReadOnly,
			Description: "Deliveries to your human's webhooks, newest first (limit default 50, max 200; before_id pages).",
			Input: api.Object(props{
				"webhook_id": webhookID(),
				"limit":      api.Integer("default 50, max 200"),
				"before_id":  api.Integer("only events older than this id"),
			}),
			Output: api.Out(props{"events": api.ArrayOf(api.Out(props{"id": api.Integer("")}), "newest first")}, "events"),
			Run:    verb(s.ListEvents),
		},
		{
			Name:        "get_webhook_event",
			Title:       "Get a webhook event",
			Effect:      api.ReadOnly,
			Description: "One delivery with its sanitized headers, payload and routing trace.",
			Input:       api.Object(props{"id": api.Integer("event id")}, "id"),
			Output: api.Out(props{
				"id":      api.Integer("event id"),
				"headers": api.JSONObject("sanitized request headers (signatures and tokens redacted)"),
				"payload": api.AnyJSON("the delivery's body as JSON (null when it was not JSON)"),
				"routing": api.Nullable("object", "the rule trace"),
			}),
			Run: verb(s.GetEvent),
		},
	}
}
