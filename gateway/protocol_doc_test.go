package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tether-dev/tether/gateway/wire"
)

// TestProtocolDoc keeps gateway/PROTOCOL.md in step with the wire
// package: every frame type, error code, close code, reason and role is
// documented, and no link leaves the repository (relative links point at
// files that exist, anchors at headings of the document).
func TestProtocolDoc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := []string{
		wire.TypeHello, wire.TypeSend, wire.TypeHistory, wire.TypeContext, wire.TypeComplete, wire.TypePing,
		wire.TypeSession, wire.TypeHistoryBatch, wire.TypeMessage, wire.TypeAck, wire.TypeDelta,
		wire.TypeCompleted, wire.TypePong, wire.TypeError,
		wire.CodeUnauthorized, wire.CodeBadRequest, wire.CodeTooLarge, wire.CodeRateLimited,
		wire.CodeReauthRequired, wire.CodeUnavailable, wire.CodeInternal,
		wire.ReasonResumed, wire.ReasonNew, wire.ReasonExpired, wire.ReasonNotFound, wire.ReasonCompleted,
		wire.RoleUser, wire.RoleAgent, wire.RoleTool, wire.RoleSystem,
	}
	for _, n := range names {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("PROTOCOL.md does not mention `%s`", n)
		}
	}
	for _, code := range []int{wire.CloseNormal, wire.CloseUnsupported, wire.CloseInvalidPayload, wire.ClosePolicy,
		wire.CloseTooBig, wire.CloseInternal, wire.CloseRestart, wire.CloseTryAgain, wire.CloseSuperseded, wire.CloseReauth} {
		if !strings.Contains(doc, fmt.Sprintf("| %d |", code)) {
			t.Errorf("PROTOCOL.md's close code table lacks %d", code)
		}
	}

	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(doc, -1) {
		anchors[slug(m[1])] = true
	}
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(doc, -1)
	if len(links) == 0 {
		t.Fatal("no links found: the link check is broken")
	}
	for _, m := range links {
		target := m[1]
		switch {
		case strings.Contains(target, "://") || strings.HasPrefix(target, "//") || strings.HasPrefix(target, "mailto:"):
			t.Errorf("link %q leaves the repository", target)
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				t.Errorf("link %q names no heading", target)
			}
		default:
			path, _, _ := strings.Cut(target, "#")
			abs, err := filepath.Abs(path)
			root, _ := filepath.Abs("..")
			if err != nil || !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("link %q points outside the repository", target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("link %q: %v", target, err)
			}
		}
	}
}

// slug is a heading's anchor as Markdown renderers make it: lower case,
// punctuation dropped, spaces to hyphens.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		case r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
