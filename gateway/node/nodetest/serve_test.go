package nodetest_test

import (
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wstest"
)

// A served process listens on the Addr it logged, accepts the kit's
// tokens with --jwt-secret Secret, stops gracefully on Stop, and serves
// its sessions again when started on the same Dir.
func TestStartServeRestartOnDir(t *testing.T) {
	p := nodetest.StartServe(t, nodetest.ServeOptions{Args: []string{"--jwt-secret", nodetest.Secret}})
	if p.Addr == "" || p.Dir == "" || !p.Running() {
		t.Fatalf("served process: addr %q dir %q running %v", p.Addr, p.Dir, p.Running())
	}
	if code := get(t, "http://"+p.Addr+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz: %d", code)
	}
	tok := nodetest.Token(t, "alice")
	c, err := wstest.Dial(t, "ws://"+p.Addr+"/v1/ws")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Hello(tok, "", 0, actortest.Patience)
	if f.Type != "session" || f.SessionID == "" {
		t.Fatalf("hello with nodetest.Token: %s", f.Raw)
	}

	p.Stop(actortest.Patience)
	if p.Running() || p.Err() != nil {
		t.Fatalf("after a graceful Stop: running %v, exit %v\n%s", p.Running(), p.Err(), p.Stderr())
	}
	p.Stop(0) // stopping a stopped process does nothing

	p2 := nodetest.StartServe(t, nodetest.ServeOptions{Dir: p.Dir, Args: []string{"--jwt-secret", nodetest.Secret}})
	if code := get(t, "http://"+p2.Addr+"/v1/sessions/"+f.SessionID, tok); code != http.StatusOK {
		t.Fatalf("session %s after the restart: status %d", f.SessionID, code)
	}
}

// With NoWait the test waits itself: WaitListening reports a process
// that exits instead of listening, its log is kept, and Exited and Err
// say how it ended.
func TestStartServeNoWaitExit(t *testing.T) {
	p := nodetest.StartServe(t, nodetest.ServeOptions{Args: []string{"--no-such-flag"}, NoWait: true})
	err := p.WaitListening(actortest.Patience)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitListening of a refused flag: %v", err)
	}
	<-p.Exited()
	if p.Err() == nil || !strings.Contains(p.Stderr(), "no-such-flag") {
		t.Fatalf("exit %v, stderr:\n%s", p.Err(), p.Stderr())
	}
}

// The environment a process gets has none of the test's TETHER_*
// variables, but those ServeOptions.Env names; StartCmd keeps any
// command's stderr for WaitLog.
func TestEnvironAndStartCmd(t *testing.T) {
	t.Setenv("TETHER_FROM_SHELL", "leaked")
	for _, kv := range nodetest.Environ() {
		if strings.HasPrefix(kv, "TETHER_") {
			t.Fatalf("Environ has %s", kv)
		}
	}
	cmd := exec.Command("sh", "-c", `echo "shell=${TETHER_FROM_SHELL:-none}" >&2; exec sleep 60`)
	cmd.Env = nodetest.Environ()
	p := nodetest.StartCmd(t, cmd)
	line, err := p.WaitLog(regexp.MustCompile(`^shell=`), actortest.Patience)
	if err != nil || line != "shell=none" {
		t.Fatalf("line %q, %v", line, err)
	}
	start := time.Now()
	// SIGKILL: the sleep does not hold the test (exec, so that no child
	// of the shell keeps stderr open after it).
	p.Stop(0)
	if p.Running() || time.Since(start) > actortest.Patience {
		t.Fatalf("still running %v after Stop(0)", p.Running())
	}
}
