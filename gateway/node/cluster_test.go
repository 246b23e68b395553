package node_test

// The cluster, end to end, with in-process nodes on real sockets (the
// helpers are in cluster_helpers_test.go): any node serves any session.
// Membership changes are in changes_test.go; the crash cases (SIGKILL)
// run against real `tether serve` processes in cmd/tether.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway/node"
	"github.com/tether-dev/tether/gateway/wire"
)

// sendWait sends one message and waits for its ack; with started, also
// for the tool call it starts (the demo engine): the call is in flight
// when sendWait returns.
func sendWait(c *wsc, l *ledger, id, content string, started bool) (ackSeq uint64) {
	c.t.Helper()
	if err := c.Write(sendFrame(id, content)); err != nil {
		c.t.Fatalf("send %s: %v", id, err)
	}
	ack := c.until("ack "+id, c.follow(l), func(f frame) bool { return f.Type == "ack" && f.ID == id })
	if started {
		c.until("tool call of "+id, c.follow(l), func(f frame) bool {
			return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started" && replyTo(f) == ack.Seq
		})
	}
	return ack.Seq
}

// replyTo is the seq of the user entry an agent or tool entry answers.
func replyTo(f frame) uint64 {
	n, _ := f.Metadata["reply_to"].(float64)
	return uint64(n)
}

// isReplyTo matches the agent's final reply to the user entry seq.
func isReplyTo(seq uint64) func(frame) bool {
	return func(f frame) bool { return f.Type == "message" && f.Role == "agent" && replyTo(f) == seq }
}

// resume opens sid through n at the connection's last seq and checks the
// answer: resumed, and (once the history_batch came) caught up. l is
// given the answer too: its Verifier holds last_seq against what the
// client was shown.
func resume(t testing.TB, n *tnode, l *ledger, tok, sid string, last uint64) *wsc {
	t.Helper()
	c := dial(t, n)
	c.last = last
	s := c.hello(tok, sid, last)
	l.observe(s)
	if s.Type != "session" || !s.Resumed || s.SessionID != sid {
		t.Fatalf("resume %s via %s at %d: %s", sid, n.id, last, s.Raw)
	}
	b := c.until("history_batch", c.follow(l), func(f frame) bool { return f.Type == "history_batch" })
	if b.Omitted != 0 || b.LastSeq != 0 && b.LastSeq != s.LastSeq {
		t.Fatalf("resume via %s: batch %d..%d (omitted %d), session last_seq %d", n.id, b.FirstSeq, b.LastSeq, b.Omitted, s.LastSeq)
	}
	return c
}

// checkCalls checks that every tool call in log ran once: one started
// and one finished entry per call id, and no more runs of the demo's
// search tool on all nodes together than calls.
func checkCalls(t testing.TB, log []frame, nodes ...*tnode) int {
	t.Helper()
	status := map[string][]string{}
	for _, e := range log {
		if e.Role == "tool" {
			status[e.MD("call_id")] = append(status[e.MD("call_id")], e.MD("status"))
		}
	}
	for id, st := range status {
		if len(st) != 2 || st[0] != "started" || st[1] != "completed" {
			t.Errorf("tool call %s: entries %v, want [started completed]", id, st)
		}
	}
	runs := 0
	for _, n := range nodes {
		runs += n.demo.Runs("search")
	}
	if runs != len(status) {
		t.Errorf("search ran %d times for %d calls", runs, len(status))
	}
	return len(status)
}

