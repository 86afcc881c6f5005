package console

import (
	"io"
	"testing"

	"switchboard/server/store"
)

// Every queue and webhook screen renders with empty data (a template naming a field that is not
// there fails only when executed).
func TestQueueScreensRender(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	h := &store.ConsoleHuman{Name: "a"}
	for name, d := range map[string]any{"todo": TodoData{}, "queues": QueuesData{}, "bulk": BulkData{}, "webhooks": WebhooksData{Hooks: []hookView{{}}}, "webhook": WebhookData{}, "delivery": DeliveryData{}} {
		if err := pages[name].ExecuteTemplate(io.Discard, "layout", view{Human: h, Data: d}); err != nil {
			t.Error(name, err)
		}
	}
}
