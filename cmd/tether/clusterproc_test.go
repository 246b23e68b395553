package main

// A cluster of real `tether serve` processes on 127.0.0.1, for the crash
// cases: SIGKILL leaves no chance to hand anything over, so what survives
// is what the replicas stored. The in-process cluster tests (leave, join,
// a stale view, a partition) are in gateway/node.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/bench/netns"
	"github.com/tether-dev/tether/cluster"
)

// pcluster is n processes joined into one cluster with the fast gossip
// timings (a dead node is declared in about a second).
type pcluster struct {
	t      *testing.T
	ids    []string
	gossip []string
	procs  []*proc
	args   [][]string // each node's serve flags
	dead   map[int]bool
	lab    *netns.Lab // nil: the nodes run on 127.0.0.1
	sids   []string   // the sessions newClient created
}

// startCluster starts n nodes with --replicas r, the first alone and the
// others joining it, and waits until each sees all of them.
func startCluster(t *testing.T, n, r int, extra ...string) *pcluster {
	t.Helper()
	c := &pcluster{t: t, dead: map[int]bool{}}
	for i := range n {
		c.ids = append(c.ids, fmt.Sprintf("node-%d", i+1))
		c.gossip = append(c.gossip, freeGossipAddr(t))
	}
	for i := range n {
		args := []string{"--node-id", c.ids[i], "--gossip", c.gossip[i], "--gossip-timing", "test",
			"--replicas", strconv.Itoa(r), "--rate", "0", "--max-turns", "1000", "--replay-limit", "1000"}
		if i > 0 {
			args = append(args, "--join", c.gossip[0])
		}
		args = append(args, extra...)
		c.args = append(c.args, args)
		c.procs = append(c.procs, startServe(t, t.TempDir(), args...))
	}
	c.waitMembers()
	return c
}

// freeGossipAddr is a 127.0.0.1 address free for TCP and UDP right now,
// outside the ports outgoing connections are given (cluster.FreeLocalAddr).
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	addr, err := cluster.FreeLocalAddr(true)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// alive are the indexes of the nodes not killed.
func (c *pcluster) alive() []int {
	var out []int
	for i := range c.procs {
		if !c.dead[i] {
			out = append(out, i)
		}
	}
	return out
}

// waitMembers waits until every live node counts the live nodes as its
// members.
func (c *pcluster) waitMembers() {
	c.t.Helper()
	want := float64(len(c.alive()))
	poll(c.t, 30*time.Second, fmt.Sprintf("%v members everywhere", want), func() bool {
		for _, i := range c.alive() {
			if v, err := c.procs[i].metric("tether_cluster_members"); err != nil || v != want {
				return false
			}
		}
		return true
	})
}

// placement is the ring of the live nodes, as the nodes compute it.
func (c *pcluster) placement() *cluster.Placement {
	var ids []string
	for _, i := range c.alive() {
		ids = append(ids, c.ids[i])
	}
	return cluster.NewPlacement(ids, cluster.PlacementConfig{})
}

// index is the node with the given id.
func (c *pcluster) index(id string) int { return slices.Index(c.ids, id) }

// kill9 SIGKILLs node i and returns when it is gone.
func (c *pcluster) kill9(i int) time.Time {
	c.procs[i].kill9()
	c.dead[i] = true
	return time.Now()
}

// restart starts killed node i again on its data, address and id,
// joining every other node.
func (c *pcluster) restart(i int) {
	c.t.Helper()
	c.restartAll(i)
}

// restartAll starts the given dead nodes again at the same moment (each
// joining the others) and waits until every one listens.
func (c *pcluster) restartAll(ids ...int) {
	c.t.Helper()
	for _, i := range ids {
		if c.procs[i].running() {
			c.t.Fatalf("restart: node %d is still running", i)
		}
		var seeds []string
		for j, g := range c.gossip {
			if j != i {
				seeds = append(seeds, g)
			}
		}
		args := slices.Clone(c.args[i])
		if k := slices.Index(args, "--join"); k >= 0 {
			args = slices.Delete(args, k, k+2)
		}
		args = append([]string{"--jwt-secret", testSecret}, append(args, "--join", strings.Join(seeds, ","))...)
		c.procs[i] = launchOpts(c.t, c.procs[i].data, c.procs[i].opts, args...)
	}
	for _, i := range ids {
		c.procs[i].awaitListening()
		delete(c.dead, i)
	}
}

// sum adds a metric over the live nodes.
func (c *pcluster) sum(name string) float64 {
	c.t.Helper()
	total := 0.0
	for _, i := range c.alive() {
		total += c.procs[i].mustMetric(name)
	}
	return total
}

// psession is one session, its client and what the client was shown.
type psession struct {
	t     *testing.T
	c     *pcluster
	sid   string
	tok   string
	via   int // the node the client is attached to
	cl    *wsClient
	last  uint64 // the newest seq the client was shown
	log   *entryLog
	acked map[string]uint64
	sends int
}

// newSession creates a session through node via.
func (c *pcluster) newSession(user string, via int) *psession {
	c.t.Helper()
	s := &psession{t: c.t, c: c, tok: token(c.t, user), via: via, log: newEntryLog(c.t), acked: map[string]uint64{}}
	s.cl = c.procs[via].ws()
	f := s.cl.hello(s.tok, "", 0)
	if f.Resumed || f.Reason != "new" {
		c.t.Fatalf("new session: %s", f.Raw)
	}
	s.sid = f.SessionID
	return s
}

