package cluster

import (
	"errors"
	"fmt"

	"github.com/tether-dev/tether/wal"
)

// catchPage bounds one catch-up or pull shipment.
const catchPage = 256

// catchUp brings replica t up to what every synced replica holds
// (r.shipped), fencing it with this node's epoch: it learns what t holds,
// finds where t's log and this one agree (walking back while t reports
// divergence), and ships the rest from this node's log, in pages. It
// ships at least once, so even a replica that holds everything is fenced.
//
// settle is the configuration the replica was chosen under: once caught
// up, the copy is complete as of it (wal.Header.Settled).
func (r *replicator) catchUp(t string, settle uint64) error {
	var head headResp
	if err := r.c.call(r.c.ctx, t, methodHead, headReq{SID: r.sid}, &head); err != nil {
		return err
	}
	data, err := r.j.local.Load(r.sid)
	if err != nil {
		return err
	}
	sends := map[uint64]string{}
	if err := r.j.local.ScanSends(r.sid, func(id string, seq uint64) { sends[seq] = id }); err != nil {
		return err
	}
	start := uint64(1)
	if head.Found {
		start = min(head.Header.LastSeq, r.shipped) + 1
	}
	step := uint64(8)
	for {
		err := r.shipFrom(t, start, data, sends, settle)
		if !errors.Is(err, wal.ErrDiverged) || start == 1 {
			if err == nil {
				r.setSynced(t, true)
				r.c.stats.catchUps.Add(1)
			}
			return err
		}
		start -= min(step, start-1)
		step *= 2
	}
}

// shipFrom ships this node's entries start..shipped to t.
func (r *replicator) shipFrom(t string, start uint64, data wal.SessionData, sends map[uint64]string, settle uint64) error {
	prevEpoch, err := r.epochAt(start - 1)
	if err != nil {
		return err
	}
	hdr := data.Header
	hdr.LastSeq, hdr.LastEpoch = r.shipped, r.shippedEpoch
	first := true
	for {
		hi := min(start+catchPage, r.shipped+1)
		entries, err := r.j.local.Read(r.sid, start, hi, catchPage, false)
		if err != nil {
			return err
		}
		cp := wal.Copy{
			SessionID: r.sid, Epoch: r.epoch, Owner: r.c.cfg.Self.ID, Prev: start - 1, PrevEpoch: prevEpoch,
			Entries: entries, Header: hdr,
		}
		if hi > r.shipped {
			// The last page: with it the replica holds this node's whole
			// log, which holds everything acknowledged before its epoch.
			cp.Header.Settled = max(cp.Header.Settled, settle)
		}
		if first {
			cp.Context, first = data.Context, false
		}
		for _, e := range entries {
			if id, ok := sends[e.Seq]; ok {
				cp.Sends = append(cp.Sends, wal.Send{ID: id, Seq: e.Seq})
			}
		}
		if err := remoteErr(r.c.call(r.c.ctx, t, methodCopy, cp, nil)); err != nil {
			return err
		}
		if len(entries) == 0 || hi > r.shipped {
			return nil
		}
		start, prevEpoch = hi, entries[len(entries)-1].Epoch
	}
}

// epochAt is the epoch of this node's entry seq (0 for seq 0).
func (r *replicator) epochAt(seq uint64) (uint64, error) {
	if seq == 0 {
		return 0, nil
	}
	es, err := r.j.local.Read(r.sid, seq, seq+1, 1, false)
	if err != nil {
		return 0, err
	}
	if len(es) != 1 || es[0].Metadata[wal.Unreadable] == true {
		return 0, fmt.Errorf("cluster: entry %d of %s is not readable here", seq, r.sid)
	}
	return es[0].Epoch, nil
}
