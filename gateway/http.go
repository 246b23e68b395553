package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/web"
	"github.com/tether-dev/tether/gateway/wire"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", s.handleWS)
	if s.cfg.Link != nil {
		mux.Handle("/v1/link", s.cfg.Link)
		mux.Handle("/v1/raft", s.cfg.Link)
	}
	mux.HandleFunc("GET /v1/sessions/{id}", s.cors(s.handleSnapshot))
	mux.HandleFunc("OPTIONS /v1/sessions/{id}", s.cors(nil))
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
	mux.HandleFunc("POST /dev/token", s.cors(s.handleDevToken))
	mux.HandleFunc("OPTIONS /dev/token", s.cors(nil))
	mux.HandleFunc("GET /{$}", serveFile("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /tether.js", serveFile("tether.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /tether-ai.js", serveFile("tether-ai.js", "text/javascript; charset=utf-8"))
	return mux
}

// originAllowed is the WebSocket's origin check and the CORS rule: no
// Origin (not a browser), the node's own host, or one of AllowedOrigins.
// Tokens travel in the hello, never in cookies, but a page of a foreign
// origin still has no business driving a user's sessions.
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if u, err := url.Parse(origin); err == nil && strings.EqualFold(u.Host, r.Host) {
		return true
	}
	return slices.ContainsFunc(s.cfg.AllowedOrigins, func(o string) bool {
		return o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin)
	})
}

// cors answers preflights and marks answers to allowed origins; h nil is
// a preflight-only route.
func (s *Server) cors(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" {
			if !s.originAllowed(r) {
				writeError(w, http.StatusForbidden, "origin not allowed (see --allowed-origins)")
				return
			}
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h(w, r)
	}
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		writeError(w, http.StatusUnauthorized, "a Bearer token is required")
		return
	}
	id, err := s.tokens.verify(strings.TrimSpace(tok), s.cfg.Now())
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	snap, err := s.cfg.Backend.Snapshot(r.Context(), r.PathValue("id"), id.UserID, id.AuthTime)
	switch {
	case errors.Is(err, actor.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such session")
		return
	case errors.Is(err, machine.ErrReauthRequired):
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "this session is sensitive: log in again to see it", "code": wire.CodeReauthRequired})
		return
	case errors.Is(err, ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "the session's owner cannot be reached; retry")
		return
	case err != nil:
		s.log.Error("snapshot", "err", err)
		writeError(w, http.StatusInternalServerError, "could not read the session")
		return
	}
	writeJSON(w, http.StatusOK, snapshotJSON(snap))
}

func snapshotJSON(snap actor.Snapshot) wire.Snapshot {
	h := snap.Header
	out := wire.Snapshot{
		SessionID: h.SessionID, Status: string(snap.Status), LastSeq: h.LastSeq,
		CreatedAt: unix(h.CreatedAt), LastActiveAt: unix(h.LastActiveAt),
		Context: nonNil(snap.Context), AgentContext: nonNil(snap.AgentContext),
		PendingToolCall: PendingOf(snap.Pending), Sensitive: h.Sensitive,
		Messages: make([]wire.Message, len(snap.Messages)),
	}
	if !h.ExpiresAt.IsZero() {
		e := unix(h.ExpiresAt)
		out.ExpiresAt = &e
	}
	for i, e := range snap.Messages {
		out.Messages[i] = MessageOf(e, "")
	}
	return out
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
	s.log.Info("dev token issued", "user", body.User, "remote", r.RemoteAddr)
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
