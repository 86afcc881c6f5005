package webhooktools

import "context"

type RouteIn struct {
	WebhookID        string `json:"webhook_id" jsonschema:"a webhook your human owns"`
	TargetEndpointID string `json:"target_endpoint_id" jsonschema:"endpoint id of your human, or of a human who approved your deliveries"`
}

type AddRouteOut struct {
	WebhookID        string `json:"webhook_id"`
	TargetEndpointID string `json:"target_endpoint_id"`
	Routed           bool   `json:"routed"`
}

type RemoveRouteOut struct {
	WebhookID        string `json:"webhook_id"`
	TargetEndpointID string `json:"target_endpoint_id"`
	Removed          bool   `json:"removed"`
}

type Route struct {
	TargetEndpointID string `json:"target_endpoint_id"`
	GrantedAt        string `json:"granted_at"`
}

type ListRoutesOut struct {
	WebhookID       string  `json:"webhook_id"`
	OwnerEndpointID string  `json:"owner_endpoint_id"`
	Routes          []Route `json:"routes"`
}

func (s *Service) AddRoute(ctx context.Context, endpoint string, in RouteIn) (AddRouteOut, error) {
	var out AddRouteOut
	raw, err := s.st.RouteAdd(ctx, endpoint, in.WebhookID, in.TargetEndpointID)
	err = decode(raw, err, &out)
	return out, err
}

func (s *Service) RemoveRoute(ctx context.Context, endpoint string, in RouteIn) (RemoveRouteOut, error) {
	var out RemoveRouteOut
	raw, err := s.st.RouteRemove(ctx, endpoint, in.WebhookID, in.TargetEndpointID)
	err = decode(raw, err, &out)
	return out, err
}

func (s *Service) ListRoutes(ctx context.Context, endpoint string, in WebhookIDIn) (ListRoutesOut, error) {
	var out ListRoutesOut
	raw, err := s.st.RouteList(ctx, endpoint, in.WebhookID)
	err = decode(raw, err, &out)
	return out, err
}
