// Package recordtest is test support for values the log stores: nested
// values built to a depth, their depth as the door rule counts it, and
// the JSON a client would get back.
//
// The exported surface:
//
//   - Nest, DepthOf: a value nested to a depth, and the depth CheckValue
//     counts in a value.
//   - SameJSON: whether two values encode to the same JSON, as a client
//     would get them back.
package recordtest
