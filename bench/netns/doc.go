// Package netns is a fault-injection lab made of Linux network
// namespaces: N nodes, each in its own namespace with an address on one
// private switch, whose links the caller cuts and heals while real
// processes (`tether serve`) run inside. `tether bench` and the cluster
// safety tests (cmd/tether) use it to partition a cluster for real:
// memberlist's UDP and TCP, the node link's WebSocket and the clients'
// connections all go through the kernel's routing, not through a proxy.
//
// # Layout
//
// New makes one hub namespace holding a bridge (br0) and, per node, a
// namespace whose eth0 is a veth into that bridge (vN on the hub's side),
// with loopback up and AddrsPerNode addresses in 10.213.0.0/24. The host's
// own network is never touched: the bridge lives in the hub, not in the
// host namespace, so the subnet is reachable only from inside the lab's
// namespaces, and two labs (parallel tests) may use the same addresses
// without seeing each other. The interface names are short and fixed
// (br0, vN, eth0: IFNAMSIZ is 15) because each lives in a namespace of
// its own lab; only the namespace names must be unique on the machine:
// prefix, pid, '-', a random tag (retried on a collision), then 'h' for
// the hub or the node's index. New also deletes namespaces with the same
// prefix left behind by processes that are gone (a test binary killed
// before its cleanup ran).
//
// # Faults
//
// Only iproute2 is assumed (no iptables, no netem), so a cut is a
// blackhole route: the kernel drops what a namespace sends to the cut
// address, silently, and a local sender gets EINVAL at once (a connect
// fails immediately; an established TCP connection stalls in
// retransmissions until its peer's or its own timeouts end it).
//
//   - Cut(a, b): routes in both namespaces; nothing passes either way.
//   - CutOneWay(from, to): a route in from only, so from's packets to to
//     are dropped while to's packets still reach from. Datagrams (gossip
//     over UDP) really flow one way: from hears to, to never hears from.
//     TCP needs both directions, so no TCP connection works between them
//     in either direction, but the two sides fail differently: from's
//     connect fails at once (EINVAL) and its sends on an established
//     connection are dropped, while to's connect times out (its SYN
//     arrives, the SYN-ACK is dropped) and to's data arrives but is never
//     acknowledged. Reverse-path filtering is off in fresh namespaces, so
//     from still accepts to's packets.
//   - Block(in, addr): the primitive, one route in one namespace; with a
//     second address per node it cuts one service (the HTTP listener and
//     so the node link) and not another (gossip).
//   - Isolate(i): Cut(i, j) for every other node. Heal removes every route
//     the lab added.
//
// Clients in the host reach the nodes through DialContext, Listen and
// ListenPacket, which open their sockets inside a node's namespace (a
// goroutine locked to an OS thread that joins the namespace and is then
// discarded with it), and Command runs a program inside one (ip netns
// exec; it execs, so the process is the program itself and signals such
// as SIGSTOP reach it).
//
// Everything needs root and the ip command; without them (or when a
// namespace cannot be made, as in an unprivileged container) New returns
// an error wrapping ErrUnsupported so that tests can skip with its text.
// The lab holds no goroutine of its own; Close deletes the namespaces
// (which removes their veths and the bridge) and is safe twice.
//
// # Exported surface
//
//   - Lab, New, Config: one lab (Nodes, Namespace, Addr, AddrOf, Close).
//   - Cut, CutOneWay, Block, Isolate, Heal: the faults, as above.
//   - DialContext, Listen, ListenPacket, Command: sockets and programs
//     inside a node's namespace.
//   - MaxNodes, MaxAddrsPerNode: the limits of Config.
//   - ErrUnsupported, ErrClosed: the lab cannot run here; the lab was
//     closed.
package netns
