// Package machinetest is test support for the session machine and its
// runner: a scan of package source that lets a test prove every event
// has a case in Machine.Step and every effect a case in the runner, so
// that a new event or effect without one fails a test rather than
// being reported at run time; and the readers of log entries both
// packages' tests share.
//
// The exported surface:
//
//   - Source, Parse: the non-test files of one package directory, parsed
//     (CaseTypes: the types of the type switch cases in a function;
//     MethodTypes: the receiver types of every method of a name).
//   - MetaString, Uint: an entry's metadata value as a string, and an
//     integer as msgpack may have decoded it.
package machinetest
