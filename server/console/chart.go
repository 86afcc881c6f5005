package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"switchboard/server/store"
)

// The home chart: todos done, failed and dead-lettered per bucket, as stacked bars drawn on the
// server (no script, no style attribute: the CSP allows neither; colours are SVG presentation
// attributes). The SVG is an image with a title and a description that says the totals and the
// busiest bucket, so a screen reader gets what the bars show; the numbers are also in a table
// below it on the page.

// series are the stacked parts of a bar, bottom first, with their colours (legend in the page).
var series = []struct {
	Name, Fill string
	Of         func(store.ChartBucket) int64
}{
	{"done", "#2e7d32", func(b store.ChartBucket) int64 { return b.Done }},
	{"failed", "#b26a00", func(b store.ChartBucket) int64 { return b.Failed }},
	{"dead-lettered", "#b3261e", func(b store.ChartBucket) int64 { return b.Dead }},
}

const (
	chartW, chartH = 600, 150
	padL, padB     = 36, 20
	padT           = 8
)

// chartSVG draws buckets (oldest first). id makes the title and description ids unique on the
// page; label names bucket i for the x axis ("" for none).
func chartSVG(id, title string, buckets []store.ChartBucket, label func(i int, at time.Time) string) template.HTML {
	var top int64 = 1
	var total [3]int64
	busiest := -1
	var busiestN int64
	for i, b := range buckets {
		var n int64
		for k, s := range series {
			v := s.Of(b)
			n += v
			total[k] += v
		}
		top = max(top, n)
		if n > busiestN {
			busiest, busiestN = i, n
		}
	}
	desc := fmt.Sprintf("%d done, %d failed, %d dead-lettered in %d buckets", total[0], total[1], total[2], len(buckets))
	if busiest >= 0 {
		desc += fmt.Sprintf("; the busiest, %s, had %d", buckets[busiest].At.UTC().Format("2006-01-02 15:04 UTC"), busiestN)
	}
	desc += "."

	var sb strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d">`,
		chartW, chartH, esc(id), esc(id))
	fmt.Fprintf(&sb, `<title id="%s-t">%s</title><desc id="%s-d">%s</desc>`, esc(id), esc(title), esc(id), esc(desc))
	plotH := float64(chartH - padB - padT)
	baseY := float64(chartH - padB)
	// Axes and the top value.
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%.0f" stroke="#555" stroke-width="1"/>`, padL, padT, padL, baseY)
	fmt.Fprintf(&sb, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#555" stroke-width="1"/>`, padL, baseY, chartW, baseY)
	fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#222">%d</text>`, padL-4, padT+8, top)
	fmt.Fprintf(&sb, `<text x="%d" y="%.0f" font-size="10" text-anchor="end" fill="#222">0</text>`, padL-4, baseY)
	if n := len(buckets); n > 0 {
		w := float64(chartW-padL) / float64(n)
		for i, b := range buckets {
			x := float64(padL) + float64(i)*w
			y := baseY
			for _, s := range series {
				v := s.Of(b)
				if v == 0 {
					continue
				}
				h := plotH * float64(v) / float64(top)
				y -= h
				fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`,
					x+0.5, y, max(w-1, 0.5), h, s.Fill)
			}
			if l := label(i, b.At); l != "" {
				fmt.Fprintf(&sb, `<text x="%.1f" y="%d" font-size="10" fill="#222">%s</text>`, x, chartH-6, esc(l))
			}
		}
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) // every text in it was escaped above
}

// minuteLabel marks every 15th minute (UTC), hourLabel every 6th hour.
func minuteLabel(i int, at time.Time) string {
	if i%15 != 0 {
		return ""
	}
	return at.UTC().Format("15:04")
}

func hourLabel(i int, at time.Time) string {
	if i%6 != 0 {
		return ""
	}
	return at.UTC().Format("15:00")
}