// Created through node 1, resumed through node 2 and then node 3 while a
// tool call is in flight each time: each resume replays exactly what the
// client missed, the call finishes once and its result arrives live, and
// new messages keep working through whichever node the client is on.
func TestResumeViaAnyNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{toolDelay: 900 * time.Millisecond})
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	tok := token(t, "alice")
	l := newLedger(t)

	c1, s := helloRetry(t, n1, tok, "", 0)
	if s.Type != "session" || s.Resumed || s.Reason != "new" {
		t.Fatalf("new session: %s", s.Raw)
	}
	l.observe(s)
	sid := s.SessionID
	t.Logf("session owned by %s", owner(t, sid, c.nodes...).id)

	u1 := sendWait(c1, l, "m1", "flights to Lisbon", true)
	c1.Drop() // the tool call is running on the owner
	c2 := resume(t, n2, l, tok, sid, c1.last)
	c2.until("reply to m1", c2.follow(l), isReplyTo(u1))

	u2 := sendWait(c2, l, "m2", "hotels in Lisbon", true)
	c2.Drop()
	c3 := resume(t, n3, l, tok, sid, c2.last)
	c3.until("reply to m2", c3.follow(l), isReplyTo(u2))
	u3 := sendWait(c3, l, "m3", "trains to Porto", false)
	c3.until("reply to m3", c3.follow(l), isReplyTo(u3))
	c3.Drop()

	log := wholeLog(t, n1, tok, sid)
	last := l.check(log)
	if calls := checkCalls(t, log, c.nodes...); calls != 3 {
		t.Errorf("%d tool calls in the log, want 3", calls)
	}
	t.Logf("log of %d entries, all shown gap-free through three nodes", last)
	for _, n := range c.nodes {
		if st := n.Cluster.Stats(); st.Pulls != 0 {
			t.Errorf("%s pulled a log (%+v): the owner never changed", n.id, st)
		}
	}
}

// load is a set of writers.
// spread starts writers until at least k sessions owned by target have
// their client attached to target (if it is among nodes, where sessions
// are created) and k through another node, with a
// few sessions of other owners beside them. Reconnects go through the
// nodes of others, in turn.
// ownedWriter starts writers through pick until one's session is owned
// by target; the others are stopped.
// allSessions is the union of the sessions the nodes' stores hold.
// A node leaves gracefully (Node.Close, what SIGTERM runs) while every
// session has a writer: clients attached to it and clients of its
// sessions attached elsewhere are closed with 1012, resume through the
// other nodes, and go on writing; every acked entry is there, every
// session is still there and held by both survivors.
// A fourth node joins while every session has a writer: the sessions it
// now owns move to it with their logs (their clients get 1012 and resume),
// the others stay put, and nothing acked is lost.
// slowTiming is TestTiming for a node that takes a minute to declare
// anyone dead: cut off, it keeps its stale view for the whole test.
// Two nodes believe they own one session: n1's gossip is cut and n1
// never notices (a stale view: it still sees n2 and n3 and owns the
// session), while n2 and n3 declare n1 dead and the session passes to
// n1's next owner. A client writes through n1 and another through n2 at
// the same time. The fence (epochs on the replicas, the next owner being
// n1's replica) stops n1 at its first append after the takeover: n1
// closes its client (1012), and while its view is stale it does not take
// the session back from the node that holds it (its client is told to
// retry: 1013). No seq is shown as two entries, no acked entry is lost.
// A node leaving (Node.Close, what SIGTERM runs) while one of its
// sessions' replicas has just crashed and is not yet declared dead: the
// leave must end. Its actors' last appends cannot be replicated, and once
// gossip is shut down the view that would drop the dead replica never
// comes, so replication must give up rather than retry forever.
// n3's gossip is cut off (a partition: n3 alone on one side, n1 and n2
// on the other), the sessions n3 owned are taken over and written on the
// majority side while n3 still has their actors, then the partition
// heals. The ring converges back, each session ends with one actor, on
// its owner, and every session resumes through every node with every
// acked entry: n3 does not serve what it held from before the partition.
// GET /v1/sessions/{id} answers the same from every node, whichever owns
// the session; another user and an unknown id get 404, no token 401.
func TestSnapshotFromAnyNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, opts{})
	tok := token(t, "alice")
	l := newLedger(t)
	cl, s := newSession(t, c.nodes[0], tok)
	l.observe(s)
	sid := s.SessionID
	for i := range 3 {
		u := sendWait(cl, l, fmt.Sprintf("m%d", i), "hello", false)
		cl.until("reply", cl.follow(l), isReplyTo(u))
	}
	for _, n := range c.nodes {
		code, body := get(t, n.HTTP()+"/v1/sessions/"+sid, tok)
		var s wire.Snapshot
		if code != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Fatalf("snapshot via %s: %d %s", n.id, code, body)
		}
		if s.SessionID != sid || s.LastSeq != 6 || len(s.Messages) != 6 || s.Status != "active" {
			t.Errorf("snapshot via %s (owner %s): %s", n.id, owner(t, sid, c.nodes...).id, body)
		}
		if code, body := get(t, n.HTTP()+"/v1/sessions/"+sid, token(t, "mallory")); code != http.StatusNotFound {
			t.Errorf("another user's snapshot via %s: %d %s", n.id, code, body)
		}
		// An unknown id is looked for on every configuration's holders;
		// under load that survey can find no Raft leader for a moment
		// and answer 503, which a client retries.
		code = http.StatusServiceUnavailable
		for deadline := time.Now().Add(waitFor); code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
			if code, _ = get(t, n.HTTP()+"/v1/sessions/NOSUCHSESSION2345678901234", tok); code == http.StatusServiceUnavailable {
				time.Sleep(50 * time.Millisecond) // a client's retry backoff
			}
		}
		if code != http.StatusNotFound {
			t.Errorf("unknown session via %s: %d", n.id, code)
		}
		if code, _ := get(t, n.HTTP()+"/v1/sessions/"+sid, ""); code != http.StatusUnauthorized {
			t.Errorf("no token via %s: %d", n.id, code)
		}
	}
	// Last, as resuming takes the session from cl: the six entries the
	// snapshots count are the ones the client was shown.
	l.check(wholeLog(t, c.nodes[0], tok, sid))
}

