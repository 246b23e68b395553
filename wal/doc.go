// Package wal is Tether's durable store: the per-session log of entries,
// each session's header and context, kept in an embedded Pebble database.
// The records themselves (Entry, Header, Batch and their codecs) are
// package wal/record's, named here too (records.go).
//
// Layout (all keys are bytes; sid is the session id, at most 64 bytes and
// never containing 0x00):
//
//	m<sid>                  header (msgpack Header: owner, status, window,
//	                        last seq, epoch, and the actor's opaque State)
//	c<sid>                  user and agent context (opaque bytes; written
//	                        only when it changes)
//	e<sid>\x00<seq BE u64>  one log entry (msgpack Entry)
//	s<sid>\x00<send id>     seq of the user entry a client send id became
//	nalive                  the last time this node was known to be alive
//
// Keying entries by session then big-endian seq makes a session's log one
// contiguous key range: reading the newest N entries touches only those N
// keys, appending never rewrites earlier ones, and deleting a session is
// one DeleteRange. The header is small and bounded (server-made values
// only) and the context is written only when it changes, so the cost of an
// append does not grow with the session: per-message cost is flat. The
// header itself is not rewritten by an append that changes only what its
// entries imply (last seq, its epoch, the time): every read of a header
// brings those up to date from the session's last entry (settle.go).
//
// Every write goes through a single committer goroutine that merges the
// requests waiting at that moment into one Pebble batch and one fsync
// (group commit). Appends may be queued without waiting (AppendAsync);
// a session's appends complete in order, and one that fails fails every
// later one of that claim (fail-stop). A batch marked NoSync (a status
// change a crash may lose) joins no fsync of its own; the next synced
// write makes it durable. The committer is also the one place
// that checks the writer fence: a session is claimed with an owner epoch,
// and an append carrying another epoch, or a seq that does not follow the
// last one, is refused.
//
// What clients write is refused at the door unless the log can read it
// back (CheckValue, MaxValueDepth), and the reader never lets a bad record
// make a session unreachable: ownership is checked from the header alone,
// an unreadable entry comes back as a stand-in system entry, and an
// unreadable context as none; each is counted (Stats.Corrupt, OnCorrupt).
//
// Why the actor's State is opaque here: package actor owns its schema (the
// pending tool call, the turns owed), and the store only needs to keep it
// with the header, in the same atomic write.
//
// The package knows nothing about actors, sockets or the cluster.
//
// The exported surface:
//
//   - Log, New, Config: the store. Sessions: Create, CreateAt, Claim,
//     ClaimAt, Release, Header, Load, Read, ReadRaw (the same entries as
//     stored, for a replay that sends them on), SendSeq, ScanSends,
//     ScanHeaders, DeleteSession, Sweep. Writes: Append, AppendAsync.
//     Copies on replicas: Store, Fence. Liveness: MarkAlive, LastAlive.
//     Stats, Close.
//   - Copy, Fenced, ErrDiverged: what an owner ships to a replica, what a
//     fence found, and the refusal that makes the owner ship from further
//     back.
//   - Entry, RawEntry, Header, Batch, Send, SessionData, Status, CorruptError:
//     record's types, aliased; the Status* constants, ErrNotFound and the
//     other sentinels, and the limits MaxIDLen, MaxValueDepth,
//     ValueEnvelope, MaxReadDepth, all record's.
//   - CheckID, CheckValue, ValueSize, Unmarshal, EncodeEntry, DecodeEntry,
//     DecodeHeader: record's functions, named here.
//   - Deletable: the retention rule Sweep applies.
//   - Stats: running totals; Unreadable: the marker of a stand-in entry;
//     FormatVersion: the Pebble format the store is pinned to.
package wal
