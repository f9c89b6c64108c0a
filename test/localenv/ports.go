package localenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports for the binaries are chosen here and passed as flags; each binary
// binds its own later (and again after a restart). Two things could take a
// chosen port in between, and the binary would then fail with "address
// already in use":
//   - an outgoing connection of any process: the kernel gives those local
//     ports from net.ipv4.ip_local_port_range, so ports are chosen below it;
//   - another local environment (tests of several packages run at once):
//     each chosen port is locked (flock on a file named after it) until
//     Stop, and a port whose lock is held is skipped.
//
// Where the ephemeral range leaves no room below it, the kernel picks (the
// old way): the first race remains, the second does not.

// portLockDir holds one lock file per reserved port, shared by every local
// environment on the machine.
var portLockDir = filepath.Join(os.TempDir(), "runtime-watcher-ports")

const (
	portFloor = 20000 // below: well-known and commonly configured ports
	portSpan  = 4096  // at least this much room below the ephemeral range
)

// portReservation holds the locks of the ports a System chose.
type portReservation struct {
	mu    sync.Mutex
	locks []*os.File
}

// reserve returns n distinct loopback ports that are free now and that no
// other local environment will choose until release.
func (r *portReservation) reserve(n int) ([]int, error) {
	lo, hi := portFloor, ephemeralLow()
	if hi-lo < portSpan {
		return kernelPorts(n)
	}
	if err := os.MkdirAll(portLockDir, 0o700); err != nil {
		return nil, err
	}
	ports := make([]int, 0, n)
	start := lo + rand.IntN(hi-lo)
	for i := 0; i < hi-lo && len(ports) < n; i++ {
		port := lo + (start-lo+i)%(hi-lo)
		lock, ok := r.lock(port)
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil { // in use by something that is not a local environment
			r.unlock(lock)
			continue
		}
		_ = l.Close()
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("only %d of %d free loopback ports in [%d, %d)", len(ports), n, lo, hi)
	}
	return ports, nil
}

// lock takes the port's lock file without waiting; it is held (and the
// file open) until release.
func (r *portReservation) lock(port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	r.mu.Lock()
	r.locks = append(r.locks, f)
	r.mu.Unlock()
	return f, true
}

func (r *portReservation) unlock(f *os.File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, l := range r.locks {
		if l == f {
			r.locks = append(r.locks[:i], r.locks[i+1:]...)
			break
		}
	}
	_ = f.Close() // closing the last descriptor drops the flock
}

// release gives every reserved port back.
func (r *portReservation) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.locks {
		_ = f.Close()
	}
	r.locks = nil
}

// ephemeralLow is the first port the kernel hands to outgoing connections
// (32768 when it cannot be read: Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// kernelPorts asks the kernel for n distinct free loopback ports (from the
// ephemeral range, so an outgoing connection may still take one first).
func kernelPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are chosen, so they are distinct
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