// see records a frame the client was shown and checks that this
// connection shows entries gap-free.
func (s *psession) see(f frame) {
	s.t.Helper()
	switch f.Type {
	case "message":
		if f.Seq != s.last+1 {
			s.t.Errorf("%s: message seq %d after %d", s.sid, f.Seq, s.last)
		}
		s.last = f.Seq
		s.log.add(f)
	case "history_batch":
		if len(f.Messages) > 0 {
			if f.FirstSeq != s.last+1 {
				s.t.Errorf("%s: history_batch from %d after %d", s.sid, f.FirstSeq, s.last)
			}
			s.last = f.LastSeq
		}
		for _, m := range f.Messages {
			s.log.add(m)
		}
	case "ack":
		s.acked[f.ID] = f.Seq
	case "error":
		s.t.Errorf("%s: error frame %s", s.sid, f.Raw)
	}
}

// send sends one message and waits for its ack and, with started, for
// the tool call it starts (the demo engine), which is then in flight.
func (s *psession) send(started bool) uint64 {
	s.t.Helper()
	id := fmt.Sprintf("m%d", s.sends)
	s.sends++
	s.cl.mustWrite(sendFrame(id, "look up "+id))
	ack := s.cl.until(20*time.Second, "ack "+id, s.see, func(f frame) bool { return f.Type == "ack" && f.ID == id })
	if started {
		s.cl.until(20*time.Second, "tool call of "+id, s.see, func(f frame) bool {
			return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started" && replyTo(f) == ack.Seq
		})
	}
	return ack.Seq
}

// reply waits for the agent's answer to the user entry seq.
func (s *psession) reply(seq uint64) {
	s.t.Helper()
	defer func() {
		if s.t.Failed() {
			code, snap := s.c.procs[s.c.alive()[0]].snapshot(s.sid, s.tok)
			s.t.Logf("%s: owner %s; snapshot %d: %+v", s.sid, s.c.placement().Owner(s.sid), code, snap)
		}
	}()
	replied := func() bool { // live, or in a resume's history_batch
		for _, e := range s.log.bySeq {
			if e.Role == "agent" && replyTo(e) == seq {
				return true
			}
		}
		return false
	}
	if replied() {
		return
	}
	s.cl.until(30*time.Second, fmt.Sprintf("%s (via %s): reply to %d", s.sid, s.c.ids[s.via], seq), s.see, func(frame) bool { return replied() })
}

// closed reads what is left on the client's connection until it ends
// and returns the server's close code (-1: none, the node died).
func (s *psession) closed() int {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-s.cl.Frames():
			if ok {
				s.see(f)
				continue
			}
			var ce *websocket.CloseError
			if errors.As(s.cl.Err(), &ce) {
				return ce.Code
			}
			return -1
		case <-deadline:
			s.t.Fatalf("%s: connection via %s still open 30s later", s.sid, s.c.ids[s.via])
		}
	}
}

// resume attaches a new connection through node via, retrying while the
// cluster answers unavailable (1013), and returns when it is caught up.
func (s *psession) resume(via int) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl := s.c.procs[via].ws()
		cl.mustWrite(map[string]any{"type": "hello", "token": s.tok, "session_id": s.sid, "last_seq": s.last})
		f, ok := cl.next(30 * time.Second)
		if ok && f.Type == "session" {
			if !f.Resumed {
				s.t.Fatalf("%s not resumed via %s: %s", s.sid, s.c.ids[via], f.Raw)
			}
			s.cl, s.via = cl, via
			s.cl.until(20*time.Second, "history_batch", s.see, func(f frame) bool { return f.Type == "history_batch" })
			return
		}
		if ok && (f.Type != "error" || f.Code != "unavailable") {
			s.t.Fatalf("resume %s via %s: %s", s.sid, s.c.ids[via], f.Raw)
		}
		_ = cl.WS.Close()
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: no resume via %s within 30s", s.sid, s.c.ids[via])
		}
		time.Sleep(50 * time.Millisecond) // a client's backoff
	}
}

// check reads the whole log through node via and holds it against what
// the clients were shown: gap-free, every acked send at its seq, every
// tool call started once and finished once.
func (s *psession) check(via int) {
	s.t.Helper()
	cl := s.c.procs[via].ws()
	defer func() { _ = cl.WS.Close() }()
	f := cl.hello(s.tok, s.sid, 0)
	b := cl.expect("history_batch", 20*time.Second)
	if !f.Resumed || b.Omitted != 0 || uint64(len(b.Messages)) != f.LastSeq {
		s.t.Fatalf("%s: whole log via %s: %d of %d entries (%s)", s.sid, s.c.ids[via], len(b.Messages), f.LastSeq, f.Raw)
	}
	all := newEntryLog(s.t)
	for i, m := range b.Messages {
		if m.Seq != uint64(i+1) {
			s.t.Fatalf("%s: entry %d has seq %d", s.sid, i, m.Seq)
		}
		all.add(m)
	}
	for seq, m := range s.log.bySeq {
		if e := all.bySeq[seq]; e.Role != m.Role || e.Content != m.Content {
			s.t.Errorf("%s: seq %d was shown as %s; the log has %s", s.sid, seq, m.Raw, e.Raw)
		}
	}
	for id, seq := range s.acked {
		if e := all.bySeq[seq]; e.Role != "user" || e.MD("id") != id {
			s.t.Errorf("%s: send %s was acked as seq %d; the log has %s (of %d): an acked entry was lost", s.sid, id, seq, e.Raw, f.LastSeq)
		}
	}
	calls := map[string][]string{}
	for _, m := range b.Messages {
		if m.Role == "tool" {
			calls[m.MD("call_id")] = append(calls[m.MD("call_id")], m.MD("status"))
		}
	}
	for id, st := range calls {
		if len(st) != 2 || st[0] != "started" || st[1] != "completed" && st[1] != "failed" {
			s.t.Errorf("%s: tool call %s: %v, want started then completed or failed, once", s.sid, id, st)
		}
	}
}

func (c *pcluster) String() string { return strings.Join(c.ids, ",") }
