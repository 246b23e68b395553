package machine

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The machine is pure: nothing it depends on, however indirectly, can
// open a connection. (The store's Pebble pulls in net/http through its
// error reporting, which is why the records live apart from it, in
// wal/record.)
func TestMachineImportsNoNetwork(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs go list: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/tether-dev/tether/wal/record") {
		t.Fatalf("go list -deps found no wal/record: %v", deps)
	}
	for _, d := range deps {
		if d == "net" || strings.HasPrefix(d, "net/") || strings.Contains(d, "pebble") {
			t.Errorf("the machine depends on %s", d)
		}
	}
}
