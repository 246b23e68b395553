package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tether-dev/tether/actor"
	"github.com/tether-dev/tether/actor/machine"
	"github.com/tether-dev/tether/wal"
)

// serve answers the calls other nodes make on this one.
func (c *Cluster) serve(ctx context.Context, from string, method Op, body msgpack.RawMessage) (any, error) {
	switch method {
	case methodHead:
		var req headReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		h, err := c.cfg.Store.Header(req.SID)
		if errors.Is(err, wal.ErrNotFound) || errors.Is(err, wal.ErrCorrupt) || errors.Is(err, wal.ErrBadID) {
			return headResp{}, nil
		}
		if err != nil {
			return nil, err
		}
		return headResp{Found: true, Header: h}, nil
	case methodFence:
		var req fenceReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		if n, other := c.overtaken(req.SID, req.Epoch, req.Owner); other != "" {
			return nil, WithCode(codeUnavailable, fmt.Errorf("cluster: a claim of %s by %s under configuration %d is overtaken: configuration %d gives it to %s", req.SID, req.Owner, epochConfig(req.Epoch), n, other))
		}
		f, err := c.cfg.Store.Fence(ctx, req.SID, req.Epoch, req.Owner)
		if errors.Is(err, wal.ErrStaleEpoch) {
			return fenceResp{Stale: max(f.PrevEpoch, f.Header.Epoch)}, nil
		}
		if err != nil {
			return nil, err
		}
		return fenceResp{Found: f.Found, Header: f.Header}, nil
	case methodStatus:
		return statusResp{Applied: c.cons.raft.AppliedIndex(), Config: c.cons.fsm.current().Number}, nil
	case methodReadIndex:
		if c.cons.raft.State() != raft.Leader {
			return nil, errors.New("cluster: not the leader")
		}
		i, err := c.cons.verified()
		if err != nil {
			return nil, err
		}
		return readIndexResp{Index: i}, nil
	case methodAdopt:
		var req headReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		if !c.Owns(req.SID) {
			return nil, WithCode(codeUnavailable, fmt.Errorf("cluster: %s does not own %s", c.cfg.Self.ID, req.SID))
		}
		return struct{}{}, c.journal.rereplicate(ctx, req.SID)
	case methodLeave:
		var req leaveReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		return struct{}{}, c.letLeave(ctx, req.ID)
	case methodReport:
		var req reportReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		c.cons.heard(from, req.About)
		return struct{}{}, nil
	case methodRead:
		var req readReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		return c.serveRead(req)
	case methodCopy:
		var cp wal.Copy
		if err := msgpack.Unmarshal(body, &cp); err != nil {
			return nil, err
		}
		if err := c.cfg.Store.Store(ctx, cp); err != nil {
			return nil, withWalCode(err)
		}
		return struct{}{}, nil
	case methodSnapshot:
		var req snapshotReq
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		reg, err := c.registry()
		if err != nil {
			return nil, err
		}
		snap, err := reg.Snapshot(ctx, req.SID, req.User, req.AuthTime)
		if err != nil {
			return nil, withActorCode(err)
		}
		return snapshotResp{Snap: snap}, nil
	}
	return nil, fmt.Errorf("cluster: unknown method %q from %s", method, from)
}

func (c *Cluster) serveRead(req readReq) (readResp, error) {
	d, err := c.cfg.Store.Load(req.SID)
	if err != nil {
		return readResp{}, withWalCode(err)
	}
	resp := readResp{Data: d}
	hi := min(req.Hi, d.Header.LastSeq+1)
	if req.Limit > 0 && req.Lo < hi {
		if resp.Entries, err = c.cfg.Store.Read(req.SID, req.Lo, hi, req.Limit, false); err != nil {
			return readResp{}, err
		}
	}
	if req.Sends && len(resp.Entries) > 0 {
		lo, last := resp.Entries[0].Seq, resp.Entries[len(resp.Entries)-1].Seq
		err := c.cfg.Store.ScanSends(req.SID, func(id string, seq uint64) {
			if seq >= lo && seq <= last {
				resp.Sends = append(resp.Sends, wal.Send{ID: id, Seq: seq})
			}
		})
		if err != nil {
			return readResp{}, err
		}
	}
	return resp, nil
}

// registry is the attached session registry.
func (c *Cluster) registry() (*actor.Registry, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.reg == nil || c.left {
		return nil, WithCode(codeClosed, errors.New("cluster: this node serves no sessions"))
	}
	return c.reg, nil
}

// withWalCode gives a store error the link code the caller maps back.
func withWalCode(err error) error {
	switch {
	case errors.Is(err, wal.ErrStaleEpoch):
		return WithCode(codeStaleEpoch, err)
	case errors.Is(err, wal.ErrSeqGap):
		return WithCode(codeSeqGap, err)
	case errors.Is(err, wal.ErrDiverged):
		return WithCode(codeDiverged, err)
	case errors.Is(err, wal.ErrNotFound):
		return WithCode(codeNotFound, err)
	}
	return err
}

// withActorCode gives a registry error the link code the caller maps
// back with actorErr.
func withActorCode(err error) error {
	var nr *machine.NotResumedError
	switch {
	case errors.As(err, &nr):
		return WithCode("not_resumed:"+nr.Reason, err)
	case errors.Is(err, actor.ErrNotFound):
		return WithCode(codeNotFound, err)
	case errors.Is(err, machine.ErrReauthRequired):
		return WithCode(codeReauth, err)
	case errors.Is(err, machine.ErrBadLastSeq):
		return WithCode(codeBadLastSeq, err)
	case errors.Is(err, actor.ErrTooManySessions):
		return WithCode(codeTooMany, err)
	case errors.Is(err, machine.ErrTooManyConns):
		return WithCode(codeTooManyConn, err)
	case errors.Is(err, wal.ErrExists):
		return WithCode(codeExists, err)
	case errors.Is(err, actor.ErrClosed):
		return WithCode(codeClosed, err)
	case retried(err):
		return WithCode(codeUnavailable, err)
	}
	return err
}

// actorErr maps a link code back to the registry's error.
func actorErr(code, msg string) error {
	if reason, ok := cutPrefix(code, "not_resumed:"); ok {
		return &machine.NotResumedError{Reason: reason}
	}
	switch code {
	case codeNotFound:
		return actor.ErrNotFound
	case codeReauth:
		return machine.ErrReauthRequired
	case codeBadLastSeq:
		return machine.ErrBadLastSeq
	case codeTooMany:
		return actor.ErrTooManySessions
	case codeTooManyConn:
		return machine.ErrTooManyConns
	case codeExists:
		return wal.ErrExists
	case codeClosed, codeUnavailable:
		return ErrUnavailable
	}
	return fmt.Errorf("cluster: the owner refused: %s", msg)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}
