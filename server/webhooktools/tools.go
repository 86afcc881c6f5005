package webhooktools

import (
	"context"
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"

	"switchboard/server/tool"
)

// verb adapts a Service method to a tool: decode the validated arguments, run it for the
// calling endpoint, encode the result.
func verb[In, Out any](f func(context.Context, string, In) (Out, error)) func(context.Context, *tool.Call, json.RawMessage) (json.RawMessage, error) {
	return tool.Typed(func(ctx context.Context, c *tool.Call, in In) (json.RawMessage, error) {
		out, err := f(ctx, c.Endpoint.ID, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
}

type props = map[string]*jsonschema.Schema

func webhookID() *jsonschema.Schema { return tool.String("webhook id") }

func actionSchema() *jsonschema.Schema {
	return tool.Object(props{
		"queue":     tool.String("queue for this delivery (within the webhook's grant)"),
		"endpoints": tool.ArrayOf(tool.String("endpoint id"), "narrow the delivery to these of the webhook's current targets (at most 16)"),
		"drop":      tool.Boolean("true: store the event, make no todo"),
	})
}

func ruleSchema() *jsonschema.Schema {
	return tool.Object(props{
		"id":     tool.String("1-64 of [A-Za-z0-9_-]; minted when omitted"),
		"name":   tool.String("optional label, at most 128 bytes"),
		"expr":   tool.String("jq over {source, kind, webhook_id, trust_mode, verified, content_type, size, headers, payload}; matches when its first output is neither false nor null"),
		"action": actionSchema(),
	}, "expr", "action")
}

func webhookOut() *jsonschema.Schema {
	return tool.Out(props{
		"webhook_id":     tool.String(""),
		"ingest_url":     tool.String("where the producer POSTs deliveries"),
		"source_type":    tool.String(""),
		"target_queue":   tool.String(""),
		"trust_mode":     tool.Enum("signed: HMAC-verified; token: the URL is the credential", "signed", "token"),
		"signing_secret": tool.String("signed types only, shown only now: configure it in the producer"),
		"secret_issuer": tool.Enum("create only: who issues this source type's secret (provider: stripe and slack "+
			"sign with their own; either: standard)", "switchboard", "provider", "either"),
		"next_step": tool.String("create only: what to do now, by secret_issuer"),
		"secret_source": tool.Enum("signed types: whose secret verifies now (provider: your human set the "+
			"provider's with switchboard webhook set-secret; agents never handle it)", "switchboard", "provider"),
		"secret_set_at":         tool.String("when a provider's secret was set"),
		"previous_secret_until": tool.String("the secret in force before still verifies until then"),
		"refusals": tool.Out(props{
			"total":           tool.Integer(""),
			"bad_signature":   tool.Integer("no, malformed or wrong signature (often: the provider's secret is not set)"),
			"stale_timestamp": tool.Integer("signed timestamp outside the 5-minute window (clock skew, replays)"),
			"too_large":       tool.Integer("body over the source type's cap"),
			"unparseable":     tool.Integer("body or delivery id unusable"),
			"last": tool.Out(props{"at": tool.String(""), "reason": tool.String(""),
				"delivery_id": tool.String("the provider's, when the headers named one")}),
		}),
	}, "webhook_id", "ingest_url", "source_type", "target_queue", "trust_mode")
}

func ruleSetOut() *jsonschema.Schema {
	return tool.Out(props{
		"webhook_id":     tool.String(""),
		"target_queue":   tool.String(""),
		"rules":          tool.ArrayOf(ruleSchema(), "in evaluation order"),
		"default_action": actionSchema(),
		"params":         tool.JSONObject("bound as $params"),
		"grant": tool.Out(props{
			"queues":    tool.ArrayOf(tool.String(""), "queues a rule may name"),
			"endpoints": tool.ArrayOf(tool.String(""), "endpoints a rule may narrow to (the live targets)"),
		}),
	}, "webhook_id", "target_queue", "rules", "params", "grant")
}

// Tools is the webhook family: self-management, routes, rules and events (contract §4.4, §6).
func Tools(s *Service) []tool.Tool {
	return []tool.Tool{
		{
			Name:   "create_webhook",
			Title:  "Create a webhook",
			Effect: tool.Changes,
			Description: "Create an inbound webhook within your ceiling. Returns its ingest URL and, for signed " +
				"source types, the signing secret - shown only here and by rotate_webhook. source_type standard is " +
				"Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature v1; whsec_ secret), as sent by " +
				"OpenAI, Clerk, Resend, Supabase and every Svix-based sender; generic is token-only, unverified. " +
				"Stripe and Slack issue their own secret (secret_issuer provider): follow next_step.",
			Input: tool.Object(props{
				"source_type": tool.Enum("who sends the deliveries", "github", "gitea", "stripe", "slack", "cairn",
					"standard", "generic"),
				"target_queue": tool.String("queue the deliveries land in (one of your ceiling's queues)"),
			}, "source_type", "target_queue"),
			Output:  webhookOut(),
			Webhook: true,
			Run:     verb(s.CreateWebhook),
		},
		{
			Name:   "list_webhooks",
			Title:  "List webhooks",
			Effect: tool.ReadOnly,
			Description: "Your webhooks (never their secrets) and your ceiling: max, allowed source types and queues, used. " +
				"Each signed webhook says whose secret is in force (secret_source), and every webhook counts the " +
				"deliveries it refused, by reason, with the last one: a webhook that \"gets nothing\" shows why here.",
			Input: tool.Object(props{}),
			Output: tool.Out(props{
				"webhooks": tool.ArrayOf(webhookOut(), ""),
				"ceiling":  tool.Out(props{"max": tool.Integer(""), "used": tool.Integer("")}),
			}, "webhooks", "ceiling"),
			Run: verb(s.ListWebhooks),
		},
		{
			Name:   "rotate_webhook",
			Title:  "Rotate a webhook's URL and secret",
			Effect: tool.Destroys,
			Description: "New ingest URL and (signed types) new secret; the old ones stop working at once. " +
				"Refused (invalid_argument) while a provider's secret is in force: the human rotates it at the " +
				"provider and runs switchboard webhook set-secret.",
			Input:   tool.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:  webhookOut(),
			Webhook: true,
			Run:     verb(s.RotateWebhook),
		},
		{
			Name:        "delete_webhook",
			Title:       "Delete a webhook",
			Effect:      tool.Destroys,
			Description: "Delete one of your webhooks; its URL answers 404 from now on.",
			Input:       tool.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:      tool.Out(props{"webhook_id": tool.String(""), "deleted": tool.Boolean("")}, "webhook_id", "deleted"),
			Webhook:     true,
			Run:         verb(s.DeleteWebhook),
		},
		{
			Name:   "add_webhook_route",
			Title:  "Route a webhook to an endpoint",
			Effect: tool.Settles,
			Description: "Also deliver a webhook's deliveries to another endpoint (one todo per target): one of your " +
				"human's, or of a human who approved your deliveries. Idempotent.",
			Input: tool.Object(props{"webhook_id": webhookID(), "target_endpoint_id": tool.String("endpoint id")},
				"webhook_id", "target_endpoint_id"),
			Output: tool.Out(props{"webhook_id": tool.String(""), "target_endpoint_id": tool.String(""), "routed": tool.Boolean("")}),
			Run:    verb(s.AddRoute),
		},
		{
			Name:        "list_webhook_routes",
			Title:       "List a webhook's routes",
			Effect:      tool.ReadOnly,
			Description: "The owning endpoint and every route of a webhook.",
			Input:       tool.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output: tool.Out(props{
				"webhook_id":        tool.String(""),
				"owner_endpoint_id": tool.String("always a target"),
				"routes": tool.ArrayOf(tool.Out(props{"target_endpoint_id": tool.String(""), "granted_at": tool.String("")}),
					"in grant order"),
			}, "webhook_id", "owner_endpoint_id", "routes"),
			Run: verb(s.ListRoutes),
		},
		{
			Name:        "remove_webhook_route",
			Title:       "Remove a webhook route",
			Effect:      tool.DestroysSettling,
			Description: "Stop delivering a webhook to an endpoint. Idempotent; the owner cannot be removed.",
			Input: tool.Object(props{"webhook_id": webhookID(), "target_endpoint_id": tool.String("endpoint id")},
				"webhook_id", "target_endpoint_id"),
			Output: tool.Out(props{"webhook_id": tool.String(""), "target_endpoint_id": tool.String(""), "removed": tool.Boolean("")}),
			Run:    verb(s.RemoveRoute),
		},
		{
			Name:        "list_webhook_rules",
			Title:       "List a webhook's rules",
			Effect:      tool.ReadOnly,
			Description: "A webhook's routing rules, default action, params and grant.",
			Input:       tool.Object(props{"webhook_id": webhookID()}, "webhook_id"),
			Output:      ruleSetOut(),
			Run:         verb(s.ListRules),
		},
		{
			Name:   "set_webhook_rules",
			Title:  "Replace a webhook's rules",
			Effect: tool.DestroysSettling,
			Description: "Replace a webhook's rule list (at most 32; first match wins). The whole list is checked; " +
				"a refused save keeps the previous list.",
			Input: tool.Object(props{
				"webhook_id":     webhookID(),
				"rules":          tool.ArrayOf(ruleSchema(), "ordered"),
				"default_action": actionSchema(),
				"params":         tool.AnyJSON("a JSON object of at most 16 KiB, bound as $params; omit to keep the stored one"),
			}, "webhook_id", "rules"),
			Output: ruleSetOut(),
			Run:    verb(s.SetRules),
		},
		{
			Name:        "add_webhook_rule",
			Title:       "Add a webhook rule",
			Effect:      tool.Changes,
			Description: "Insert one rule at a 0-based position (default: append).",
			Input: tool.Object(props{
				"webhook_id": webhookID(),
				"id":         tool.String("rule id; minted when omitted"),
				"name":       tool.String("optional label"),
				"expr":       tool.String("jq expression"),
				"action":     actionSchema(),
				"position":   tool.Integer("0-based; clamped; default append"),
			}, "webhook_id", "expr", "action"),
			Output: ruleSetOut(),
			Run:    verb(s.AddRule),
		},
		{
			Name:        "update_webhook_rule",
			Title:       "Update a webhook rule",
			Effect:      tool.DestroysSettling,
			Description: "Change the name, expression or action of one rule.",
			Input: tool.Object(props{
				"webhook_id": webhookID(),
				"rule_id":    tool.String("rule id"),
				"name":       tool.String("new label"),
				"expr":       tool.String("new jq expression"),
				"action":     actionSchema(),
			}, "webhook_id", "rule_id"),
			Output: ruleSetOut(),
			Run:    verb(s.UpdateRule),
		},
		{
			Name:        "move_webhook_rule",
			Title:       "Move a webhook rule",
			Effect:      tool.Settles,
			Description: "Move one rule to a 0-based position (clamped).",
			Input: tool.Object(props{"webhook_id": webhookID(), "rule_id": tool.String("rule id"), "position": tool.Integer("0-based")},
				"webhook_id", "rule_id", "position"),
			Output: ruleSetOut(),
			Run:    verb(s.MoveRule),
		},
		{
			Name:        "remove_webhook_rule",
			Title:       "Remove a webhook rule",
			Effect:      tool.DestroysSettling,
			Description: "Remove one rule; removing an absent rule succeeds.",
			Input:       tool.Object(props{"webhook_id": webhookID(), "rule_id": tool.String("rule id")}, "webhook_id", "rule_id"),
			Output:      ruleSetOut(),
			Run:         verb(s.RemoveRule),
		},
		{
			Name:   "test_webhook_rules",
			Title:  "Test webhook rules",
			Effect: tool.ReadOnly,
			Description: "Dry run: evaluate a sample payload or a stored event of the webhook against the saved rules " +
				"or candidate ones. Persists nothing, rings nothing.",
			Input: tool.Object(props{
				"webhook_id":     webhookID(),
				"payload":        tool.AnyJSON("sample payload (exactly one of payload and event_id)"),
				"event_id":       tool.Integer("a stored event of this webhook"),
				"headers":        &jsonschema.Schema{Type: "object", AdditionalProperties: tool.String("")},
				"rules":          tool.ArrayOf(ruleSchema(), "candidate rules (default: the saved ones)"),
				"default_action": actionSchema(),
				"params":         tool.AnyJSON("candidate params (a JSON object)"),
			}, "webhook_id"),
			Output: tool.Out(props{
				"decision": tool.Out(props{
					"drop":        tool.Boolean(""),
					"queue":       tool.String(""),
					"endpoints":   tool.ArrayOf(tool.String(""), ""),
					"disposition": tool.String(""),
					"faulted":     tool.Boolean(""),
				}),
				"trace":    tool.JSONObject("which rule decided, or the default, or the fault"),
				"envelope": tool.JSONObject("the jq input document"),
			}, "decision", "trace", "envelope"),
			Run: verb(s.TestRules),
		},
		{
			Name:        "list_webhook_events",
			Title:       "List webhook events",
			Effect:      tool.ReadOnly,
			Description: "Deliveries to your human's webhooks, newest first (limit default 50, max 200; before_id pages).",
			Input: tool.Object(props{
				"webhook_id": webhookID(),
				"limit":      tool.Integer("default 50, max 200"),
				"before_id":  tool.Integer("only events older than this id"),
			}),
			Output: tool.Out(props{"events": tool.ArrayOf(tool.Out(props{"id": tool.Integer("")}), "newest first")}, "events"),
			Run:    verb(s.ListEvents),
		},
		{
			Name:        "get_webhook_event",
			Title:       "Get a webhook event",
			Effect:      tool.ReadOnly,
			Description: "One delivery with its sanitized headers, payload and routing trace.",
			Input:       tool.Object(props{"id": tool.Integer("event id")}, "id"),
			Output: tool.Out(props{
				"id":      tool.Integer("event id"),
				"headers": tool.JSONObject("sanitized request headers (signatures and tokens redacted)"),
				"payload": tool.AnyJSON("the delivery's body as JSON (null when it was not JSON)"),
				"routing": tool.Nullable("object", "the rule trace"),
			}),
			Run: verb(s.GetEvent),
		},
	}
}
