package pg

import (
	"net"
	"strings"
	"syscall"
	"time"
)

// dialer opens the pool's TCP connections: keepalive probes after d of silence (a peer
// that stopped answering is found while a call waits for its reply; a live server's kernel
// answers them however long its statement runs) and, where the platform has it, a TCP user
// timeout of d (data sent and not acknowledged for d fails the connection).
func dialer(d time.Duration) *net.Dialer {
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: d, Interval: max(d/3, time.Second), Count: 3},
		Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") { // a Unix socket
				return nil
			}
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, d) }); err != nil {
				return err
			}
			return serr
		},
	}
}
