package bench

// A real Centrifugo process, the yardstick of issue 20's resume target:
// BenchmarkResume recovers the same number of missed entries from it, in
// the same run, the way its own SDKs do (connect, then subscribe with
// recover from the last offset seen). Centrifugo is not a dependency of
// this module: `make bench-resume` installs the pinned release into bin/
// and points TETHER_BENCH_CENTRIFUGO_BIN at it.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tether-dev/tether/cluster"
)

// centrifugo is one Centrifugo node with its history in memory (its
// default engine), channels that keep 2,000 publications for five
// minutes, and a recovery limit of 2,000 (its default, 300, cannot
// recover 1,000 missed).
type centrifugo struct {
	addr   string // host:port
	secret string // HMAC key of its connection tokens
	apiKey string
	pid    int
}

const centrifugoHistory = 2000

// startCentrifugo runs bin with a config written to a temporary
// directory and waits until its HTTP API answers.
func startCentrifugo(tb testing.TB, bin string) *centrifugo {
	tb.Helper()
	addr, err := cluster.FreeLocalAddr(false)
	if err != nil {
		tb.Fatal(err)
	}
	c := &centrifugo{addr: addr, secret: "bench-secret-bench-secret-bench-secret", apiKey: "bench-api-key"}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := map[string]any{
		"http_server": map[string]any{"address": host, "port": port},
		"client": map[string]any{
			"token":                          map[string]any{"hmac_secret_key": c.secret},
			"recovery_max_publication_limit": centrifugoHistory,
			"allowed_origins":                []string{"*"},
		},
		"http_api": map[string]any{"key": c.apiKey},
		"channel": map[string]any{"without_namespace": map[string]any{
			"history_size":               centrifugoHistory,
			"history_ttl":                "300s",
			"force_recovery":             true,
			"allow_subscribe_for_client": true,
		}},
		"log": map[string]any{"level": "error"},
	}
	dir := tb.TempDir()
	path := filepath.Join(dir, "config.json")
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "centrifugo.log"))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("centrifugo: %v", err)
	}
	c.pid = cmd.Process.Pid
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.api("info", map[string]any{}); err == nil {
			return c
		} else if time.Now().After(deadline) {
			out, _ := os.ReadFile(logf.Name())
			tb.Fatalf("centrifugo did not start: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpu is the process's user+system CPU time so far.
func (c *centrifugo) cpu() time.Duration {
	_, sec, _ := procStat(c.pid)
	return time.Duration(sec * float64(time.Second))
}

func (c *centrifugo) url() string { return "ws://" + c.addr + "/connection/websocket" }

// api calls a method of the server API and returns its result.
func (c *centrifugo) api(method string, params any) (json.RawMessage, error) {
	body, _ := json.Marshal(params)
	req, err := http.NewRequest(http.MethodPost, "http://"+c.addr+"/api/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", c.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Error  *struct{ Message string } `json:"error"`
		Result json.RawMessage           `json:"result"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("centrifugo %s: %s: %s", method, resp.Status, data)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("centrifugo %s: %s", method, r.Error.Message)
	}
	return r.Result, nil
}

// fill publishes n entries shaped as Tether's echo session stores them
// (the same JSON a Tether client receives) and returns the stream's
// epoch and last offset.
func (c *centrifugo) fill(tb testing.TB, channel string, n int) (epoch string, last uint64) {
	tb.Helper()
	for i := range n {
		role, content := "user", fmt.Sprintf("message number %d of the benchmark", i/2)
		if i%2 == 1 {
			role, content = "assistant", "echo: "+content
		}
		entry := map[string]any{"seq": i + 1, "role": role, "content": content,
			"timestamp": float64(time.Now().UnixMicro()) / 1e6, "metadata": map[string]any{}}
		if _, err := c.api("publish", map[string]any{"channel": channel, "data": entry}); err != nil {
			tb.Fatal(err)
		}
	}
	res, err := c.api("history", map[string]any{"channel": channel, "limit": 0})
	if err != nil {
		tb.Fatal(err)
	}
	var h struct {
		Epoch  string `json:"epoch"`
		Offset uint64 `json:"offset"`
	}
	if err := json.Unmarshal(res, &h); err != nil {
		tb.Fatal(err)
	}
	return h.Epoch, h.Offset
}

// token is a connection token for user, signed as Centrifugo checks it
// (HS256, the user in sub).
func (c *centrifugo) token(user string) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"sub": user, "exp": time.Now().Add(24 * time.Hour).Unix()})
	msg := head + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, []byte(c.secret))
	mac.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(mac.Sum(nil))
}

// centrifugoRecover dials, connects, subscribes to channel with recovery
// from offset from of epoch, and returns how many publications the
// subscribe reply held, each one's data decoded as far as Tether's
// client decodes a message (json.RawMessage).
func centrifugoRecover(url, tok, channel, epoch string, from uint64) (int, error) {
	ws, resp, err := smallDialer.Dial(url, nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	defer ws.Close()
	if err := ws.WriteJSON(map[string]any{"id": 1, "connect": map[string]any{"token": tok, "name": "bench"}}); err != nil {
		return 0, err
	}
	if data, err := readCentrifugoReply(ws, 1); err != nil {
		return 0, err
	} else if bytes.Contains(data, []byte(`"error":`)) {
		return 0, fmt.Errorf("centrifugo connect: %s", data)
	}
	sub := map[string]any{"channel": channel, "recover": true, "offset": from, "epoch": epoch}
	if err := ws.WriteJSON(map[string]any{"id": 2, "subscribe": sub}); err != nil {
		return 0, err
	}
	data, err := readCentrifugoReply(ws, 2)
	if err != nil {
		return 0, err
	}
	var r struct {
		Error     json.RawMessage `json:"error"`
		Subscribe struct {
			Recovered    bool `json:"recovered"`
			Publications []struct {
				Data   json.RawMessage `json:"data"`
				Offset uint64          `json:"offset"`
			} `json:"publications"`
		} `json:"subscribe"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, err
	}
	if r.Error != nil || !r.Subscribe.Recovered {
		return 0, fmt.Errorf("centrifugo did not recover: %s", data)
	}
	return len(r.Subscribe.Publications), nil
}

// readCentrifugoReply reads frames until the reply to command id. Its
// JSON protocol may put several replies in one frame, one per line, and
// writes the id first: the line is found without decoding it twice.
func readCentrifugoReply(ws *websocket.Conn, id int) ([]byte, error) {
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	prefix := fmt.Appendf(nil, `{"id":%d,`, id)
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			if bytes.HasPrefix(line, prefix) {
				return line, nil
			}
		}
	}
}
