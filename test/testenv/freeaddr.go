package testenv

import "net"

// FreeAddr returns a loopback host:port whose port the kernel handed out a
// moment ago, for a flag of a binary a test starts. It panics when no port
// can be had on loopback (the test cannot go on).
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("testenv: no free loopback port: " + err.Error())
	}
	defer l.Close()
	return l.Addr().String()
}
