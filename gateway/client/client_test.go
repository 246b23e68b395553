package client

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/wire"
)

func TestSendAckMessages(t *testing.T) {
	n := newNode(t, nodeOpts{})
	var sessions []wire.SessionFrame
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0),
		OnSession: func(f wire.SessionFrame) { sessions = append(sessions, f) }})
	if c.SessionID() == "" || len(sessions) != 1 || sessions[0].Resumed || sessions[0].Reason != "new" {
		t.Fatalf("session %q, frames %+v", c.SessionID(), sessions)
	}
	ctx := ctxT(t)
	seq, err := c.Send(ctx, "hello", map[string]any{"lang": "en"})
	if err != nil || seq != 1 {
		t.Fatalf("Send = %d, %v; want 1", seq, err)
	}
	msgs := collect(t, c, 2)
	contiguous(t, msgs, 1)
	if m := msgs[0]; m.Role != "user" || m.Content != "hello" || m.Type != "message" ||
		m.Metadata["lang"] != "en" || !strings.HasPrefix(m.Metadata["id"].(string), "c-") {
		t.Fatalf("user entry %+v", m)
	}
	if m := msgs[1]; m.Role != "agent" || m.Content != "Agent reply: hello" {
		t.Fatalf("agent entry %+v", m)
	}
	if got := c.LastSeq(); got != 2 {
		t.Fatalf("LastSeq = %d, want 2", got)
	}

	// Sending an id again returns the first seq and stores nothing.
	if s1, err := c.SendID(ctx, "fixed", "once", nil); err != nil || s1 != 3 {
		t.Fatalf("SendID = %d, %v", s1, err)
	}
	if s2, err := c.SendID(ctx, "fixed", "once", nil); err != nil || s2 != 3 {
		t.Fatalf("SendID again = %d, %v; want 3", s2, err)
	}
	contiguous(t, collect(t, c, 2), 3)

	merged, err := c.SetContext(ctx, map[string]any{"goal": "laptops"})
	if err != nil || merged["goal"] != "laptops" {
		t.Fatalf("SetContext = %v, %v", merged, err)
	}
	if got, err := c.SetContext(ctx, nil); err != nil || got["goal"] != "laptops" {
		t.Fatalf("SetContext(nil) = %v, %v", got, err)
	}
	h, err := c.History(ctx, 0, 3)
	if err != nil || len(h.Messages) != 3 || h.FirstSeq != 2 || h.LastSeq != 4 {
		t.Fatalf("History = %+v, %v", h, err)
	}

	// A refused send is a *ServerError; the connection stays up.
	_, err = c.Send(ctx, strings.Repeat("x", 40000), nil)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != wire.CodeTooLarge {
		t.Fatalf("oversized Send: %v", err)
	}
	if _, err := c.Send(ctx, "", nil); !errors.As(err, &se) || se.Code != wire.CodeBadRequest {
		t.Fatalf("empty Send: %v", err)
	}
	// What the client can tell is wrong fails before it reaches the server.
	if _, err := c.Send(ctx, strings.Repeat("x", 70000), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Send over the frame limit: %v", err)
	}
	if _, err := c.Send(ctx, "x", map[string]any{"f": func() {}}); err == nil {
		t.Fatal("Send with metadata JSON cannot encode succeeded")
	}
	if s, err := c.Send(ctx, "after", nil); err != nil || s != 5 {
		t.Fatalf("Send after refusals = %d, %v", s, err)
	}
	if st := c.Stats(); st != (Stats{}) {
		t.Fatalf("stats %+v", st)
	}
}

// TestDropMidConversation cuts the socket again and again, also while
// sends are in flight: the stream stays contiguous and every send is
// stored once.
func TestDropMidConversation(t *testing.T) {
	n := newNode(t, nodeOpts{})
	tok := n.token(t, "alice", 0)
	c := dial(t, Config{URLs: []string{n.url()}, Token: tok})
	ctx := ctxT(t)

	const rounds, perRound = 5, 4
	var wg sync.WaitGroup
	errs := make(chan error, rounds*perRound)
	for r := range rounds {
		for i := range perRound {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Send(ctx, fmt.Sprintf("r%d-m%d", r, i), nil); err != nil {
					errs <- err
				}
			}()
		}
		c.Drop()
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
	total := 2 * rounds * perRound // each send and its reply
	msgs := collect(t, c, total)
	contiguous(t, msgs, 1)
	users := map[string]int{}
	for _, m := range msgs {
		if m.Role == "user" {
			users[m.Content]++
		}
	}
	if len(users) != rounds*perRound {
		t.Fatalf("%d distinct user entries, want %d", len(users), rounds*perRound)
	}
	for content, k := range users {
		if k != 1 {
			t.Fatalf("%q stored %d times", content, k)
		}
	}
	st := c.Stats()
	if st.Reconnects < rounds || st.Gaps != 0 || st.Duplicates != 0 {
		t.Fatalf("stats %+v", st)
	}
	snap := n.snapshot(t, c.SessionID(), tok)
	if snap.LastSeq != uint64(total) {
		t.Fatalf("server last_seq %d, want %d", snap.LastSeq, total)
	}
	// And a conversation goes on after the last drop.
	c.Drop()
	if seq, err := c.Send(ctx, "still here", nil); err != nil || seq != uint64(total+1) {
		t.Fatalf("Send after drop = %d, %v", seq, err)
	}
	contiguous(t, collect(t, c, 2), uint64(total+1))
}

