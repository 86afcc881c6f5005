package store

import (
	"context"
	"encoding/json"
)

// QueueResources: switchboard.queue_resources, the granted queues of an endpoint.
func (s *Store) QueueResources(ctx context.Context, endpoint string) ([]string, error) {
	raw, err := s.jsonCall(ctx, `SELECT switchboard.queue_resources($1)`, endpoint)
	if err != nil {
		return nil, err
	}
	var queues []string
	if err := json.Unmarshal(raw, &queues); err != nil {
		return nil, err
	}
	return queues, nil
}

// QueueResource: switchboard.queue_resource, one queue's counts and oldest claimable todos.
func (s *Store) QueueResource(ctx context.Context, endpoint, queue string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.queue_resource($1, $2)`, endpoint, queue)
}
