package main

import (
	"testing"
	"time"
)

// A node that left gracefully comes back under the same id on a fresh
// data directory (a replaced machine, a pod rescheduled without its
// volume): it is added to Raft and to the configuration again, and serves.
func TestRejoinAfterLeaveWithFreshData(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2)
	const leaving = 2
	if code, _ := c.procs[leaving].term(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	c.dead[leaving] = true
	c.waitMembers()
	args := append([]string(nil), c.args[leaving]...)
	args = append(args, "--join", c.gossip[0])
	c.procs[leaving] = startServe(t, t.TempDir(), args...)
	c.dead[leaving] = false
	c.waitMembers()
	poll(t, 30*time.Second, "the rejoined node ready", func() bool {
		resp, err := c.procs[leaving].client().Get(c.procs[leaving].httpURL() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	s := c.newSession("after-rejoin", leaving)
	s.reply(s.send(false))
	s.check(leaving)
}
