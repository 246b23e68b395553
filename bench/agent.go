package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/actor/engine/httpagent"
)

// agentProc is the agent endpoint the harness started: the Python
// example (cmd/tether/examples/agent-python), a real process.
type agentProc struct {
	cmd     *exec.Cmd
	url     string
	logPath string
	exited  chan struct{}
}

var agentListenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startAgent runs script with python on a free port of 127.0.0.1 and the
// secret, its stderr in logPath, and waits for its `listening on` line.
// The rules decide, not a model: OPENAI_* is not passed on.
// streamDelay > 0 sets its pause between words (AGENT_STREAM_DELAY), < 0
// none.
func startAgent(ctx context.Context, python, script, secret, logPath string, streamDelay, timeout time.Duration) (*agentProc, error) {
	bin, err := exec.LookPath(python)
	if err != nil {
		return nil, fmt.Errorf("bench: --agent http starts the Python example endpoint with %s, which is not installed (%w); "+
			"install Python 3, or run an endpoint yourself and give --agent-url URL --agent-secret S", python, err)
	}
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("bench: the agent endpoint script: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: agent log: %w", err)
	}
	cmd := exec.Command(bin, filepath.Base(script))
	cmd.Dir = filepath.Dir(script) // it imports tether_endpoint from its directory
	for _, kv := range childEnv() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "AGENT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AGENT_SECRET="+secret, "AGENT_HOST=127.0.0.1", "AGENT_PORT=0", "PYTHONUNBUFFERED=1")
	if streamDelay != 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("AGENT_STREAM_DELAY=%g", max(streamDelay, 0).Seconds()))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("bench: start the agent endpoint (%s %s): %w", bin, script, err)
	}
	p := &agentProc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			_, _ = logf.Write(append(sc.Bytes(), '\n'))
			if m := agentListenRE.FindSubmatch(sc.Bytes()); !seen && m != nil {
				seen = true
				listening <- string(m[1])
			}
		}
		_, _ = io.Copy(logf, pipe)
		_ = cmd.Wait()
		_ = logf.Close()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p.url = <-listening:
		return p, nil
	case <-p.exited:
		err = errors.New("it exited")
	case <-t.C:
		err = fmt.Errorf("no `listening on` line within %v", timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.stop()
	return nil, fmt.Errorf("bench: the agent endpoint (%s %s) did not come up: %w\n%s", python, script, err, tail(logPath, 20))
}

