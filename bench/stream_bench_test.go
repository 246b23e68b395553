package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
)

// fastModel streams a reply of parts tokens, one every pace (a fast
// model: 2ms is 500 tokens/s), and notes when its first part left.
type fastModel struct {
	parts int
	pace  time.Duration
	first chan time.Time
}

func (m *fastModel) Next(ctx context.Context, in engine.TurnInput) (engine.Action, error) {
	return m.Stream(ctx, in, func(string) {})
}

func (m *fastModel) Stream(_ context.Context, _ engine.TurnInput, part func(string)) (engine.Action, error) {
	var reply strings.Builder
	for i := range m.parts {
		tok := fmt.Sprintf("tok%d ", i)
		if i == 0 {
			m.first <- time.Now()
		} else {
			time.Sleep(m.pace)
		}
		part(tok)
		reply.WriteString(tok)
	}
	return engine.Action{Reply: reply.String()}, nil
}

func (*fastModel) Tool(string) (engine.Tool, bool) { return engine.Tool{}, false }

// BenchmarkStreamCoalescing measures one streamed reply of 200 parts, one
// every 2ms, as a client receives it, with the default flush interval
// (50ms) and with none: delta frames and bytes per reply, and the time
// from the engine's first part to the client's first delta.
func BenchmarkStreamCoalescing(b *testing.B) {
	for _, tc := range []struct {
		name  string
		flush time.Duration
	}{{"flush=50ms", 50 * time.Millisecond}, {"flush=off", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			m := &fastModel{parts: 200, pace: 2 * time.Millisecond, first: make(chan time.Time, 1)}
			n := startNode(b, actor.Config{Engine: m, FlushInterval: tc.flush})
			ws, _, err := hello(n.URL, tokenFor(b, "bench"), "", 0)
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Close()
			var frames, bytes int
			var firstLat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				if err := ws.WriteJSON(map[string]any{"type": "send", "id": fmt.Sprintf("s%d", i), "content": "go"}); err != nil {
					b.Fatal(err)
				}
				f, by, lat, err := readReply(ws, m.first)
				if err != nil {
					b.Fatal(err)
				}
				frames, bytes = frames+f, bytes+by
				firstLat = append(firstLat, lat)
			}
			b.StopTimer()
			slices.Sort(firstLat)
			b.ReportMetric(float64(frames)/float64(b.N), "deltas/reply")
			b.ReportMetric(float64(bytes)/float64(b.N), "delta-bytes/reply")
			b.ReportMetric(float64(firstLat[len(firstLat)/2].Microseconds()), "first-part-µs")
		})
	}
}

// readReply reads one turn's frames until the agent's message, counting
// the delta frames and their bytes, and the delay from the engine's first
// part to the first delta.
func readReply(ws *websocket.Conn, first <-chan time.Time) (frames, bytes int, lat time.Duration, err error) {
	var sent time.Time
	for {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return 0, 0, 0, err
		}
		var f struct{ Type, Role string }
		if err := json.Unmarshal(data, &f); err != nil {
			return 0, 0, 0, err
		}
		switch {
		case f.Type == "delta":
			if frames == 0 {
				sent = <-first
				lat = time.Since(sent)
			}
			frames++
			bytes += len(data)
		case f.Type == "message" && f.Role == "agent":
			if frames == 0 {
				<-first
			}
			return frames, bytes, lat, nil
		}
	}
}
