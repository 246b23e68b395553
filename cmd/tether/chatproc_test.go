package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/gateway/node/nodetest"
	"github.com/tether-dev/tether/gateway/wire"
)

// chatProc is one running `tether chat`, typed into through its stdin.
type chatProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu     sync.Mutex
	out    bytes.Buffer // stdout
	errOut bytes.Buffer // stderr
	change chan struct{}

	exited  chan struct{}
	waitErr error
}

const chatWait = 20 * time.Second

func startChatProc(t *testing.T, args ...string) *chatProc {
	t.Helper()
	c := &chatProc{t: t, change: make(chan struct{}), exited: make(chan struct{})}
	c.cmd = exec.Command(nodetest.Binary(t), append([]string{"chat"}, args...)...)
	c.cmd.Env = childEnv()
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var copied sync.WaitGroup
	copied.Add(2)
	go c.copy(&copied, stdout, &c.out)
	go c.copy(&copied, stderr, &c.errOut)
	go func() {
		copied.Wait()
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

func (c *chatProc) copy(wg *sync.WaitGroup, r io.Reader, into *bytes.Buffer) {
	defer wg.Done()
	br := bufio.NewReader(r)
	buf := make([]byte, 4096)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			c.mu.Lock()
			into.Write(buf[:n])
			close(c.change)
			c.change = make(chan struct{})
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (c *chatProc) stdout() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *chatProc) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errOut.String()
}

func (c *chatProc) typeLine(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("typing %q: %v\nstdout:\n%s\nstderr:\n%s", line, err, c.stdout(), c.stderr())
	}
}

// waitFor waits until stdout matches re and returns the first match's
// submatches.
func (c *chatProc) waitFor(re string) []string {
	c.t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(chatWait)
	for {
		c.mu.Lock()
		text, ch := c.out.String(), c.change
		c.mu.Unlock()
		if m := rx.FindStringSubmatch(text); m != nil {
			return m
		}
		select {
		case <-ch:
		case <-c.exited:
			if m := rx.FindStringSubmatch(c.stdout()); m != nil {
				return m
			}
			c.t.Fatalf("chat exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", c.waitErr, re, c.stdout(), c.stderr())
		case <-timeout:
			c.t.Fatalf("no %q within %v\nstdout:\n%s\nstderr:\n%s", re, chatWait, c.stdout(), c.stderr())
		}
	}
}

// exit waits for the process to end and returns its exit code.
func (c *chatProc) exit() int {
	c.t.Helper()
	select {
	case <-c.exited:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(chatWait):
		c.t.Fatalf("chat still running after %v\nstdout:\n%s\nstderr:\n%s", chatWait, c.stdout(), c.stderr())
		return -1
	}
}

func (c *chatProc) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

func (c *chatProc) interrupt() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		c.t.Fatal(err)
	}
}

// devToken gets a token straight from a node started with --dev-tokens.
func devToken(t *testing.T, p *proc, user string) string {
	t.Helper()
	resp, err := http.Post(p.httpURL()+"/dev/token", "application/json", strings.NewReader(`{"user":"`+user+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Token == "" {
		t.Fatalf("POST /dev/token: HTTP %d, %v", resp.StatusCode, err)
	}
	return body.Token
}

// countIn counts the entries of a snapshot with role and content.
func countIn(s wire.Snapshot, role, content string) int {
	n := 0
	for _, m := range s.Messages {
		if m.Role == role && m.Content == content {
			n++
		}
	}
	return n
}
