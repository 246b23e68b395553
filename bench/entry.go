package bench

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/tether-dev/tether/gateway/wire"
)

// entryInfo is what the Verifier keeps of one entry.
type entryInfo struct {
	seq     uint64
	hash    uint64
	role    string
	id      string // user: the send id
	replyTo uint64
	callID  string // tool
	status  string // tool
	// sketch is a short text of the entry, for a violation's detail.
	sketch string
}

// info summarizes m: the fields the checks use and a hash of the rest.
func info(m wire.Message) entryInfo {
	e := entryInfo{seq: m.Seq, role: m.Role}
	e.id, _ = m.Metadata["id"].(string)
	e.replyTo = metaSeq(m.Metadata["reply_to"])
	e.callID, _ = m.Metadata["call_id"].(string)
	e.status, _ = m.Metadata["status"].(string)
	h := fnv.New64a()
	md, _ := json.Marshal(m.Metadata) // map keys are sorted: canonical
	fmt.Fprintf(h, "%s\x00%s\x00%x\x00", m.Role, m.Content, math.Float64bits(m.Timestamp))
	h.Write(md)
	e.hash = h.Sum64()
	e.sketch = fmt.Sprintf("%.40q at %.6f %.120s", m.Content, m.Timestamp, md)
	return e
}

// metaSeq reads a seq out of decoded JSON metadata.
func metaSeq(v any) uint64 {
	switch n := v.(type) {
	case float64:
		if n > 0 {
			return uint64(n)
		}
	case json.Number:
		u, _ := n.Int64()
		if u > 0 {
			return uint64(u)
		}
	case int:
		if n > 0 {
			return uint64(n)
		}
	case uint64:
		return n
	case int64:
		if n > 0 {
			return uint64(n)
		}
	}
	return 0
}