// stop ends the endpoint: SIGTERM, SIGKILL after 5s.
func (p *agentProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// The direct baseline: the bench sends step requests straight to the
// endpoint, shaped and signed as actor/engine/httpagent sends them (its
// exported Sign; the request types are its own, so they are written
// again here from gateway/AGENT-PROTOCOL.md), to time the endpoint's own
// answer.

// stepEntry is an entry of a step request, a PROTOCOL.md message.
type stepEntry struct {
	Seq       uint64         `json:"seq"`
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Timestamp float64        `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
}

type stepBody struct {
	Kind         string         `json:"kind"`
	SessionID    string         `json:"session_id"`
	UserID       string         `json:"user_id"`
	User         stepEntry      `json:"user"`
	Steps        []stepEntry    `json:"steps"`
	Step         int            `json:"step"`
	History      []stepEntry    `json:"history"`
	Summary      *string        `json:"summary"`
	Context      map[string]any `json:"context"`
	AgentContext map[string]any `json:"agent_context"`
}

// directHistory bounds the history a direct request carries.
const directHistory = 20

// directAgent sends signed step requests to the endpoint.
type directAgent struct {
	url    string
	secret []byte
	tr     *http.Transport
	client *http.Client
}

func newDirectAgent(url, secret string) *directAgent {
	// As httpagent's: no cap per host, so that no request waits for a
	// connection.
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
	return &directAgent{url: url, secret: []byte(secret), tr: tr, client: &http.Client{Transport: tr}}
}

func (d *directAgent) close() { d.tr.CloseIdleConnections() }

// step posts one step request and reads its answer up to the final line
// (reply, tool_call or error); it returns the final line's type and the
// reply's text.
func (d *directAgent) step(ctx context.Context, body stepBody) (string, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return "", "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(b))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s/%d/%d", body.SessionID, body.User.Seq, body.Step))
	req.Header.Set("Tether-Signature", httpagent.Sign(d.secret, b, time.Now()))
	resp, err := d.client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return "", "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l struct {
			Type    string  `json:"type"`
			Text    *string `json:"text"`
			Message string  `json:"message"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return "", "", fmt.Errorf("a line that is not JSON: %.80q", raw)
		}
		switch l.Type {
		case "text":
			if l.Text != nil {
				text.WriteString(*l.Text)
			}
		case "reply":
			if l.Text != nil {
				return l.Type, *l.Text, nil
			}
			return l.Type, text.String(), nil
		case "tool_call":
			return l.Type, "", nil
		case "error":
			return l.Type, "", fmt.Errorf("the agent said: %s", l.Message)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", errors.New("the answer ended before its final line")
}

// probe sends one step and checks that it is answered with a reply: the
// endpoint is up and takes the secret.
func (d *directAgent) probe(ctx context.Context, runID string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := "bench-" + runID + "-probe"
	body := newStepBody("bench-probe-"+runID, u, 1, "message 1 from "+u, nil)
	kind, _, err := d.step(ctx, body)
	if err == nil && kind != "reply" {
		err = fmt.Errorf("answered a plain message with %s, not a reply", kind)
	}
	if err != nil {
		return fmt.Errorf("bench: the agent endpoint at %s did not answer a signed step request: %w", d.url, err)
	}
	return nil
}

func newStepBody(sid, user string, seq uint64, content string, history []stepEntry) stepBody {
	return stepBody{
		Kind: "step", SessionID: sid, UserID: user,
		User:  stepEntry{Seq: seq, Role: "user", Content: content, Timestamp: float64(time.Now().UnixMicro()) / 1e6, Metadata: map[string]any{"id": fmt.Sprint("m", seq)}},
		Steps: []stepEntry{}, History: history, Context: map[string]any{}, AgentContext: map[string]any{},
	}
}

// directLoop is one direct user: during phase, a step request for a
// message shaped like a bench user's, at the users' rate, each after the
// previous answer, timed from the request to the final line (HDirect).
func (b *Bench) directLoop(phase context.Context, i int, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := mrand.New(mrand.NewPCG(b.seed, uint64(1<<41+i)))
	name := fmt.Sprintf("bench-%s-d%d", b.runID, i) // as long as a user's name: the same words
	sid := fmt.Sprintf("direct-%s-%d", b.runID, i)
	var history []stepEntry
	next := time.Now()
	for n := 1; ; n++ {
		if !sleepCtx(phase, time.Until(next)) {
			return
		}
		seq := uint64(len(history) + 1)
		body := newStepBody(sid, name, seq, fmt.Sprintf("message %d from %s", n, name), history[max(0, len(history)-directHistory):])
		t0 := time.Now()
		// Not bounded by phase: the request in flight at its end finishes.
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReplyTimeout)
		kind, reply, err := b.agent.step(ctx, body)
		cancel()
		now := time.Now()
		if err != nil || kind != "reply" {
			b.rec.Error("agent_direct_failed", now)
			b.warn(fmt.Sprintf("a direct step request to the agent endpoint failed: %v (%s)", err, kind))
		} else {
			b.rec.Latency(HDirect, now, now.Sub(t0))
			history = append(history, body.User, stepEntry{Seq: seq + 1, Role: "agent", Content: reply,
				Timestamp: float64(now.UnixMicro()) / 1e6, Metadata: map[string]any{"reply_to": seq}})
		}
		next = t0.Add(time.Duration((0.5 + rng.Float64()) / b.cfg.Rate * float64(time.Second)))
	}
}
