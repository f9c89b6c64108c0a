package localenv

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Listener is a TCP socket in LISTEN state and the process that holds it.
type Listener struct {
	PID     int
	Command string
	Addr    string // host:port as bound
}

func (l Listener) String() string { return fmt.Sprintf("%s[%d] %s", l.Command, l.PID, l.Addr) }

// tcpListen is the state LISTEN in /proc/net/tcp{,6}.
const tcpListen = 0x0A

// WildcardListeners are the TCP sockets in LISTEN state bound to every
// interface (0.0.0.0, ::) that process root or any of its descendants
// holds: what `make run` must not have but for the gateway's own port
// (issue 40: debug, stats and status ports bind loopback). Linux only.
func WildcardListeners(root int) ([]Listener, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	wild := map[uint64]string{} // socket inode → address
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			if l.St == tcpListen && l.LocalAddr.IsUnspecified() {
				wild[l.Inode] = net.JoinHostPort(l.LocalAddr.String(), strconv.FormatUint(l.LocalPort, 10))
			}
		}
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			parent[p.PID] = st.PPID
		}
	}
	inTree := func(pid int) bool {
		for i := 0; pid > 1 && i < 64; i++ {
			if pid == root {
				return true
			}
			pid = parent[pid]
		}
		return pid == root
	}
	var out []Listener
	for _, p := range procs {
		if !inTree(p.PID) {
			continue
		}
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue // gone meanwhile
		}
		comm, _ := p.Comm()
		seen := map[uint64]bool{}
		for _, t := range targets {
			inode, ok := strings.CutPrefix(t, "socket:[")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSuffix(inode, "]"), 10, 64)
			if addr, wildcard := wild[n]; err == nil && wildcard && !seen[n] {
				seen[n] = true
				out = append(out, Listener{PID: p.PID, Command: comm, Addr: addr})
			}
		}
	}
	return out, nil
}
