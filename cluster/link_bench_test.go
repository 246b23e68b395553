package cluster

import (
	"context"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func benchPair(b *testing.B, maxBatch int) (client, server *linkNode) {
	server = startLink(b, "", LinkConfig{NodeID: "b", Secret: "s", Serve: echoServe, StreamBuffer: 8192,
		Accept: countingAccept, maxBatch: maxBatch})
	client = startLink(b, "", LinkConfig{NodeID: "a", Secret: "s", maxBatch: maxBatch})
	if err := client.Call(context.Background(), server.addr, "echo", 1, nil); err != nil {
		b.Fatal(err)
	}
	return client, server
}

// countingAccept acknowledges every ackEvery values with the count so far,
// the flow control an application adds on top of a Stream.
func countingAccept(from string, method Op, body msgpack.RawMessage, s *Stream) {
	ctx := context.Background()
	n := 0
	for {
		if _, err := s.Recv(ctx); err != nil {
			return
		}
		if n++; n%ackEvery == 0 {
			if s.Send(ctx, n) != nil {
				return
			}
		}
	}
}

const ackEvery = 512

func BenchmarkLinkCall(b *testing.B) {
	for _, mode := range []struct {
		name  string
		batch int
	}{{"batched", 0}, {"frame-per-message", 1}} {
		b.Run(mode.name+"/serial", func(b *testing.B) {
			a, s := benchPair(b, mode.batch)
			ctx := context.Background()
			var out int
			b.ReportAllocs()
			for b.Loop() {
				if err := a.Call(ctx, s.addr, "echo", 42, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/parallel", func(b *testing.B) {
			a, s := benchPair(b, mode.batch)
			ctx := context.Background()
			b.SetParallelism(32) // many callers share one connection
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out int
				for pb.Next() {
					if err := a.Call(ctx, s.addr, "echo", 42, &out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLinkStream measures one-way throughput of 128-byte values,
// with at most 8 acknowledgement windows in flight.
func BenchmarkLinkStream(b *testing.B) {
	for _, mode := range []struct {
		name  string
		batch int
	}{{"batched", 0}, {"frame-per-message", 1}} {
		b.Run(mode.name, func(b *testing.B) {
			a, s := benchPair(b, mode.batch)
			ctx := context.Background()
			st, err := a.Open(ctx, s.addr, "count", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			value := make([]byte, 128)
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			acked := 0
			for i := 1; b.Loop(); i++ {
				if err := st.Send(ctx, value); err != nil {
					b.Fatal(err)
				}
				for i-acked >= 8*ackEvery {
					v, err := st.Recv(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := msgpack.Unmarshal(v, &acked); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
