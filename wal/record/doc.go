// Package record is what the log stores, without the storage: a session's
// entries (Entry), its header (Header, Status), its data (SessionData),
// one atomic append (Batch, Send), the errors the log reports, and the
// msgpack codecs with their guards (every length checked against the
// bytes there before the decoder allocates; values nested at most
// MaxValueDepth levels at the door and MaxReadDepth on the way out).
//
// It is apart from package wal so that code that handles records but
// never stores them (the session machine) does not depend on Pebble and
// what Pebble imports. Package wal names the same types (aliases), so a
// caller of the log needs one import.
//
// The exported surface: Entry (Size, EncodeMsgpack, DecodeMsgpack),
// Header, Status and its values, SessionData, Send, Batch; CorruptError
// and the Err* sentinels; CheckID, MaxIDLen; CheckValue, ValueSize,
// MaxValueDepth, ValueEnvelope, MaxReadDepth; EncodeEntry, DecodeEntry,
// DecodeHeader, Unmarshal; for sending stored entries on without decoding
// them: RawEntry (Size, Decode), View, ViewEntry, ViewHead, Token, Kind and its
// values, ReadToken, SkipValue, StartsMap, ErrNotPlain.
package record
