// Package workers runs short tasks on a few long-lived goroutines.
//
// The actor drains its mailbox, and the gateway writes and reads a
// connection's frames, on goroutines that exist only while there is work,
// so that an idle session or connection costs no goroutine (or only a
// small one). Started fresh for every burst, such a goroutine begins on
// a small stack and grows it (the runtime copies the stack at each
// doubling) while it decodes, encodes and appends; under load a profile
// showed a tenth of the server's CPU copying stacks. A Pool keeps a
// bounded number of finished goroutines parked, stacks already grown,
// and hands the next task to one of them; a parked goroutine waits deep
// enough in its stack that the garbage collector does not shrink it.
//
// A Pool does not own the tasks: whoever submits one still waits for it
// (the actor's registry and the gateway keep their own WaitGroups). It
// owns its parked goroutines, which Close stops.
//
// The exported surface:
//
//   - Pool, New, Config: the pool (Go, Idle, Close); Config.MaxIdle
//     bounds how many goroutines stay parked.
package workers
