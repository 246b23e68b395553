package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// aiPage is a test page for tether-ai.js in a browser: a Chat of the real
// @ai-sdk/react package (bundled with esbuild, as an application would)
// over the TetherChatTransport the node serves at /tether-ai.js. #log shows
// the messages, for failure reports.
const aiPage = `<!doctype html><meta charset="utf-8"><title>tether-ai test</title>
<div id="status" data-state="loading">loading</div><div id="log"></div>
<script type="module" src="/aitest.js"></script>`

const aiEntry = `
import { Chat } from "@ai-sdk/react";
import { TetherChatTransport } from "/tether-ai.js";
const user = new URLSearchParams(location.search).get("user");
const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const r = await fetch("/dev/token", { method: "POST", body: JSON.stringify({ user }) });
const { token } = await r.json();
const transport = new TetherChatTransport({ token: async () => token }); // url: the origin that served tether-ai.js
const chat = new Chat({ transport });
const ai = (window.__ai = { chat, transport, seen: [], states: [], done: false, status: "", error: "" });
chat["~registerMessagesCallback"](() => {
  const a = chat.messages.findLast((m) => m.role === "assistant");
  const t = a ? textOf(a) : "";
  if (ai.seen[ai.seen.length - 1] !== t) ai.seen.push(t);
  document.querySelector("#log").textContent = chat.messages.map((m) => m.role + ": " + textOf(m)).join("\n");
});
ai.send = (text) => {
  ai.done = false;
  chat.sendMessage({ text }).then(() => {
    ai.done = true;
    ai.status = chat.status;
    ai.error = chat.error ? String(chat.error) : "";
  });
  return 1;
};
const t = (window.tether = transport.tether(chat.id));
t.on("state", (s) => { ai.states.push(s.state); const e = document.querySelector("#status"); e.dataset.state = s.state; e.textContent = s.state; });
`

// aiFront serves the test page and its bundle and passes everything else
// (the node's /tether-ai.js and /tether.js, /dev/token, the WebSocket) to
// the node, so the page and the node share an origin.
func aiFront(t *testing.T, nodeAddr string) string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "aitest.js")
	esbuild := exec.Command(filepath.Join("node_modules", ".bin", "esbuild"), "--bundle", "--format=esm", "--platform=browser",
		"--external:/tether-ai.js", "--define:process.env.NODE_ENV=\"production\"", "--log-level=warning", "--outfile="+bundle)
	esbuild.Stdin = strings.NewReader(aiEntry) // resolved from this folder's node_modules
	if out, err := esbuild.CombinedOutput(); err != nil {
		t.Fatalf("esbuild: %v\n%s", err, out)
	}
	target := &url.URL{Scheme: "http", Host: nodeAddr}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{DisableKeepAlives: true}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /aitest.html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(aiPage))
	})
	mux.HandleFunc("GET /aitest.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		http.ServeFile(w, r, bundle)
	})
	mux.Handle("/", proxy)
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)
	return front.URL
}

// TestAISDKBrowser: in Chromium, a Chat over tether-ai.js gets the demo's
// streamed reply as it grows; the connection is dropped mid-reply and the
// same message is finished, every word once, equal to what the server stored.
func TestAISDKBrowser(t *testing.T) {
	needBrowser(t)
	needNode(t)
	if _, err := os.Stat(filepath.Join("node_modules", ".bin", "esbuild")); err != nil {
		t.Fatalf("no esbuild in node_modules (npm ci): %v", err)
	}
	s := startServer(t, append(demoFlags, "--demo-stream-delay", "150ms")...)
	front := aiFront(t, s.addr)
	p := openPage(t, front+"/aitest.html?user=aibrowser")
	p.eval(`__ai.send("hello from chromium")`, nil)
	p.waitJS("two words of the reply", `(__ai.seen.at(-1) || "").split(" ").filter(Boolean).length >= 2`)
	p.eval(`(window.tether.drop(), 1)`, nil)
	p.waitJS("the reply to finish", `__ai.done`)

	var got struct {
		Status, Error, Session, Final, UserID, MessageID string
		Seen, States                                     []string
		Messages                                         int
		Tools                                            int
	}
	p.eval(`(() => {
		const c = __ai.chat, a = c.messages[1];
		return { status: __ai.status, error: __ai.error, session: __ai.transport.sessionId(c.id),
			final: a.parts.filter((x) => x.type === "text").map((x) => x.text).join(""),
			userID: c.messages[0].id, messageID: a.id, seen: __ai.seen, states: __ai.states, messages: c.messages.length,
			tools: a.parts.filter((x) => x.type === "dynamic-tool" && x.state === "output-available").length };
	})()`, &got)
	if got.Status != "ready" || got.Error != "" {
		t.Fatalf("chat status %q, error %q", got.Status, got.Error)
	}
	if !slices.Contains(got.States, "reconnecting") {
		t.Errorf("the drop was not followed by a reconnect: states %q", got.States)
	}
	snap := s.snapshot(s.devToken("aibrowser"), got.Session)
	var reply string
	var userSeq uint64
	for _, m := range snap.Messages {
		if m.Role == "user" && m.Metadata["id"] == got.UserID {
			userSeq = m.Seq
		}
		if m.Role == "agent" && userSeq != 0 && m.Metadata["reply_to"] == float64(userSeq) {
			reply = m.Content
		}
	}
	if reply == "" || got.Final != reply {
		t.Errorf("the chat's reply %q, the server stored %q", got.Final, reply)
	}
	if got.Messages != 2 || got.Tools != 1 || got.MessageID != "a-"+got.UserID {
		t.Errorf("%d messages, %d finished tool parts, assistant id %q; want 2, 1, a-%s", got.Messages, got.Tools, got.MessageID, got.UserID)
	}
	grew := 0
	for i, seen := range got.Seen {
		if seen == "" {
			continue
		}
		grew++
		if !strings.HasPrefix(reply, seen) || i > 0 && !strings.HasPrefix(seen, got.Seen[i-1]) {
			t.Errorf("shown %q (after %q): not a growing prefix of %q", seen, got.Seen[max(i-1, 0)], reply)
		}
	}
	if grew < 3 {
		t.Errorf("the reply was shown %d times while it streamed, want it to grow: %q", grew, got.Seen)
	}
	p.screenshot("aisdk")
}
