package webhooktools

import (
	"context"
)

type CreateWebhookIn struct {
	SourceType  string `json:"source_type"`
	TargetQueue string `json:"target_queue"`
}

type WebhookIDIn struct {
	WebhookID string `json:"webhook_id"`
}

// Webhook is a webhook as agents see it. SigningSecret appears only in create and rotate results,
// as do SecretIssuer and NextStep (who issues the secret of this source type, and what to do).
type Webhook struct {
	WebhookID           string    `json:"webhook_id"`
	IngestURL           string    `json:"ingest_url"`
	SourceType          string    `json:"source_type"`
	TargetQueue         string    `json:"target_queue"`
	TrustMode           string    `json:"trust_mode"`
	SigningSecret       string    `json:"signing_secret,omitempty"`
	SecretIssuer        string    `json:"secret_issuer,omitempty"`
	NextStep            string    `json:"next_step,omitempty"`
	SecretSource        string    `json:"secret_source,omitempty"`
	SecretSetAt         string    `json:"secret_set_at,omitempty"`
	PreviousSecretUntil string    `json:"previous_secret_until,omitempty"`
	CreatedAt           string    `json:"created_at,omitempty"`
	RotatedAt           string    `json:"rotated_at,omitempty"`
	Refusals            *Refusals `json:"refusals,omitempty"`
}

// Refusals counts a webhook's refused deliveries (never their bodies or signatures).
type Refusals struct {
	Total          int64        `json:"total"`
	BadSignature   int64        `json:"bad_signature"`
	StaleTimestamp int64        `json:"stale_timestamp"`
	TooLarge       int64        `json:"too_large"`
	Unparseable    int64        `json:"unparseable"`
	Last           *LastRefusal `json:"last,omitempty"`
}

// LastRefusal is the newest refused delivery: when, why, and the provider's delivery id when
// its headers named one.
type LastRefusal struct {
	At         string `json:"at"`
	Reason     string `json:"reason"`
	DeliveryID string `json:"delivery_id,omitempty"`
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
	raw, err := s.st.WebhookCreate(ctx, endpoint, in.SourceType, in.TargetQueue, randomHex(32), "whsec_"+randomHex(32))
	err = decode(raw, err, &w)
	return s.reveal(w), err
}

func (s *Service) RotateWebhook(ctx context.Context, endpoint string, in WebhookIDIn) (Webhook, error) {
	var w stored
	raw, err := s.st.WebhookRotate(ctx, endpoint, in.WebhookID, randomHex(32), "whsec_"+randomHex(32))
	err = decode(raw, err, &w)
	return s.reveal(w), err
}

type DeleteWebhookOut struct {
	WebhookID string `json:"webhook_id"`
	Deleted   bool   `json:"deleted"`
}

func (s *Service) DeleteWebhook(ctx context.Context, endpoint string, in WebhookIDIn) (DeleteWebhookOut, error) {
	var out DeleteWebhookOut
	raw, err := s.st.WebhookDelete(ctx, endpoint, in.WebhookID)
	err = decode(raw, err, &out)
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
	doc, err := s.st.WebhookList(ctx, endpoint)
	if err := decode(doc, err, &raw); err != nil {
		return ListWebhooksOut{}, err
	}
	out := ListWebhooksOut{Webhooks: make([]Webhook, 0, len(raw.Webhooks)), Ceiling: raw.Ceiling}
	for _, w := range raw.Webhooks {
		out.Webhooks = append(out.Webhooks, s.reveal(w))
	}
	return out, nil
}
