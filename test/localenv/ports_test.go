package localenv

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestPortReservationsAreDistinctAndBelowTheEphemeralRange(t *testing.T) {
	// Where the ephemeral range leaves no room, the kernel picks: still
	// distinct and free, but in the ephemeral range and without locks.
	below := ephemeralLow()-portFloor >= portSpan
	var a, b portReservation
	defer a.release()
	defer b.release()
	pa, err := a.reserve(100)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.reserve(100)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(pa, pb...) {
		if seen[p] && below { // kernel picks are distinct only within one reservation
			t.Fatalf("port %d reserved twice", p)
		}
		seen[p] = true
		if below && (p < portFloor || p >= ephemeralLow()) {
			t.Fatalf("port %d outside [%d, %d)", p, portFloor, ephemeralLow())
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("reserved port not free: %v", err)
		}
		_ = l.Close()
	}

	// While a holds its ports nobody else can lock them; after release they
	// can be locked again.
	if !below {
		return
	}
	var c portReservation
	defer c.release()
	if _, ok := c.lock(pa[0]); ok {
		t.Fatalf("port %d locked while reserved", pa[0])
	}
	a.release()
	if _, ok := c.lock(pa[0]); !ok {
		t.Fatalf("port %d not lockable after release", pa[0])
	}
}

// TestWildcardListeners: a socket bound to every interface is found with
// the process holding it; one bound to loopback is not.
func TestWildcardListeners(t *testing.T) {
	wild, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	got, err := WildcardListeners(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	wildPort := strconv.Itoa(wild.Addr().(*net.TCPAddr).Port)
	localPort := strconv.Itoa(local.Addr().(*net.TCPAddr).Port)
	found := false
	for _, l := range got {
		_, port, _ := net.SplitHostPort(l.Addr)
		switch port {
		case wildPort:
			found = l.PID == os.Getpid()
		case localPort:
			t.Errorf("the loopback listener reported: %v", l)
		}
	}
	if !found {
		t.Fatalf("the wildcard listener on port %s not found in %v", wildPort, got)
	}
	// Another process's tree does not hold it.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	got, err = WildcardListeners(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("sleep's tree holds %v", got)
	}
}
