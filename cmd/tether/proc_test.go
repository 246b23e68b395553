package main

// Process-level harness: the real tether binary, started, killed and
// restarted on the same data directory, spoken to over raw WebSockets.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/gateway"
)

// testSecret is the --jwt-secret every test node runs with.
const testSecret = "crash-test-secret"

// tetherBin is the binary TestMain builds once.
var tetherBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdtemp:", err)
		os.Exit(1)
	}
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-o", tetherBin, "github.com/tether-dev/tether/cmd/tether")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tether:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// childEnv is the environment without any TETHER_* variable, so a
// developer's shell cannot change what a test runs.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			env = append(env, kv)
		}
	}
	return env
}

// proc is one running `tether serve`.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	data string
	addr string // host:port it listens on

	mu     sync.Mutex
	stderr bytes.Buffer
	change chan struct{} // closed and replaced on each new stderr line

	exited  chan struct{} // closed once Wait returned
	waitErr error
}

var listenRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServe starts `tether serve` on data with extra flags and waits for
// its listening line.
func startServe(t *testing.T, data string, extra ...string) *proc {
	t.Helper()
	return startProc(t, data, append([]string{"--jwt-secret", testSecret}, extra...)...)
}

// startProc is startServe without the --jwt-secret flag.
func startProc(t *testing.T, data string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data}, extra...)
	p := &proc{t: t, data: data, change: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command(tetherBin, args...)
	p.cmd.Env = childEnv()
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.killIfRunning)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.Write(sc.Bytes())
			p.stderr.WriteByte('\n')
			close(p.change)
			p.change = make(chan struct{})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pipe)
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	line, err := p.waitLog("msg=listening", 20*time.Second)
	if err != nil {
		p.killIfRunning()
		t.Fatalf("tether serve %v: %v\nstderr:\n%s", extra, err, p.Stderr())
	}
	p.addr = listenRE.FindStringSubmatch(line)[1]
	return p
}

// Stderr is everything the process logged so far.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLog waits for a stderr line containing substr and returns it.
func (p *proc) waitLog(substr string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		text, ch := p.stderr.String(), p.change
		p.mu.Unlock()
		if l, ok := findLine(text, substr); ok {
			return l, nil
		}
		select {
		case <-ch:
		case <-p.exited:
			// One last look: the final lines may have come with the exit.
			if l, ok := findLine(p.Stderr(), substr); ok {
				return l, nil
			}
			return "", fmt.Errorf("process exited (%v) before logging %q", p.waitErr, substr)
		case <-deadline:
			return "", fmt.Errorf("no %q logged within %v", substr, timeout)
		}
	}
}

func findLine(text, substr string) (string, bool) {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			return l, true
		}
	}
	return "", false
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) killIfRunning() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// kill9 SIGKILLs the process and waits until it is gone.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatal("process still there 10s after SIGKILL")
	}
}

