package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/engine"
)

// historyEngine answers after looking at what an engine is shown: the
// user entry and the entries before it (so a turn builds its whole
// input, unlike the Instant echo).
type historyEngine struct{}

func (historyEngine) Next(_ context.Context, in engine.TurnInput) (engine.Action, error) {
	return engine.Action{Reply: fmt.Sprintf("seen %d earlier entries; you said %q", len(in.History), in.User.Content)}, nil
}

func (historyEngine) Tool(string) (engine.Tool, bool) { return engine.Tool{}, false }

// BenchmarkTurnAtSize measures an agent turn — send to the agent's reply
// held by the client — in a session of 10 and of 5,000 entries: the turn
// reads its input from the session's memory, so the cost must be flat.
// Reports p50 and p99.
func BenchmarkTurnAtSize(b *testing.B) {
	for _, size := range []int{10, 5000} {
		b.Run(fmt.Sprintf("entries=%d", size), func(b *testing.B) {
			n := startNode(b, actor.Config{Engine: historyEngine{}})
			ws, _, err := hello(n.URL, tokenFor(b, "bench"), "", 0)
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Close()
			if _, err := fill(ws, size/2); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if err := ws.WriteJSON(map[string]any{"type": "send", "id": fmt.Sprintf("t%d", i), "content": "how are we doing"}); err != nil {
					b.Fatal(err)
				}
				for {
					_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, data, err := ws.ReadMessage()
					if err != nil {
						b.Fatal(err)
					}
					var f struct{ Type, Role string }
					if json.Unmarshal(data, &f) == nil && f.Type == "message" && f.Role == "agent" {
						break
					}
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
