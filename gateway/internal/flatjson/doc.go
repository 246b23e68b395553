// Package flatjson decodes the frames clients send most (send without
// metadata, ping, history, a plain hello) without encoding/json, whose
// reflection was 5% of the server's CPU under load.
//
// The invariant: Decode takes only a JSON object whose values are plain
// strings or unsigned integers, under the lowercase names of
// wire.ClientFrame's fields, and then returns exactly what encoding/json
// would (the gateway's FuzzDecodeFlatMatches holds the two to it). It
// reports false for anything else — an escape or a control byte in a
// string, invalid UTF-8, a nested value, a sign, fraction or leading
// zero, another key, a key twice, anything after the object — and the
// gateway decodes that with encoding/json instead.
//
// The exported surface:
//
//   - Decode: a flat frame as a wire.ClientFrame, every field it found
//     set, or false.
package flatjson
