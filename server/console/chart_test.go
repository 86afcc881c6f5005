package console

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"switchboard/server/store"
)

// The chart is well-formed SVG with an accessible name and a description of what it shows, and
// escapes what it prints.
func TestChartSVG(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var b []store.ChartBucket
	for i := range 60 {
		b = append(b, store.ChartBucket{At: at.Add(time.Duration(i) * time.Minute), Done: int64(i % 7), Failed: int64(i % 2), Dead: int64(i % 3 / 2)})
	}
	svg := string(chartSVG("m", "Todos <per> minute", b, minuteLabel))
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, svg)
	}
	for _, want := range []string{`role="img"`, `aria-labelledby="m-t m-d"`, `<title id="m-t">Todos &lt;per&gt; minute</title>`,
		`<desc id="m-d">`, "done", ">10:00<", ">10:45<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("missing %q in %s", want, svg)
		}
	}
	if strings.Contains(svg, "style=") {
		t.Error("a style attribute: the CSP refuses it")
	}
	// Empty: axes only, no division by zero.
	empty := string(chartSVG("h", "none", make([]store.ChartBucket, 24), hourLabel))
	if !strings.Contains(empty, "0 done, 0 failed, 0 dead-lettered in 24 buckets.") {
		t.Errorf("empty chart: %s", empty)
	}
}
