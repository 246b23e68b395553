package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// verifyFor is how long a leader's confirmed leadership is reused for
// read-index requests: a takeover storm of thousands of claims costs a
// heartbeat round every verifyFor, not one per claim.
const verifyFor = 50 * time.Millisecond

// fresh is freshOnce, waiting out an election: a node that meets no
// leader (the old one died or stepped down and the next is being elected)
// or a new leader still catching up asks again until leaderWait has
// passed. A send that wakes a sleeping session meanwhile is acked late
// instead of its client being told to reconnect; a node cut off from the
// majority still answers unavailable, leaderWait later.
func (cs *consensus) fresh(ctx context.Context) (Configuration, error) {
	deadline := time.Now().Add(cs.leaderWait)
	for {
		cfg, err := cs.freshOnce(ctx)
		electing := errors.Is(err, ErrNoLeader) || errors.Is(err, ErrCatchingUp)
		if !electing || !time.Now().Before(deadline) {
			return cfg, err
		}
		select {
		case <-ctx.Done():
			return cfg, err
		case <-time.After(leaderPoll):
		}
	}
}

// leaderPoll is how often fresh asks again while it waits for a leader.
const leaderPoll = 20 * time.Millisecond

// freshOnce is the committed configuration as of now, Raft's read-index way:
// the leader confirms it still leads (a round of heartbeats, shared
// across claims for verifyFor) and says how far it has committed, and
// this node waits until its FSM has applied that much (not just Raft's
// AppliedIndex: see fsmBehind). A follower that has
// just heard from the leader again may not yet know the newest
// configuration; a claim under an older one could serve a stale copy.
func (cs *consensus) freshOnce(ctx context.Context) (Configuration, error) {
	if _, err := cs.committed(); err != nil {
		return Configuration{}, err
	}
	var index uint64
	if cs.raft.State() == raft.Leader {
		var err error
		if index, err = cs.verified(); err != nil {
			return Configuration{}, err
		}
	} else {
		_, leader := cs.raft.LeaderWithID()
		var resp readIndexResp
		if err := cs.c.call(ctx, string(leader), methodReadIndex, struct{}{}, &resp); err != nil {
			return Configuration{}, fmt.Errorf("%w: read index from %s: %v", ErrNoLeader, leader, err)
		}
		index = resp.Index
	}
	deadline := time.Now().Add(time.Second)
	for {
		behind := cs.raft.AppliedIndex() < index
		if !behind {
			var err error
			if behind, err = cs.fsmBehind(index); err != nil {
				return Configuration{}, fmt.Errorf("%w: %v", ErrCatchingUp, err)
			}
		}
		if !behind {
			break
		}
		if time.Now().After(deadline) {
			return Configuration{}, fmt.Errorf("%w: applied %d of %d (configuration %d)", ErrCatchingUp, cs.raft.AppliedIndex(), index, cs.fsm.current().Number)
		}
		select {
		case <-ctx.Done():
			return Configuration{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return cs.committed()
}

// verified confirms this node leads and returns its commit index.
func (cs *consensus) verified() (uint64, error) {
	cs.mu.Lock()
	if time.Since(cs.verifiedAt) < verifyFor {
		i := cs.verifiedIndex
		cs.mu.Unlock()
		return i, nil
	}
	cs.mu.Unlock()
	cs.verifyMu.RLock()
	defer cs.verifyMu.RUnlock()
	if cs.closing {
		return 0, fmt.Errorf("%w: %v", ErrNoLeader, raft.ErrRaftShutdown)
	}
	index := cs.raft.CommitIndex()
	if err := cs.raft.VerifyLeader().Error(); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	cs.mu.Lock()
	cs.verifiedAt, cs.verifiedIndex = time.Now(), index
	cs.mu.Unlock()
	return index, nil
}

type readIndexResp struct {
	Index uint64 `msgpack:"i"`
}
