package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-dev/tether/gateway/web"
	"github.com/tether-dev/tether/gateway/wire"
	"github.com/tether-dev/tether/wal"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", s.handleWS)
	mux.HandleFunc("GET /v1/sessions/{id}", s.handleSnapshot)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.cfg.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /dev/token", s.handleDevToken)
	mux.HandleFunc("GET /{$}", serveFile("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /tether.js", serveFile("tether.js", "text/javascript; charset=utf-8"))
	return mux
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		writeError(w, http.StatusUnauthorized, "a Bearer token is required")
		return
	}
	id, err := Verify(s.cfg.Secret, strings.TrimSpace(tok), s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	snap, err := s.cfg.Backend.Snapshot(r.PathValue("id"), id.UserID)
	if errors.Is(err, wal.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no such session")
		return
	}
	if err != nil {
		s.log.Error("snapshot", "err", err)
		writeError(w, http.StatusInternalServerError, "could not read the session")
		return
	}
	m := snap.Meta
	out := wire.Snapshot{
		SessionID: m.SessionID, Status: string(snap.Status), LastSeq: m.LastSeq,
		CreatedAt: unix(m.CreatedAt), LastActiveAt: unix(m.LastActiveAt),
		Context: nonNil(m.Context), AgentContext: nonNil(m.AgentContext),
		PendingToolCall: PendingOf(m.Pending), Sensitive: m.Sensitive,
		Messages: make([]wire.Message, len(snap.Messages)),
	}
	if !m.ExpiresAt.IsZero() {
		e := unix(m.ExpiresAt)
		out.ExpiresAt = &e
	}
	for i, e := range snap.Messages {
		out.Messages[i] = MessageOf(e, "")
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleDevToken(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.DevTokens {
		writeError(w, http.StatusNotFound, "dev tokens are off (start with --dev-tokens)")
		return
	}
	var body struct {
		User string `json:"user"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "body must be {\"user\":\"name\"}")
		return
	}
	// A dev token is a fresh interactive login: auth_time is now.
	tok, err := Issue(s.cfg.Secret, TokenSpec{User: body.User}, s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": tok})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// serveFile answers with one of the embedded browser files.
func serveFile(name, contentType string) http.HandlerFunc {
	body, err := web.Files.ReadFile(name)
	if err != nil {
		panic("gateway: missing embedded file " + name) // a build without it is broken
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}
