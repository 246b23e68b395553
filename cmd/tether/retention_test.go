package main

import (
	"net/http"
	"testing"
	"time"
)

// An interrupted session expires when its window passes and is deleted by
// the background sweeper once the retention has passed too; /readyz says
// ready while the node serves.
func TestRetentionDeletesExpiredSessions(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--window", "1s", "--retention", "1s")
	resp, err := http.Get(p.httpURL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", resp.StatusCode)
	}

	tok := token(t, "alice")
	c := dial(t, p.wsURL())
	s := c.hello(tok, "", 0)
	c.chat("m1", "remember me")
	c.closeNormal()
	p.waitStatus(s.SessionID, tok, "interrupted", 10*time.Second)
	p.waitStatus(s.SessionID, tok, "expired", 10*time.Second)
	poll(t, 15*time.Second, "the sweeper to delete the expired session", func() bool {
		code, _ := p.snapshot(s.SessionID, tok)
		return code == http.StatusNotFound
	})
	// Deleted means gone: a resume starts over.
	c2 := dial(t, p.wsURL())
	if f := c2.hello(tok, s.SessionID, 2); f.Resumed || f.Reason != "not_found" {
		t.Fatalf("resume of a deleted session: resumed=%v reason=%q, want not_found", f.Resumed, f.Reason)
	}
}
