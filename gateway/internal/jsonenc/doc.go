// Package jsonenc writes the frames a session sends most — message, ack,
// delta, history_batch — by hand into one buffer: encoding/json's
// reflection was a fifth of a resume's CPU.
//
// The invariant: every frame decodes to exactly what encoding/json would
// have produced from the gateway's frame structs (gateway's
// TestFastEncodingMatchesJSON and FuzzFastEncoding check it), strings
// escaped as encoding/json escapes them (invalid UTF-8 replaced, U+2028
// and U+2029 escaped), floats formatted as it formats them, NaN and the
// infinities as null. Values with no fast path go through encoding/json.
//
// The exported surface:
//
//   - AppendMessage, AppendAck, AppendDelta, AppendBatch: the frames (a
//     message, or an element of a history_batch; an ack; a delta; a
//     history_batch).
//   - AppendStored: an element of a history_batch straight from the
//     entry's stored msgpack bytes, byte for byte what AppendMessage
//     writes from the decoded entry (TestStoredIsTheDecodedMessage and
//     FuzzStoredIsTheDecodedMessage hold it), or a refusal that leaves
//     the entry to the decoder.
//   - AppendString, AppendFloat, AppendValue: JSON values, written as
//     encoding/json writes them.
package jsonenc
