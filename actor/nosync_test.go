package actor

import (
	"testing"

	"github.com/tether-dev/tether/wal"
)

// TestAttachAndDetachNeedNoFsync: the status changes a detach and a resume
// write are stored without an fsync of their own (a crash that loses
// them leaves the session interrupted, which resumes the same), while a
// send is fsynced before its ack.
func TestAttachAndDetachNeedNoFsync(t *testing.T) {
	e := newEnv(t)
	c := newRecConn("c1")
	h := e.create("s1", "alice", c)
	chat(t, h, c, "m1", "hello")
	e.settle("s1")
	before := e.log.Stats().Syncs

	h.Detach()
	e.waitStatus("s1", wal.StatusInterrupted)
	c2 := newRecConn("c2")
	h2, _, _ := e.resume("s1", "alice", 2, c2)
	e.waitStatus("s1", wal.StatusActive)
	e.settle("s1")
	if got := e.log.Stats().Syncs; got != before {
		t.Fatalf("a detach and a resume made %d fsyncs", got-before)
	}

	chat(t, h2, c2, "m2", "again")
	if e.log.Stats().Syncs == before {
		t.Fatal("a send was acked without an fsync")
	}
}
