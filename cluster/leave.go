package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// leaveConfiguration takes this node out of the committed configuration
// before it goes (its sessions then move to their replicas by a decision
// the cluster committed, not by a failure detector's guess): the leader
// is asked until a configuration without this node is applied here, or
// ctx ends. A node alone has no one to hand over to.
func (c *Cluster) leaveConfiguration(ctx context.Context) error {
	self := c.cfg.Self.ID
	for {
		cfg := c.cons.fsm.current()
		if _, in := cfg.Member(self); !in || len(cfg.Members) == 1 {
			return nil
		}
		var err error
		switch _, leader := c.cons.raft.LeaderWithID(); string(leader) {
		case "":
			err = ErrNoLeader
		case self:
			err = c.letLeave(ctx, self)
		default:
			err = c.call(ctx, string(leader), methodLeave, leaveReq{ID: self}, nil)
		}
		if err != nil {
			c.log.Debug("leave the configuration", "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: leave the configuration: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// letLeave, on the leader, commits a configuration without member id and
// then removes it from Raft's servers.
func (c *Cluster) letLeave(ctx context.Context, id string) error {
	if c.cons.raft.State() != raft.Leader {
		return errors.New("cluster: not the leader")
	}
	c.mu.Lock()
	c.leavers[id] = true
	c.mu.Unlock()
	if err := c.cons.reconcile(); err != nil {
		return err
	}
	if _, in := c.cons.fsm.current().Member(id); in {
		return errors.New("cluster: configuration without the member not committed yet")
	}
	if err := c.cons.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
		return fmt.Errorf("cluster: remove %s from raft: %w", id, err)
	}
	c.log.Info("member left the configuration", "member", id)
	return ctx.Err()
}
