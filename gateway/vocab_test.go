package gateway

import (
	"testing"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/gateway/wire"
)

// The words the session machine and the engines write are the words the
// protocol shows clients: each is defined once on each side of the wire,
// and this pins the two equal.
func TestVocabularyPinnedToWire(t *testing.T) {
	for _, p := range []struct{ inside, wire string }{
		{machine.ReasonResumed, wire.ReasonResumed},
		{machine.ReasonNew, wire.ReasonNew},
		{machine.ReasonExpired, wire.ReasonExpired},
		{machine.ReasonNotFound, wire.ReasonNotFound},
		{machine.ReasonCompleted, wire.ReasonCompleted},
		{machine.CodeBadRequest, wire.CodeBadRequest},
		{machine.CodeTooLarge, wire.CodeTooLarge},
		{machine.CodeRateLimited, wire.CodeRateLimited},
		{machine.CodeInternal, wire.CodeInternal},
		{machine.CodeUnavailable, wire.CodeUnavailable},
		{engine.RoleUser, wire.RoleUser},
		{engine.RoleAgent, wire.RoleAgent},
		{engine.RoleTool, wire.RoleTool},
		{engine.RoleSystem, wire.RoleSystem},
	} {
		if p.inside != p.wire {
			t.Errorf("%q inside, %q on the wire", p.inside, p.wire)
		}
	}
	for why, code := range map[machine.CloseReason]int{
		machine.CloseCompleted:   wire.CloseNormal,
		machine.CloseSuperseded:  wire.CloseSuperseded,
		machine.CloseShutdown:    wire.CloseRestart,
		machine.CloseInternal:    wire.CloseInternal,
		machine.CloseUnavailable: wire.CloseTryAgain,
	} {
		if got := closeCode(why); got != code {
			t.Errorf("close reason %d is sent as %d, want %d", why, got, code)
		}
	}
}
