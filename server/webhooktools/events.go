package webhooktools

import (
	"context"
	"encoding/json"
	"math"
)

type ListEventsIn struct {
	WebhookID *string `json:"webhook_id,omitempty" jsonschema:"only this webhook's events"`
	Limit     *int    `json:"limit,omitempty" jsonschema:"default 50, max 200"`
	BeforeID  *int64  `json:"before_id,omitempty" jsonschema:"page: events older than this id"`
}

type Event struct {
	ID           int64           `json:"id"`
	WebhookID    string          `json:"webhook_id"`
	Source       string          `json:"source"`
	EventType    *string         `json:"event_type"`
	TrustMode    string          `json:"trust_mode"`
	Verified     bool            `json:"verified"`
	Disposition  string          `json:"disposition"`
	PayloadSize  int             `json:"payload_size"`
	ReceivedAt   string          `json:"received_at"`
	VerifyDetail string          `json:"verify_detail,omitempty"`
	ContentType  *string         `json:"content_type,omitempty"`
	Headers      json.RawMessage `json:"headers,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	Routing      json.RawMessage `json:"routing,omitempty"`
}

type ListEventsOut struct {
	Events []Event `json:"events"`
}

type GetEventIn struct {
	ID int64 `json:"id" jsonschema:"event id"`
}

func (s *Service) ListEvents(ctx context.Context, endpoint string, in ListEventsIn) (ListEventsOut, error) {
	var out ListEventsOut
	if in.Limit != nil { // the SQL takes an int and clamps it to 1..200; keep it inside an int
		l := min(max(*in.Limit, math.MinInt32), math.MaxInt32)
		in.Limit = &l
	}
	raw, err := s.st.EventsList(ctx, endpoint, in.WebhookID, in.Limit, in.BeforeID)
	err = decode(raw, err, &out)
	return out, err
}

func (s *Service) GetEvent(ctx context.Context, endpoint string, in GetEventIn) (Event, error) {
	var out Event
	raw, err := s.st.EventGet(ctx, endpoint, in.ID, nil)
	err = decode(raw, err, &out)
	return out, err
}
