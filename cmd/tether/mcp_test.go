package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tether-dev/tether/actor/engine/mcptools/mcptest"
)

func TestServeMCPFlags(t *testing.T) {
	for _, v := range []string{"TETHER_MCP", "TETHER_MCP_HEADER"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	parse := func(args ...string) (serveConfig, error) {
		m := &Main{Stdout: io.Discard, Stderr: io.Discard}
		return m.parseServe(append([]string{"--jwt-secret", "s", "--agent", "openai",
			"--openai-base-url", "http://127.0.0.1:11434/v1", "--openai-model", "m"}, args...))
	}
	c, err := parse("--mcp", "http://127.0.0.1:9001/mcp", "--mcp", "files=http://127.0.0.1:9002/mcp",
		"--mcp-header", "Authorization: Bearer t0k", "--mcp-header", "files=x-key: k=v: w")
	if err != nil {
		t.Fatal(err)
	}
	servers, err := c.mcp.config()
	if err != nil || len(servers) != 2 {
		t.Fatalf("servers %+v, %v", servers, err)
	}
	if s := servers[0]; s.Name != "mcp1" || s.URL != "http://127.0.0.1:9001/mcp" ||
		s.Header.Get("Authorization") != "Bearer t0k" || len(s.Header) != 1 {
		t.Errorf("first server %+v", s)
	}
	if s := servers[1]; s.Name != "files" || s.URL != "http://127.0.0.1:9002/mcp" ||
		s.Header.Get("Authorization") != "Bearer t0k" || s.Header.Get("X-Key") != "k=v: w" {
		t.Errorf("second server %+v", s)
	}

	for args, want := range map[string]string{
		"--mcp 127.0.0.1:9001":                       "--mcp mcp1: the MCP server URL must be an http(s) URL",
		"--mcp a=ftp://127.0.0.1/x":                  "--mcp a: the MCP server URL must be an http(s) URL",
		"--mcp a=http://h/x --mcp a=http://h/y":      `two servers are named "a"`,
		"--mcp http://h/x --mcp-header nocolon":      "no colon",
		"--mcp http://h/x --mcp-header b=A:1":        `no --mcp server is named "b"`,
		"--mcp http://h/x --mcp-header bad(name:sec": "is not a header name",
		"--mcp-header A:1":                           "--mcp-header without --mcp",
	} {
		_, err := parse(strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "sec") {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	m := &Main{Stdout: io.Discard, Stderr: io.Discard}
	if _, err := m.parseServe([]string{"--jwt-secret", "s", "--mcp", "http://h/x"}); err == nil || !strings.Contains(err.Error(), "for --agent openai") {
		t.Errorf("--mcp with --agent echo: %v", err)
	}

	// The environment: comma-separated servers, one header a line; a
	// flag on the command line replaces what the environment gave.
	t.Setenv("TETHER_MCP", "http://127.0.0.1:9001/mcp, b=http://127.0.0.1:9002/mcp")
	t.Setenv("TETHER_MCP_HEADER", "Authorization: Bearer a,b\nb=X-Other: 1")
	c, err = parse()
	if err != nil {
		t.Fatal(err)
	}
	if servers, err = c.mcp.config(); err != nil || len(servers) != 2 || servers[1].Name != "b" ||
		servers[0].Header.Get("Authorization") != "Bearer a,b" || servers[1].Header.Get("X-Other") != "1" {
		t.Fatalf("from the environment: %+v, %v", servers, err)
	}
	c, err = parse("--mcp", "http://127.0.0.1:9003/mcp", "--mcp-header", "mcp1=A: 2")
	if err != nil {
		t.Fatal(err)
	}
	if servers, err = c.mcp.config(); err != nil || len(servers) != 1 || servers[0].URL != "http://127.0.0.1:9003/mcp" ||
		servers[0].Header.Get("A") != "2" || servers[0].Header.Get("Authorization") != "" {
		t.Fatalf("flags over the environment: %+v, %v", servers, err)
	}

	var out bytes.Buffer
	m = &Main{Stdout: &out, Stderr: io.Discard}
	if _, err := m.parseServe([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if h := out.String(); !strings.Contains(h, "-mcp [NAME=]URL") || !strings.Contains(h, "-mcp-header") ||
		!strings.Contains(h, "demo placeholders") || strings.Contains(h, "Bearer a,b") {
		t.Fatalf("help:\n%s", h)
	}
}

// mcpTools is the MCP server of TestServeMCPTools: a tool per case, each
// of whose first call hangs (until the node calling it is killed) and
// whose later calls answer at once.
func mcpTools(t *testing.T) *mcptest.Server {
	srv := mcptest.Start(t, "tools")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the server closes
	firstHangs := func(ctx context.Context, _ map[string]any, n int) (*mcp.CallToolResult, error) {
		if n == 1 {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil, errors.New("cut short")
		}
		return mcptest.Text("done on call 2"), nil
	}
	srv.Tool("lookup", &mcp.ToolAnnotations{ReadOnlyHint: true}, firstHangs)
	srv.Tool("upsert", &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: mcptest.Bool(false)}, firstHangs)
	srv.Tool("append_note", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(false)}, firstHangs)
	srv.Tool("wipe", &mcp.ToolAnnotations{DestructiveHint: mcptest.Bool(true)}, firstHangs)
	return srv
}

// `tether serve --agent openai --mcp URL`: a model that asks for each of
// an MCP server's tools. Each call is journaled; after a SIGKILL mid-call
// a read-only or idempotent tool is run again and the turn completes, any
// other is logged failed "interrupted" and not run again; a destructive
// tool waits for the user's approval and is called only once approved. A second server that is down at start
// neither fails the start nor hides the first one's tools: the model is
// told it cannot be reached.
func TestServeMCPTools(t *testing.T) {
	t.Parallel()
	srv := mcpTools(t)
	f := newFakeChatTools(t, func(user string) string { return user })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	flags := []string{"--agent", "openai", "--openai-base-url", f.srv.URL + "/v1", "--openai-model", "m",
		"--mcp", "tools=" + srv.URL, "--mcp", "gone=" + down}
	env := []string{keyEnv + "=" + openaiTestKey, "TETHER_MCP_HEADER=tools=Authorization: Bearer mcp-t0k"}
	srv.RequireHeader("Authorization", "Bearer mcp-t0k")
	tok := token(t, "alice")

	// start runs one turn asking for tool; it returns once the call is
	// journaled as started and has reached the MCP server.
	start := func(t *testing.T, tool string) (p *proc, sid string, userSeq uint64, callID string) {
		t.Helper()
		p = startProcEnv(t, t.TempDir(), env, append([]string{"--jwt-secret", testSecret}, flags...)...)
		c := dial(t, p.wsURL())
		sid = c.hello(tok, "", 0).SessionID
		c.mustWrite(sendFrame("q-1", tool))
		ack := c.until(10*time.Second, "ack", failOnError(t), func(f frame) bool { return f.Type == "ack" })
		started := c.until(20*time.Second, "tool started", failOnError(t), func(f frame) bool {
			return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started"
		})
		if started.MD("name") != tool || replyTo(started) != ack.Seq {
			t.Fatalf("started entry: %s", started.Raw)
		}
		poll(t, 20*time.Second, tool+" called", func() bool { return srv.Calls(tool) == 1 })
		return p, sid, ack.Seq, started.MD("call_id")
	}

	for _, c := range []struct {
		tool, outcome, content string
		calls                  int
	}{
		{"lookup", "completed", "done on call 2", 2}, // read-only: run again
		{"upsert", "completed", "done on call 2", 2}, // idempotent: run again
		{"append_note", "failed", "interrupted", 1},  // neither: at most once
	} {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			p, sid, userSeq, callID := start(t, c.tool)
			p.kill9()
			p2 := p.restart(flags...)
			l := turnAfterRestart(t, p2, tok, sid, userSeq)
			statuses, seqs, entries, reply := callEntries(t, l, callID, userSeq)
			if !slices.Equal(statuses, []string{"started", c.outcome}) || entries[1].Content != c.content {
				t.Fatalf("call %s logged as %v (%s), want [started %s] %q", callID, statuses, entries[len(entries)-1].Raw, c.outcome, c.content)
			}
			want := "It is " + c.content + "."
			if c.outcome == "failed" {
				want = "It is The tool call failed: " + c.content + "."
			}
			if reply < seqs[1] || l.bySeq[reply].Content != want {
				t.Errorf("agent reply %d: %s", reply, l.bySeq[reply].Raw)
			}
			if n := srv.Calls(c.tool); n != c.calls {
				t.Errorf("%s called %d times, want %d", c.tool, n, c.calls)
			}
		})
	}

	t.Run("destructive", func(t *testing.T) {
		t.Parallel()
		p := startProcEnv(t, t.TempDir(), env, append([]string{"--jwt-secret", testSecret}, flags...)...)
		c := dial(t, p.wsURL())
		c.hello(tok, "", 0)
		c.mustWrite(sendFrame("q-1", "wipe"))
		waiting := c.until(20*time.Second, "the call waiting", failOnError(t), func(f frame) bool {
			return f.Type == "message" && f.Role == "tool"
		})
		if waiting.MD("status") != "awaiting_approval" || waiting.MD("name") != "wipe" {
			t.Fatalf("wipe logged as %s", waiting.Raw)
		}
		if n := srv.Calls("wipe"); n != 0 {
			t.Fatalf("wipe called %d times before its approval", n)
		}
		c.mustWrite(map[string]any{"type": "approve", "call_id": waiting.MD("call_id"), "approved": true})
		var statuses []string
		c.until(20*time.Second, "wipe started", failOnError(t), func(f frame) bool {
			if f.Type == "message" && f.Role == "tool" {
				statuses = append(statuses, f.MD("status"))
			}
			return f.Type == "message" && f.Role == "tool" && f.MD("status") == "started"
		})
		if !slices.Equal(statuses, []string{"approved", "started"}) {
			t.Fatalf("wipe after its approval: %v", statuses)
		}
		// Its first call hangs (mcpTools): it reached the server once.
		poll(t, 20*time.Second, "wipe called", func() bool { return srv.Calls("wipe") == 1 })
		tools, system := f.seen()
		for _, want := range []string{"search", "get_time", "lookup", "upsert", "append_note", "wipe"} {
			if !slices.Contains(tools, want) {
				t.Errorf("tool %s not offered: %v", want, tools)
			}
		}
		if !strings.Contains(system, "cannot be reached") || !strings.Contains(system, "gone") || strings.Contains(system, "tools,") {
			t.Errorf("system prompt %q", system)
		}
		if s := p.Stderr(); strings.Contains(s, "mcp-t0k") || !strings.Contains(s, "MCP server unavailable") {
			t.Errorf("stderr:\n%s", s)
		}
	})
}