// TestUnackedSendResentOnce: the server stores a send and acks it, the
// ack never arrives, the socket dies. After the resume the send goes out
// again under the same id and is stored once. With a replay limit of 1
// the user entry is not in the resume's history_batch, so the client
// must resend it and page the omitted entry in.
func TestUnackedSendResentOnce(t *testing.T) {
	n := newNode(t, nodeOpts{replayLimit: 1})
	p := newProxy(t, n.addr)
	tok := n.token(t, "alice", 0)
	c := dial(t, Config{URLs: []string{p.URL()}, Token: tok})
	ctx := ctxT(t)
	if _, err := c.Send(ctx, "first", nil); err != nil {
		t.Fatal(err)
	}
	contiguous(t, collect(t, c, 2), 1)

	p.Mute() // the server's answers now go nowhere
	type sent struct {
		seq uint64
		err error
	}
	res := make(chan sent, 1)
	go func() {
		seq, err := c.Send(ctx, "resend-me", nil)
		res <- sent{seq, err}
	}()
	waitMuted(t, p, "Agent reply: resend-me") // stored, acked and answered
	c.Drop()

	got := <-res
	if got.err != nil || got.seq != 3 {
		t.Fatalf("Send = %d, %v; want 3", got.seq, got.err)
	}
	msgs := collect(t, c, 2)
	contiguous(t, msgs, 3)
	if msgs[0].Content != "resend-me" || msgs[1].Content != "Agent reply: resend-me" {
		t.Fatalf("entries %+v", msgs)
	}
	st := c.Stats()
	if st.Resends != 1 || st.Reconnects != 1 || st.Gaps != 0 || st.Duplicates != 0 {
		t.Fatalf("stats %+v", st)
	}
	snap := n.snapshot(t, c.SessionID(), tok)
	h, err := c.History(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, m := range h.Messages {
		if m.Role == "user" && m.Content == "resend-me" {
			count++
		}
	}
	if snap.LastSeq != 4 || len(h.Messages) != 4 || count != 1 {
		t.Fatalf("server has last_seq %d, %d entries and %d copies of the send", snap.LastSeq, len(h.Messages), count)
	}
}

// TestSlowReader: the client holds at most MessageBuffer entries; the
// rest come back from the server's log once the reader catches up.
func TestSlowReader(t *testing.T) {
	n := newNode(t, nodeOpts{replayLimit: 3})
	c := dial(t, Config{URLs: []string{n.url()}, Token: n.token(t, "alice", 0), MessageBuffer: 4})
	ctx := ctxT(t)
	const sends = 15
	for i := range sends {
		if _, err := c.Send(ctx, fmt.Sprint("m", i), nil); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	// A drop while far behind: the resume's batch is partial, too.
	c.Drop()
	contiguous(t, collect(t, c, 2*sends), 1)
	if st := c.Stats(); st.Gaps != 0 || st.Duplicates != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResumeAcrossClients(t *testing.T) {
	n := newNode(t, nodeOpts{replayLimit: 2})
	tok := n.token(t, "alice", 0)
	a := dial(t, Config{URLs: []string{n.url()}, Token: tok})
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := a.Send(ctx, fmt.Sprint("m", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, a, 3)
	sid, last := a.SessionID(), a.LastSeq()
	a.Close()
	if err := a.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err after Close = %v", err)
	}
	if _, err := a.Send(ctx, "x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	// A new client resumes where the reader stopped: 7 entries were missed,
	// the batch holds 2, the rest are paged in.
	b := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: sid, LastSeq: last})
	contiguous(t, collect(t, b, 7), 4)
	if b.SessionID() != sid {
		t.Fatalf("resumed %s, want %s", b.SessionID(), sid)
	}
}

func TestSecondURLWhenFirstIsDead(t *testing.T) {
	n := newNode(t, nodeOpts{})
	dead := deadURL(t)
	tok := n.token(t, "alice", 0)
	// The first URL is picked at random: dial until the dead one was tried
	// first at least once (the chance of never is 2⁻³⁰).
	sawFailure := false
	for i := 0; i < 30 && !sawFailure; i++ {
		h := &countHandler{}
		c := dial(t, Config{URLs: []string{dead, n.url()}, Token: tok, Logger: slog.New(h)})
		if _, err := c.Send(ctxT(t), "hi", nil); err != nil {
			t.Fatal(err)
		}
		c.Close()
		sawFailure = h.warnings() > 0
	}
	if !sawFailure {
		t.Fatal("the dead URL was never tried")
	}

	// With every URL dead, MaxAttempts ends the client.
	_, err := Dial(ctxT(t), Config{URLs: []string{dead, deadURL(t)}, Token: tok, MaxAttempts: 3,
		MinBackoff: time.Millisecond, Logger: quiet})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Dial to dead URLs: %v", err)
	}
}

func TestSuperseded(t *testing.T) {
	n := newNode(t, nodeOpts{})
	tok := n.token(t, "alice", 0)
	a := dial(t, Config{URLs: []string{n.url()}, Token: tok})
	ctx := ctxT(t)
	if _, err := a.Send(ctx, "from a", nil); err != nil {
		t.Fatal(err)
	}
	b := dial(t, Config{URLs: []string{n.url()}, Token: tok, SessionID: a.SessionID()})
	if err := ended(t, a); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("a ended with %v, want ErrSuperseded", err)
	}
	if _, err := a.Send(ctx, "too late", nil); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("Send on a superseded client: %v", err)
	}
	// a's entries stay readable, then its stream closes.
	for range a.Messages() {
	}
	if seq, err := b.Send(ctx, "from b", nil); err != nil || seq != 3 {
		t.Fatalf("b.Send = %d, %v", seq, err)
	}
	contiguous(t, collect(t, b, 4), 1)
}
