// Package report writes a calibration report as one self-contained HTML
// page: the quality figures of every field before and after the fitted
// temperatures and their reliability diagrams as inline SVG. Every string
// that comes from a schema or the examples is escaped.
package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"verdict/engine/scorer"
)

// Page is what the page shows besides the report.
type Page struct {
	Title    string
	Schema   string // the schema file's name
	Examples string // the examples file's name
	Model    string
}

// WriteHTML writes rep as an HTML page.
func WriteHTML(w io.Writer, p Page, rep *scorer.CalibrationReport) error {
	type field struct {
		scorer.FieldQuality
		Diagram template.HTML
	}
	data := struct {
		Page
		Rep    *scorer.CalibrationReport
		Fields []field
	}{Page: p, Rep: rep}
	for _, f := range append([]scorer.FieldQuality{rep.Overall}, rep.Fields...) {
		data.Fields = append(data.Fields, field{f, Diagram(f)})
	}
	return page.Execute(w, data)
}

// Diagram draws a field's reliability diagram: accuracy against confidence
// per bin, before (grey) and after (blue) calibration, each point's area by
// its count, over the diagonal of perfect calibration.
func Diagram(f scorer.FieldQuality) template.HTML {
	const size, pad = 240.0, 32.0
	x := func(v float64) float64 { return pad + v*size }
	y := func(v float64) float64 { return pad + (1-v)*size }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="%g" height="%g" role="img">`, size+2*pad, size+2*pad, size+2*pad, size+2*pad)
	fmt.Fprintf(&b, `<title>reliability diagram: %s</title>`, template.HTMLEscapeString(f.Field))
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="#fafafa" stroke="#999"/>`, pad, pad, size, size)
	for _, t := range []float64{0.25, 0.5, 0.75} {
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#e4e4e4"/>`, x(t), y(0), x(t), y(1))
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#e4e4e4"/>`, x(0), y(t), x(1), y(t))
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#999" stroke-dasharray="4 3"/>`, x(0), y(0), x(1), y(1))
	for _, t := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" text-anchor="middle">%g</text>`, x(t), y(0)+14, t)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" text-anchor="end">%g</text>`, x(0)-4, y(t)+3, t)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11" text-anchor="middle">confidence</text>`, x(0.5), y(0)+27)
	fmt.Fprintf(&b, `<text x="10" y="%g" font-size="11" text-anchor="middle" transform="rotate(-90 10 %g)">accuracy</text>`, y(0.5), y(0.5))
	series := func(m scorer.Metrics, color string) {
		var pts []string
		for _, bin := range m.Bins {
			if bin.Count == 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(bin.Confidence), y(bin.Accuracy)))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.Join(pts, " "), color)
		}
		for _, bin := range m.Bins {
			if bin.Count == 0 {
				continue
			}
			r := 2.5 + 5*float64(bin.Count)/float64(max(f.Decisions, 1))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" fill-opacity="0.75"><title>%d decisions, confidence %.2f, accuracy %.2f</title></circle>`,
				x(bin.Confidence), y(bin.Accuracy), r, color, bin.Count, bin.Confidence, bin.Accuracy)
		}
	}
	series(f.Before, "#888")
	series(f.After, "#1f6feb")
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f3":  func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"pct": func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"temp": func(v float64) string {
		if v == 0 {
			return "per field"
		}
		return fmt.Sprintf("%.3g", v)
	},
	"excerpt": func(s string) string {
		if r := []rune(s); len(r) > 160 {
			return string(r[:160]) + "…"
		}
		return s
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}.field{display:flex;gap:2em;align-items:center;flex-wrap:wrap}
.note{color:#666;font-size:.9em}.key span{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin:0 .3em 0 1em}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="note">Model {{.Model}}, backend {{.Rep.Backend}}. Schema {{.Schema}}, examples {{.Examples}}:
{{.Rep.Calibration.Examples}} examples, {{.Rep.Calibration.Decisions}} labelled decisions.
Fitted global temperature {{temp .Rep.Calibration.Global}}. The "after" figures are in-sample: the temperatures were fitted on these examples.</p>
<p class="key note">Reliability diagrams: accuracy against confidence (the top value's probability) in {{len (index .Fields 0).Before.Bins}} bins, point area by count;
<span style="background:#888"></span>before (temperature 1) <span style="background:#1f6feb"></span>after the fitted temperature; dashed: perfect calibration.</p>
{{range .Fields}}
<h2>{{.Field}}</h2>
<div class="field">
<table>
<tr><th>{{.Decisions}} decisions</th><th>before</th><th>after</th></tr>
<tr><td>temperature</td><td>{{temp .Before.Temperature}}</td><td>{{temp .After.Temperature}}</td></tr>
<tr><td>accuracy</td><td>{{pct .Before.Accuracy}}</td><td>{{pct .After.Accuracy}}</td></tr>
<tr><td>log-loss</td><td>{{f3 .Before.LogLoss}}</td><td>{{f3 .After.LogLoss}}</td></tr>
<tr><td>Brier score</td><td>{{f3 .Before.Brier}}</td><td>{{f3 .After.Brier}}</td></tr>
<tr><td>expected calibration error</td><td>{{f3 .Before.ECE}}</td><td>{{f3 .After.ECE}}</td></tr>
</table>
{{.Diagram}}
</div>
{{end}}
{{if .Rep.Mistakes}}
<h2>Most confident mistakes (after calibration)</h2>
<table>
<tr><th>example</th><th>decision</th><th>answered</th><th>label</th><th>confidence</th><th>text</th></tr>
{{range .Rep.Mistakes}}<tr><td>{{.Example}}</td><td>{{.Decision}}</td><td>{{.Predicted}}</td><td>{{.Label}}</td><td>{{pct .Confidence}}</td><td style="text-align:left">{{excerpt .Text}}</td></tr>
{{end}}</table>
{{end}}
</body></html>
`))
