package cluster

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"
)

// Configuration is a committed cluster configuration: the numbered list
// of members that own and hold sessions. Number is the Raft index of the
// entry that committed it, so numbers are unique and ordered; placement
// is computed over Members only, never over a node's gossip view.
type Configuration struct {
	Number   uint64     `msgpack:"n"`
	Replicas int        `msgpack:"r"`
	Members  []NodeMeta `msgpack:"m"` // sorted by ID
}

// IDs are the members' ids, sorted.
func (c Configuration) IDs() []string {
	ids := make([]string, len(c.Members))
	for i, m := range c.Members {
		ids[i] = m.ID
	}
	return ids
}

// Member returns the metadata of member id.
func (c Configuration) Member(id string) (NodeMeta, bool) {
	i, ok := slices.BinarySearchFunc(c.Members, id, func(m NodeMeta, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return NodeMeta{}, false
	}
	return c.Members[i], true
}

// sameAs reports whether c and o name the same members with the same
// metadata and replica count (their numbers aside).
func (c Configuration) sameAs(o Configuration) bool {
	return c.Replicas == o.Replicas && slices.Equal(c.Members, o.Members)
}

// Epoch bits: an owner epoch is its configuration's number shifted left
// by epochShift, plus a count of the claims of that owner under that
// configuration. Only one node owns a session under a configuration, so
// an epoch names one owner, and a newer configuration's epochs are above
// every older one's.
const epochShift = 20

// epochConfig is the number of the configuration an epoch was taken under.
func epochConfig(epoch uint64) uint64 { return epoch >> epochShift }

// configCommand is the one kind of Raft log entry: the next configuration.
type configCommand struct {
	Replicas int        `msgpack:"r"`
	Members  []NodeMeta `msgpack:"m"`
}

// fsm is the Raft state machine: every configuration ever committed, in
// order (a claim needs the write sets of the configurations since the
// newest entry of a session was written; each is a few hundred bytes).
type fsm struct {
	mu      sync.RWMutex
	history []Configuration
	places  map[string]*Placement // member set → placement, shared by configurations
	placeCf PlacementConfig
	changed func(Configuration) // called (outside mu) after each new configuration
}

func newFSM(pc PlacementConfig, changed func(Configuration)) *fsm {
	return &fsm{places: map[string]*Placement{}, placeCf: pc, changed: changed}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd configCommand
	if err := msgpack.Unmarshal(l.Data, &cmd); err != nil {
		return fmt.Errorf("cluster: decode configuration command %d: %w", l.Index, err)
	}
	members := slices.Clone(cmd.Members)
	slices.SortFunc(members, func(a, b NodeMeta) int { return strings.Compare(a.ID, b.ID) })
	cfg := Configuration{Number: l.Index, Replicas: cmd.Replicas, Members: members}
	f.mu.Lock()
	if n := len(f.history); n > 0 && f.history[n-1].Number >= cfg.Number {
		f.mu.Unlock()
		return nil // replayed after a restore
	}
	f.history = append(f.history, cfg)
	f.mu.Unlock()
	if f.changed != nil {
		f.changed(cfg)
	}
	return nil
}

// current is the newest configuration (Number 0: none yet).
func (f *fsm) current() Configuration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.history) == 0 {
		return Configuration{}
	}
	return f.history[len(f.history)-1]
}

// since returns the configuration in force at n (the last one numbered n
// or less) and every later one, oldest first.
func (f *fsm) since(n uint64) []Configuration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(f.history, n, func(c Configuration, n uint64) int {
		switch {
		case c.Number < n:
			return -1
		case c.Number > n:
			return 1
		}
		return 0
	})
	// The configuration in force at n is the last one numbered <= n.
	if i < len(f.history) && f.history[i].Number == n {
		return slices.Clone(f.history[i:])
	}
	return slices.Clone(f.history[max(i-1, 0):])
}

// placement is the placement over cfg's members.
func (f *fsm) placement(cfg Configuration) *Placement {
	key := strings.Join(cfg.IDs(), "\x00")
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.places[key]
	if !ok {
		p = NewPlacement(cfg.IDs(), f.placeCf)
		f.places[key] = p
	}
	return p
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := msgpack.Marshal(f.history)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode configuration history: %w", err)
	}
	return fsmSnapshot(b), nil
}

// Restore implements raft.FSM.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var h []Configuration
	if err := msgpack.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("cluster: decode configuration history: %w", err)
	}
	f.mu.Lock()
	f.history = h
	f.mu.Unlock()
	if len(h) > 0 && f.changed != nil {
		f.changed(h[len(h)-1])
	}
	return nil
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}
