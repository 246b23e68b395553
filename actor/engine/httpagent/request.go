package httpagent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"
)

// Sign is the Tether-Signature header of body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// post sends body until the endpoint answers 200, retrying what the
// protocol retries while ctx lasts. A request that is not replayable (a
// tool call not declared idempotent) is retried only when it cannot have
// reached the endpoint: nothing was written, or it said 429.
func (a *Agent) post(ctx context.Context, key string, body []byte, replayable bool) (*http.Response, error) {
	var last error // the previous attempt's failure, kept for the timeout's error
	for attempt := 0; ; attempt++ {
		resp, wrote, err := a.try(ctx, key, body, replayable)
		if err == nil && resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		var retryAfter time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			if last != nil {
				return nil, fmt.Errorf("%w (last: %w)", context.Cause(ctx), last)
			}
			return nil, err
		case err != nil:
			if wrote && !replayable {
				return nil, fmt.Errorf("%w (not sent again: the call is not idempotent and may have reached the agent)", err)
			}
		default:
			err = statusError(resp)
			retryable := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
			if !retryable || (!replayable && resp.StatusCode != http.StatusTooManyRequests) {
				if retryable {
					return nil, fmt.Errorf("%w (not sent again: the call is not idempotent and may have reached the agent)", err)
				}
				return nil, err
			}
			retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		wait := a.backoff(attempt, retryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, fmt.Errorf("%w: gave up after %d attempts (the next in %v would be past it): %w",
				ErrTimeout, attempt+1, wait.Round(time.Millisecond), err)
		}
		a.cfg.Logger.Warn("agent request failed; retrying", "key", key, "attempt", attempt+1, "in", wait, "err", err)
		last = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %w)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// try makes one attempt; wrote says whether the request went out.
func (a *Agent) try(ctx context.Context, key string, body []byte, replayable bool) (*http.Response, bool, error) {
	wrote := false
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote = true }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, a.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, false, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Tether-Signature", Sign(a.cfg.Secret, body, time.Now()))
	if !replayable {
		// net/http resends a request with an Idempotency-Key by itself
		// when a reused connection breaks; without GetBody it cannot.
		req.GetBody = nil
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, wrote, fmt.Errorf("POST %s: %w", a.cfg.URL, err)
	}
	return resp, true, nil
}

// statusError reads a little of a refused answer for the error, and
// closes it.
func statusError(resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		return fmt.Errorf("%w %s", ErrStatus, resp.Status)
	}
	return fmt.Errorf("%w %s: %s", ErrStatus, resp.Status, msg)
}

// backoff is the wait before retry attempt+1: full jitter, or at least
// what Retry-After asked.
func (a *Agent) backoff(attempt int, retryAfter time.Duration) time.Duration {
	limit := a.cfg.BackoffMax
	if attempt < 30 {
		limit = min(limit, a.cfg.BackoffBase<<attempt)
	}
	wait := rand.N(limit + 1)
	if retryAfter > 0 {
		// A little jitter on top, so that sessions told the same moment
		// do not all come back at once.
		wait = retryAfter + rand.N(a.cfg.BackoffBase+1)
	}
	return wait
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or
// unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// readLines feeds each line of an NDJSON answer to onLine until it says
// the final line came; an answer that ends or breaks before is ErrNoFinal.
func readLines(r io.Reader, maxLine int, onLine func(line) (bool, error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	// cut: the token is what was left when the answer ended, with no
	// newline after it — a line cut off, unless it happens to be whole.
	cut := false
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		cut = atEOF && tok != nil && bytes.IndexByte(data[:adv], '\n') < 0
		return adv, tok, err
	})
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			if cut {
				return fmt.Errorf("%w: the answer was cut off in line %d: %.80q", ErrNoFinal, n, raw)
			}
			return fmt.Errorf("%w: line %d is not a JSON object (%v): %.80q", ErrBadLine, n, err, raw)
		}
		final, err := onLine(l)
		if err != nil {
			if errors.Is(err, ErrBadLine) {
				return fmt.Errorf("line %d: %w", n, err)
			}
			return err
		}
		if final {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: line %d is longer than %d bytes", ErrBadLine, n+1, maxLine)
		}
		return fmt.Errorf("%w: after %d lines: %w", ErrNoFinal, n, err)
	}
	return fmt.Errorf("%w (%d lines)", ErrNoFinal, n)
}
