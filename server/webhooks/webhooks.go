package webhooks

import (
	"context"
)

type CreateWebhookIn struct {
	SourceType  string `json:"source_type" jsonschema:"one of github, gitea, stripe, slack, cairn, standard, generic (within your ceiling)"`
	TargetQueue string `json:"target_queue" jsonschema:"queue deliveries land in (within your ceiling)"`
}

type WebhookIDIn struct {
	WebhookID string `json:"webhook_id" jsonschema:"the webhook id"`
}

// Webhook is a webhook as agents see it. SigningSecret appears only in create and rotate results.
type Webhook struct {
	WebhookID     string `json:"webhook_id"`
	IngestURL     string `json:"ingest_url"`
	SourceType    string `json:"source_type"`
	TargetQueue   string `json:"target_queue"`
	TrustMode     string `json:"trust_mode"`
	SigningSecret string `json:"signing_secret,omitempty"`
	CreatedAt     string `json:"created_at,omitempty"`
	RotatedAt     string `json:"rotated_at,omitempty"`
}

// stored is switchboard.webhook_json plus the secret of create/rotate.
type stored struct {
	Webhook
	IngestToken string `json:"ingest_token"`
}

func (s *Service) reveal(w stored) Webhook {
	out := w.Webhook
	out.IngestURL = s.baseURL + "/webhooks/w/" + w.IngestToken
	return out
}

// CreateWebhook mints an ingest token (32 random bytes) and a signing secret (whsec_ + 32 random
// bytes); SQL checks the ceiling, derives the trust mode and keeps the secret only for signed types.
func (s *Service) CreateWebhook(ctx context.Context, endpoint string, in CreateWebhookIn) (Webhook, error) {
	var w stored
	err := s.call(ctx, &w, `SELECT switchboard.webhook_create($1, $2, $3, $4, $5)`,
		endpoint, in.SourceType, in.TargetQueue, randomHex(32), "whsec_"+randomHex(32))
	return s.reveal(w), err
}

func (s *Service) RotateWebhook(ctx context.Context, endpoint string, in WebhookIDIn) (Webhook, error) {
	var w stored
	err := s.call(ctx, &w, `SELECT switchboard.webhook_rotate($1, $2, $3, $4)`,
		endpoint, in.WebhookID, randomHex(32), "whsec_"+randomHex(32))
	return s.reveal(w), err
}

type DeleteWebhookOut struct {
	WebhookID string `json:"webhook_id"`
	Deleted   bool   `json:"deleted"`
}

func (s *Service) DeleteWebhook(ctx context.Context, endpoint string, in WebhookIDIn) (DeleteWebhookOut, error) {
	var out DeleteWebhookOut
	err := s.call(ctx, &out, `SELECT switchboard.webhook_delete($1, $2)`, endpoint, in.WebhookID)
	return out, err
}

type ListWebhooksIn struct{}

type Ceiling struct {
	Max                int      `json:"max"`
	AllowedSourceTypes []string `json:"allowed_source_types"`
	AllowedQueues      []string `json:"allowed_queues"`
	Used               int      `json:"used"`
}

type ListWebhooksOut struct {
	Webhooks []Webhook `json:"webhooks"`
	Ceiling  Ceiling   `json:"ceiling"`
}

func (s *Service) ListWebhooks(ctx context.Context, endpoint string, _ ListWebhooksIn) (ListWebhooksOut, error) {
	var raw struct {
		Webhooks []stored `json:"webhooks"`
		Ceiling  Ceiling  `json:"ceiling"`
	}
	if err := s.call(ctx, &raw, `SELECT switchboard.webhook_list($1)`, endpoint); err != nil {
		return ListWebhooksOut{}, err
	}
	out := ListWebhooksOut{Webhooks: make([]Webhook, 0, len(raw.Webhooks)), Ceiling: raw.Ceiling}
	for _, w := range raw.Webhooks {
		out.Webhooks = append(out.Webhooks, s.reveal(w))
	}
	return out, nil
}
