package bench

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
)

// WriteHTML writes r as one self-contained HTML page: the charts are
// inline SVG drawn here, with no script and nothing fetched.
func WriteHTML(w io.Writer, r *Report) error {
	n := len(r.Timeline)
	col := func(f func(TimePoint) float64) []float64 {
		out := make([]float64, n)
		for i, p := range r.Timeline {
			out[i] = f(p)
		}
		return out
	}
	cnt := func(name string) []float64 {
		return col(func(p TimePoint) float64 { return float64(p.Counts[name]) })
	}
	charts := []template.HTML{
		svgChart("Latency per second (ms, log scale)", n, []series{
			{"send→ack p50", "#4e79a7", col(func(p TimePoint) float64 { return p.AckP50Ms })},
			{"send→ack p99", "#f28e2b", col(func(p TimePoint) float64 { return p.AckP99Ms })},
			{"send→reply p99", "#59a14f", col(func(p TimePoint) float64 { return p.ReplyP99Ms })},
		}, r.Markers, true),
		svgChart("Throughput (per second)", n, []series{
			{"sends", "#4e79a7", cnt(CSends)}, {"acks", "#f28e2b", cnt(CAcks)}, {"replies", "#59a14f", cnt(CReplies)},
		}, r.Markers, false),
		svgChart("Reconnects (per second)", n, []series{
			{"disconnects", "#e15759", cnt(CDisconnects)}, {"resumes", "#4e79a7", cnt(CResumes)},
			{"expired", "#b07aa1", cnt(CExpired)},
		}, r.Markers, false),
	}
	if r.Target.Mode == "local" {
		charts = append(charts,
			svgChart("Nodes' memory (RSS, MiB, all nodes)", n, []series{
				{"RSS", "#76b7b2", col(func(p TimePoint) float64 { return float64(p.NodeRSS) / (1 << 20) })},
			}, r.Markers, false),
			svgChart("Nodes' CPU (% of one core, all nodes)", n, []series{
				{"CPU", "#edc948", col(func(p TimePoint) float64 { return p.NodeCPUPct })},
			}, r.Markers, false))
	}
	var lat [][]string
	for _, name := range latencyOrder {
		if d := r.Latency[name]; d.Count > 0 {
			lat = append(lat, []string{latencyLabel[name], fmt.Sprint(d.Count), f2(d.P50), f2(d.P90), f2(d.P99), f2(d.P999), f2(d.Max)})
		}
	}
	data := map[string]any{
		"R": r, "Rows": r.SummaryRows(), "Charts": charts, "Latency": lat,
		"Violations": r.Violations.List[:min(len(r.Violations.List), 200)],
	}
	return page.Execute(w, data)
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"deref": func(p *float64) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f", *p)
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>tether bench — {{if .R.Passed}}passed{{else}}FAILED{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.verdict{font-weight:600;padding:6px 10px;border-radius:4px;display:inline-block}
.pass{background:#e3f4e1;color:#1b5e20} .fail{background:#fde2e1;color:#b71c1c}
table{border-collapse:collapse;margin:4px 0} td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;margin:8px 0;background:#fff;border:1px solid #ddd}
.small{color:#666;font-size:12px}
</style></head><body>
<h1>tether bench</h1>
<p><span class="verdict {{if .R.Passed}}pass{{else}}fail{{end}}">{{index (index .Rows 0) 1}}</span></p>
<p class="small">started {{.R.StartedAt.Format "2006-01-02 15:04:05 UTC"}} · load {{f1 .R.LoadS}} s · whole run {{f1 .R.ElapsedS}} s · schema {{.R.Schema}} · seed {{.R.Seed}}</p>
{{range .Charts}}{{.}}{{end}}
<h2>Summary</h2>
<table>{{range $i, $row := .Rows}}{{if $i}}<tr><th>{{index $row 0}}</th><td>{{index $row 1}}</td></tr>{{end}}{{end}}</table>
<h2>Latency (ms)</h2>
<table><tr><th></th><th class="n">count</th><th class="n">p50</th><th class="n">p90</th><th class="n">p99</th><th class="n">p99.9</th><th class="n">max</th></tr>
{{range .Latency}}<tr><td>{{index . 0}}</td><td class="n">{{index . 1}}</td><td class="n">{{index . 2}}</td><td class="n">{{index . 3}}</td><td class="n">{{index . 4}}</td><td class="n">{{index . 5}}</td><td class="n">{{index . 6}}</td></tr>
{{end}}</table>
{{if .R.Kills}}<h2>Node failures</h2>
<table><tr><th>at (s)</th><th>node</th><th>signal</th><th class="n">restarted at (s)</th><th class="n">kill → first resume (ms)</th></tr>
{{range .R.Kills}}<tr><td>{{f1 .AtS}}</td><td>{{.Node}}</td><td>{{.Signal}}</td><td class="n">{{deref .RestartedAtS}}</td><td class="n">{{deref .FirstResumeMs}}</td></tr>
{{end}}</table>{{end}}
<h2>Violations</h2>
{{if .Violations}}<table><tr><th>kind</th><th>session</th><th>seqs</th><th>detail</th></tr>
{{range .Violations}}<tr><td>{{.Kind}}</td><td>{{.Session}}</td><td>{{.Seqs}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
</body></html>
`))

type series struct {
	name, color string
	pts         []float64 // one value per second
}

// Chart geometry.
const (
	chartW, chartH                      = 960, 250
	padL, padR, padT, padB              = 64, 16, 34, 36
	plotW, plotH                        = chartW - padL - padR, chartH - padT - padB
	markKill, markTerm, markUp, markCut = "#d62728", "#ff7f0e", "#2ca02c", "#9467bd"
)

// svgChart draws series over the run's seconds as an inline SVG, with
// the node events as vertical lines.
func svgChart(title string, n int, ss []series, marks []MarkerReport, logY bool) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui,sans-serif" font-size="11">`,
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="600">%s</text>`, padL, html.EscapeString(title))
	xmax := float64(max(n, 1))
	x := func(t float64) float64 { return padL + t/xmax*plotW }
	lo, hi := yRange(ss, logY)
	y := func(v float64) float64 {
		if logY {
			v = math.Log10(max(v, lo))
			return padT + plotH - (v-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
		}
		return padT + plotH - (v-lo)/(hi-lo)*plotH
	}
	// Axes, grid and ticks.
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`, padL, padT, plotW, plotH)
	for _, t := range yTicks(lo, hi, logY) {
		yy := y(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`,
			padL, padL+plotW, yy, yy, padL-6, yy+4, tickLabel(t))
	}
	step := niceStep(xmax / 10)
	for t := 0.0; t <= xmax+1e-9; t += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`, x(t), padT+plotH+14, tickLabel(t))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">seconds</text>`, padL+plotW/2, chartH-4)
	// Node events.
	for _, m := range marks {
		color, dash := markKill, "5,3"
		switch m.Kind {
		case "term":
			color = markTerm
		case "partition":
			color = markCut
		case "restart":
			color, dash = markUp, "2,3"
		}
		xx := x(m.AtS)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="%s"><title>%s at %.1fs</title></line>`,
			xx, xx, padT, padT+plotH, color, dash, html.EscapeString(m.Label), m.AtS)
		if m.Kind != "restart" {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s" font-size="10">%s</text>`, xx+2, padT+10, color, html.EscapeString(m.Label))
		}
	}
	// Series: each point is drawn at the middle of its second.
	for _, s := range ss {
		var d strings.Builder
		pen := false
		for i, v := range s.pts {
			if math.IsNaN(v) || (logY && v <= 0) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f,%.1f ", cmd, x(float64(i)+0.5), y(v))
			pen = true
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, d.String(), s.color)
		}
	}
	// Legend, top right.
	lx := chartW - padR
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		w := 7*len(s.name) + 22
		lx -= w
		fmt.Fprintf(&b, `<rect x="%d" y="10" width="10" height="10" fill="%s"/><text x="%d" y="19">%s</text>`,
			lx, s.color, lx+14, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from escaped parts only
}

// yRange is the y axis's range: 0..a round maximum, or powers of ten
// around the positive values on a log axis.
func yRange(ss []series, logY bool) (float64, float64) {
	lo, hi := math.Inf(1), 0.0
	for _, s := range ss {
		for _, v := range s.pts {
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi == 0 {
		if logY {
			return 0.1, 10
		}
		return 0, 1
	}
	if logY {
		l, h := math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		if h <= l {
			h = l * 10
		}
		return l, h
	}
	return 0, niceCeil(hi * 1.05)
}

func yTicks(lo, hi float64, logY bool) []float64 {
	var out []float64
	if logY {
		for t := lo; t <= hi*1.0001; t *= 10 {
			out = append(out, t)
		}
		return out
	}
	step := niceStep((hi - lo) / 5)
	for t := lo; t <= hi+1e-9; t += step {
		out = append(out, t)
	}
	return out
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	return niceCeil(v)
}

func tickLabel(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case v >= 0.01:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
	return fmt.Sprintf("%g", v)
}