// term sends SIGTERM and returns the exit code and how long the exit took;
// it fails the test if the process is not gone within limit.
func (p *proc) term(limit time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(limit):
		p.killIfRunning()
		p.t.Fatalf("process did not exit within %v of SIGTERM\nstderr:\n%s", limit, p.Stderr())
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// restart starts a new process on the same data directory.
func (p *proc) restart(extra ...string) *proc {
	p.t.Helper()
	if p.running() {
		p.t.Fatal("restart: the old process is still running")
	}
	return startServe(p.t, p.data, extra...)
}

func (p *proc) wsURL() string   { return "ws://" + p.addr + "/v1/ws" }
func (p *proc) httpURL() string { return "http://" + p.addr }

// metric reads one unlabelled sample from GET /metrics.
func (p *proc) metric(name string) (float64, error) {
	resp, err := http.Get(p.httpURL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not exposed", name)
}

func (p *proc) mustMetric(name string) float64 {
	p.t.Helper()
	v, err := p.metric(name)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// snapshot is GET /v1/sessions/{id} with a Bearer token.
func (p *proc) snapshot(sid, token string) (int, gateway.SnapshotJSON) {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.httpURL()+"/v1/sessions/"+sid, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out gateway.SnapshotJSON
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			p.t.Fatal(err)
		}
	}
	return resp.StatusCode, out
}

// waitStatus polls the snapshot until the session has status want.
func (p *proc) waitStatus(sid, token, want string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, s := p.snapshot(sid, token)
		if code == http.StatusOK && s.Status == want {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("session %s: status %q (HTTP %d), want %q within %v", sid, s.Status, code, want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// poll checks cond every 10ms until it holds or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := gateway.Issue([]byte(testSecret), gateway.TokenSpec{User: user}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// frame is any server frame; which fields are set depends on Type.
type frame struct {
	Type string `json:"type"`
	// session
	SessionID string         `json:"session_id"`
	Resumed   bool           `json:"resumed"`
	Reason    string         `json:"reason"`
	Status    string         `json:"status"`
	LastSeq   uint64         `json:"last_seq"` // session and history_batch
	WindowS   float64        `json:"window_s"`
	Context   map[string]any `json:"context"`
	Pending   map[string]any `json:"pending_tool_call"`
	// message, ack
	Seq       uint64         `json:"seq"`
	ID        string         `json:"id"`
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Timestamp float64        `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
	// history_batch
	Messages []frame `json:"messages"`
	FirstSeq uint64  `json:"first_seq"`
	Omitted  uint64  `json:"omitted"`
	Summary  *string `json:"summary"`
	// error
	Code    string `json:"code"`
	Message string `json:"message"`

	raw string
}

func (f frame) md(key string) string { s, _ := f.Metadata[key].(string); return s }

// wsClient speaks PROTOCOL.md over a raw gorilla connection. One goroutine
// reads every frame into a channel; writes are serialised.
type wsClient struct {
	t      *testing.T
	ws     *websocket.Conn
	frames chan frame
	wmu    sync.Mutex

	done    chan struct{} // closed when the reader stopped
	readErr error
}

func dial(t *testing.T, url string) *wsClient {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c := &wsClient{t: t, ws: ws, frames: make(chan frame, 8192), done: make(chan struct{})}
	t.Cleanup(func() { ws.Close() })
	go c.readLoop()
	return c
}

func (c *wsClient) readLoop() {
	defer close(c.done)
	defer close(c.frames)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.readErr = err
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.readErr = fmt.Errorf("bad frame %q: %w", data, err)
			return
		}
		f.raw = string(data)
		if len(f.Messages) > 0 {
			var b struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if json.Unmarshal(data, &b) == nil && len(b.Messages) == len(f.Messages) {
				for i := range f.Messages {
					f.Messages[i].raw = string(b.Messages[i])
				}
			}
		}
		c.frames <- f
	}
}

func (c *wsClient) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteJSON(v)
}

func (c *wsClient) mustWrite(v any) {
	c.t.Helper()
	if err := c.write(v); err != nil {
		c.t.Fatalf("write %v: %v", v, err)
	}
}

// next returns the next frame; ok is false when the connection ended.
func (c *wsClient) next(timeout time.Duration) (frame, bool) {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(timeout):
		c.t.Fatalf("no frame within %v", timeout)
		return frame{}, false
	}
}

// expect returns the next frame and fails unless it has type typ.
func (c *wsClient) expect(typ string, timeout time.Duration) frame {
	c.t.Helper()
	f, ok := c.next(timeout)
	if !ok {
		c.t.Fatalf("connection ended waiting for %s: %v", typ, c.readErr)
	}
	if f.Type != typ {
		c.t.Fatalf("got %s, want %s", f.raw, typ)
	}
	return f
}

// until reads frames, passing each to seen, until match accepts one.
func (c *wsClient) until(timeout time.Duration, what string, seen func(frame), match func(frame) bool) frame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection ended waiting for %s: %v", what, c.readErr)
			}
			if seen != nil {
				seen(f)
			}
			if match(f) {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// hello sends a hello and returns the session frame.
func (c *wsClient) hello(tok, sid string, lastSeq uint64) frame {
	c.t.Helper()
	h := map[string]any{"type": "hello", "token": tok}
	if sid != "" {
		h["session_id"] = sid
		h["last_seq"] = lastSeq
	}
	c.mustWrite(h)
	return c.expect("session", 10*time.Second)
}

// closeCode waits for the connection to end and returns the close code the
// server sent, or -1 when it ended without a close frame.
func (c *wsClient) closeCode(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-c.frames:
			if ok {
				continue
			}
			var ce *websocket.CloseError
			if errors.As(c.readErr, &ce) {
				return ce.Code
			}
			return -1
		case <-deadline:
			c.t.Fatalf("connection still open %v later", timeout)
		}
	}
}

// log collects message entries by seq, whether they come live or in a
// history_batch, and notices a seq delivered twice with different data.
type entryLog struct {
	t       *testing.T
	bySeq   map[uint64]frame
	maxLive uint64
}

func newEntryLog(t *testing.T) *entryLog { return &entryLog{t: t, bySeq: make(map[uint64]frame)} }

func (l *entryLog) add(f frame) {
	l.t.Helper()
	if old, ok := l.bySeq[f.Seq]; ok {
		if old.Role != f.Role || old.Content != f.Content || old.md("call_id") != f.md("call_id") || old.md("status") != f.md("status") {
			l.t.Errorf("seq %d delivered twice with different entries: %+v / %+v", f.Seq, old.raw, f.raw)
		}
		return
	}
	l.bySeq[f.Seq] = f
}

// observe is a wsClient.until callback: it records message frames (and
// checks that live ones come in gap-free order) and batch contents.
func (l *entryLog) observe(f frame) {
	l.t.Helper()
	switch f.Type {
	case "message":
		if l.maxLive != 0 && f.Seq != l.maxLive+1 {
			l.t.Errorf("live message seq %d after %d: not gap-free", f.Seq, l.maxLive)
		}
		l.maxLive = f.Seq
		l.add(f)
	case "history_batch":
		for _, m := range f.Messages {
			l.add(m)
		}
	}
}

// contiguous checks that seqs 1..max are all present and returns max.
func (l *entryLog) contiguous() uint64 {
	l.t.Helper()
	var hi uint64
	for s := range l.bySeq {
		hi = max(hi, s)
	}
	for s := uint64(1); s <= hi; s++ {
		if _, ok := l.bySeq[s]; !ok {
			l.t.Errorf("seq %d missing (have up to %d)", s, hi)
		}
	}
	return hi
}

// pageAll pages the session's log back from before to seq 1 with
// history requests of limit entries, checking each page.
func (c *wsClient) pageAll(l *entryLog, before uint64, limit int) {
	c.t.Helper()
	for before > 1 {
		c.mustWrite(map[string]any{"type": "history", "before_seq": before, "limit": limit})
		b := c.until(10*time.Second, "history_batch", l.observe, func(f frame) bool { return f.Type == "history_batch" })
		if len(b.Messages) == 0 {
			c.t.Fatalf("empty history page before seq %d", before)
		}
		if len(b.Messages) > limit {
			c.t.Errorf("history page of %d entries, limit %d", len(b.Messages), limit)
		}
		for i, m := range b.Messages {
			if want := b.FirstSeq + uint64(i); m.Seq != want {
				c.t.Fatalf("history page before %d: entry %d has seq %d, want %d", before, i, m.Seq, want)
			}
		}
		if b.LastSeq != before-1 {
			c.t.Fatalf("history page before %d ends at %d", before, b.LastSeq)
		}
		before = b.FirstSeq
	}
}

// closeNormal starts the close handshake with 1000 and waits for the
// server's answer.
func (c *wsClient) closeNormal() {
	c.t.Helper()
	c.wmu.Lock()
	err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(5*time.Second))
	c.wmu.Unlock()
	if err != nil {
		c.t.Fatalf("close: %v", err)
	}
	if code := c.closeCode(10 * time.Second); code != websocket.CloseNormalClosure {
		c.t.Fatalf("server answered our close with %d, want 1000", code)
	}
}

func sendFrame(id, content string) map[string]any {
	return map[string]any{"type": "send", "id": id, "content": content}
}

// replyTo is the seq an agent or tool entry answers.
func replyTo(f frame) uint64 {
	n, _ := f.Metadata["reply_to"].(float64)
	return uint64(n)
}

// chat sends one message and waits for its ack and for the agent's reply;
// it returns both entries' seqs.
func (c *wsClient) chat(id, content string) (userSeq, replySeq uint64) {
	c.t.Helper()
	c.mustWrite(sendFrame(id, content))
	ack := c.until(10*time.Second, "ack "+id, failOnError(c.t), func(f frame) bool { return f.Type == "ack" && f.ID == id })
	reply := c.until(10*time.Second, "agent reply", failOnError(c.t), func(f frame) bool {
		return f.Type == "message" && f.Role == "agent" && replyTo(f) == ack.Seq
	})
	return ack.Seq, reply.Seq
}

func failOnError(t *testing.T) func(frame) {
	return func(f frame) {
		t.Helper()
		if f.Type == "error" {
			t.Errorf("server error frame: %s", f.raw)
		}
	}
}
