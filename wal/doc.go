// Package wal is Tether's durable store: the per-session log of entries and
// each session's metadata, kept in an embedded Pebble database.
//
// Layout (all keys are bytes; sid is the session id, at most 64 bytes and
// never containing 0x00):
//
//	m<sid>                  session metadata (msgpack Meta)
//	e<sid>\x00<seq BE u64>  one log entry (msgpack Entry)
//	s<sid>\x00<send id>     seq of the user entry a client send id became
//	nalive                  the last time this node was known to be alive
//
// Keying entries by session then big-endian seq makes a session's log one
// contiguous key range: reading the newest N entries touches only those N
// keys, appending never rewrites earlier ones (per-message cost is flat), and
// deleting a session is one DeleteRange.
//
// Every write goes through a single committer goroutine that merges the
// requests waiting at that moment into one Pebble batch and one fsync (group
// commit). It is also the one place that checks the writer fence: a session
// is claimed with an owner epoch, and an append carrying an older epoch, or a
// seq that does not follow the last one, is refused.
//
// The package knows nothing about actors, sockets or the cluster.
package wal
