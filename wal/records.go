package wal

import "github.com/tether-dev/tether/wal/record"

// The records the log stores are package wal/record's, which has no
// storage code (so that the session machine can use them without
// Pebble). They are named here too, so a caller of the log needs one
// import.

type (
	Status       = record.Status
	Entry        = record.Entry
	RawEntry     = record.RawEntry
	Header       = record.Header
	SessionData  = record.SessionData
	Send         = record.Send
	Batch        = record.Batch
	CorruptError = record.CorruptError
)

// Lifecycle statuses (record.Status).
const (
	StatusActive      = record.StatusActive
	StatusInterrupted = record.StatusInterrupted
	StatusExpired     = record.StatusExpired
	StatusCompleted   = record.StatusCompleted
)

// Limits (record's).
const (
	MaxIDLen      = record.MaxIDLen
	MaxValueDepth = record.MaxValueDepth
	ValueEnvelope = record.ValueEnvelope
	MaxReadDepth  = record.MaxReadDepth
)

// Sentinel errors callers branch on: the records' own.
var (
	ErrNotFound     = record.ErrNotFound
	ErrExists       = record.ErrExists
	ErrStaleEpoch   = record.ErrStaleEpoch
	ErrNotClaimed   = record.ErrNotClaimed
	ErrSeqGap       = record.ErrSeqGap
	ErrCorrupt      = record.ErrCorrupt
	ErrClosed       = record.ErrClosed
	ErrBadID        = record.ErrBadID
	ErrValueTooDeep = record.ErrValueTooDeep
	ErrValueType    = record.ErrValueType
)

// CheckID is record.CheckID.
func CheckID(sid string) error { return record.CheckID(sid) }

// CheckValue is record.CheckValue.
func CheckValue(v any) error { return record.CheckValue(v) }

// ValueSize is record.ValueSize.
func ValueSize(v any) int { return record.ValueSize(v) }

// Unmarshal is record.Unmarshal.
func Unmarshal(b []byte, v any) error { return record.Unmarshal(b, v) }

// DecodeEntry is record.DecodeEntry.
func DecodeEntry(b []byte) (Entry, error) { return record.DecodeEntry(b) }

// EncodeEntry is record.EncodeEntry.
func EncodeEntry(e Entry) ([]byte, error) { return record.EncodeEntry(e) }

// DecodeHeader is record.DecodeHeader.
func DecodeHeader(b []byte) (Header, error) { return record.DecodeHeader(b) }
