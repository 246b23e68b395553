package actor

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/actor/actortest"
	"github.com/tether-dev/tether/wal"
)

func TestConfigDefaults(t *testing.T) {
	if err := (&Config{}).setDefaults(); err == nil {
		t.Fatal("a Config without a Journal was accepted")
	}
	j := (*wal.Log)(nil)
	c := Config{Journal: j}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Store == nil || c.Window != 5*time.Minute || c.Retention != time.Hour || c.IdleTimeout != 2*time.Minute ||
		c.ReplayLimit != 50 || c.TailEntries != 64 || c.TailBytes != 256<<10 || c.MaxBatchBytes != 1<<20 ||
		c.MaxTurns != 64 || c.MaxContextBytes != 64<<10 || c.MaxSessionsPerUser != 100 || c.MailboxSize != 16 ||
		c.TickInterval != time.Second || c.SweepInterval != time.Minute || c.Clock == nil || c.NewID == nil ||
		c.HibernateAfter != 10*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	if id := c.NewID(); len(id) != 26 || wal.CheckID(id) != nil {
		t.Fatalf("NewID = %q", id)
	}
	// Derived defaults: the tail holds at least a replay; ticks come often
	// enough for short windows; the sweep follows the retention, and a
	// negative interval (not zero) turns it off.
	c = Config{Journal: j, ReplayLimit: 200, Window: time.Second, IdleTimeout: time.Minute, Retention: time.Second, MaxSessionsPerUser: -1}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.TailEntries != 200 || c.TickInterval != 100*time.Millisecond || c.SweepInterval != 250*time.Millisecond || c.MaxSessionsPerUser != -1 {
		t.Fatalf("derived defaults = %+v", c)
	}
	c = Config{Journal: j, SweepInterval: -1, Window: time.Millisecond}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.SweepInterval != -1 || c.TickInterval != 5*time.Millisecond {
		t.Fatalf("sweep %v tick %v", c.SweepInterval, c.TickInterval)
	}
}

// The test clock is an actor.Clock.
var _ Clock = (*actortest.ManualClock)(nil)