// A node that was given seeds serves its listener but is not ready (and
// node.Start does not return) until it is in a committed configuration; a
// node given none forms a group of one and is ready at once.
func TestReadyOnlyOnceJoined(t *testing.T) {
	t.Parallel()
	c := &tcluster{t: t, o: opts{replicas: 2, forward: 3 * time.Second}, log: actortest.Logger(t)}
	t.Cleanup(c.closeAll)
	seed := freeAddr(t) // nothing there yet
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		_, err := c.start("a", []string{seed}, func(cfg *node.Config) { cfg.Listener = ln })
		started <- err
	}()
	url := "http://" + ln.Addr().String()
	actortest.Eventually(t, "a's listener to answer not ready", func() bool {
		code, _ := get(t, url+"/readyz", "")
		return code == http.StatusServiceUnavailable
	})
	select {
	case err := <-started:
		t.Fatalf("a started before it joined a cluster: %v", err)
	default:
	}
	b, err := c.start("b", nil, func(cfg *node.Config) { cfg.Cluster.Gossip, cfg.Cluster.Transport = seed, nil })
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, b.HTTP()+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz of a node without seeds: %d %s", code, body)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("a did not start after b formed the cluster")
	}
	a := c.byID("a")
	if code, body := get(t, a.HTTP()+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz of a once started: %d %s", code, body)
	}
	c.waitView(a, b)
}

// A member whose node link cannot be reached (its gossip can) is never
// put in the configuration: it could neither serve its sessions nor hold
// their copies. So its node does not become ready, and the rest of the
// cluster goes on without it, acknowledging what the configuration's
// members store.
func TestUnreachableLinkNotInConfiguration(t *testing.T) {
	t.Parallel()
	c := &tcluster{t: t, o: opts{replicas: 2, forward: time.Second}, log: actortest.Logger(t)}
	t.Cleanup(c.closeAll)
	n1, err := c.start("n1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dead := freeAddr(t) // n2's node link is advertised where nothing listens
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		_, err := c.start("n2", []string{n1.Cluster.GossipAddr()}, func(cfg *node.Config) { cfg.Advertise, cfg.Listener = dead, ln })
		started <- err
	}()
	actortest.Eventually(t, "n1 to see n2 in gossip", func() bool { return len(n1.Cluster.Members()) == 2 })
	before := n1.Cluster.Configuration().Number
	cl := dial(t, n1)
	f := cl.hello(token(t, "alice"), "", 0)
	if f.Type != "session" {
		t.Fatalf("create while n2 cannot be reached: %s", f.Raw)
	}
	if cfg := n1.Cluster.Configuration(); len(cfg.Members) != 1 || cfg.Members[0].ID != "n1" {
		t.Fatalf("configuration %d has %v, want n1 alone (it was %d)", cfg.Number, cfg.IDs(), before)
	}
	if code, _ := get(t, "http://"+ln.Addr().String()+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("n2 /readyz %d, want 503", code)
	}
	select {
	case err := <-started:
		t.Fatalf("n2 started without being in a configuration: %v", err)
	default:
	}
	c.cancelStarts()
	if err := <-started; err == nil {
		t.Fatal("n2 started once its start was cancelled")
	}
}
