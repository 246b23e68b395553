package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// raiseNoFile raises the open-file limit as far as allowed: the soft
// limit to the hard one, and the hard one to fs.nr_open when the process
// may (root), capped at 1<<20. Set explicitly, the raised limit is inherited by the local
// nodes. It returns the limits in force.
func raiseNoFile() (uint64, uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		// Capped: some programs size tables by the limit.
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && min(n, 1<<20) > lim.Max {
			n = min(n, 1<<20)
			try := syscall.Rlimit{Cur: n, Max: n}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try) == nil {
				return n, n, nil
			}
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		return lim.Cur, lim.Max, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, lim.Max, nil
}

// checkLimits warns when the run needs more files or ports than the
// machine allows: each user holds a socket, and with --local each node
// holds the other end.
func (b *Bench) checkLimits() {
	need := uint64(b.cfg.Sessions)*2 + 256
	if b.local != nil {
		need += uint64(b.cfg.Sessions) // the nodes' ends, spread over the nodes
	}
	if soft := b.nofile[0]; soft > 0 && soft < need {
		b.warn(fmt.Sprintf("--sessions %d needs about %d open files but the limit is %d (hard %d): expect %q errors; raise it with ulimit -n",
			b.cfg.Sessions, need, soft, b.nofile[1], "out_of_files"))
	}
	if lo, hi, ok := portRange(); ok && uint64(b.cfg.Sessions)*2 > hi-lo {
		b.warn(fmt.Sprintf("--sessions %d with reconnects may use more local ports than net.ipv4.ip_local_port_range (%d-%d) holds: expect %q errors",
			b.cfg.Sessions, lo, hi, "out_of_ports"))
	}
}

func portRange() (uint64, uint64, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(f[0], 10, 64)
	hi, err2 := strconv.ParseUint(f[1], 10, 64)
	return lo, hi, err1 == nil && err2 == nil && hi > lo
}
