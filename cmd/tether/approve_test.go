package main

import (
	"testing"
	"time"
)

// A booking waits for its approval through a dropped connection and a
// SIGKILL of the node: after the restart a second device of the same user
// (another token) finds it waiting, approves it, and it runs once; a
// second approve does nothing.
func TestApprovalSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	flags := []string{"--agent", "demo", "--demo-search-delay", "300ms", "--demo-stream-delay", "0"}
	p := startServe(t, t.TempDir(), flags...)
	c := p.ws()
	sid := c.hello(token(t, "alice"), "", 0).SessionID
	c.mustWrite(sendFrame("b-1", "book a table for two"))
	waiting := c.until(20*time.Second, "the booking waiting", failOnError(t), func(f frame) bool {
		return f.Type == "message" && f.Role == "tool"
	})
	if waiting.MD("status") != "awaiting_approval" || waiting.MD("name") != "booking" {
		t.Fatalf("waiting entry %s", waiting.Raw)
	}
	c.Drop()
	p.kill9()
	p2 := p.restart(flags...)
	phone := p2.ws()
	s := phone.hello(token(t, "alice"), sid, waiting.Seq)
	if !s.Resumed || s.Pending == nil || s.Pending["status"] != "awaiting_approval" || s.Pending["call_id"] != waiting.MD("call_id") {
		t.Fatalf("after the restart: %s", s.Raw)
	}
	phone.mustWrite(map[string]any{"type": "approve", "call_id": waiting.MD("call_id"), "approved": true})
	phone.mustWrite(map[string]any{"type": "approve", "call_id": waiting.MD("call_id"), "approved": false})
	var statuses []string
	reply := phone.until(20*time.Second, "the booking's reply", failOnError(t), func(f frame) bool {
		if f.Type == "message" && f.Role == "tool" {
			statuses = append(statuses, f.MD("status"))
		}
		return f.Type == "message" && f.Role == "agent"
	})
	if len(statuses) != 3 || statuses[0] != "approved" || statuses[1] != "started" || statuses[2] != "completed" || reply.Content[:7] != "Booked:" {
		t.Fatalf("after approve: %v, reply %s", statuses, reply.Raw)
	}
}
