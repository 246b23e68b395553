package actor

import (
	"slices"
	"testing"

	"github.com/tether-dev/tether/actor/machine/machinetest"
)

// The runner carries out every effect the machine can emit: the list is
// read from the machine's source, so a new effect without a case in run
// fails here.
func TestEveryEffectRun(t *testing.T) {
	effs := machinetest.Parse(t, "machine").MethodTypes("isEffect")
	run := machinetest.Parse(t, ".").CaseTypes("run")
	if len(effs) < 15 {
		t.Fatalf("the source scan found effects %v", effs)
	}
	for _, name := range effs {
		if !slices.Contains(run, name) {
			t.Errorf("actor.run has no case for machine.%s", name)
		}
	}
}
