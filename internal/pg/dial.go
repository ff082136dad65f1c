package pg

import (
	"context"
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

// dialFunc is the pool's DialFunc. pgconn dials for two things: a connection, within
// ConnectTimeout (its context says so), and the one-shot cancel request it sends when a
// call's context ends, with a context of 15 s, while closing that connection. That close
// holds the connection's pool slot until it finishes, and on a hung Postgres (a black hole
// that acknowledges bytes and never answers) both the cancel request and the drain of the
// closed connection ran their full 15 s: a small pool stayed exhausted, answering 503, that
// long after Postgres came back. Here the cancel request's connection lives at most d, and a
// connection's own deadlines are capped at d from when they are set (pgconn sets "now" when
// a call's context ends and "now + 15 s" when it closes a broken connection; it clears them
// otherwise), so a slot comes back within about d.
func dialFunc(d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := dialer(d)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dl, ok := ctx.Deadline()
		if ok && time.Until(dl) <= d+time.Second { // a connection, bounded by ConnectTimeout
			c, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return cappedConn{Conn: c, d: d}, nil
		}
		// A cancel request (or another one-shot exchange): its whole life is bounded by d.
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(time.Now().Add(d)); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}
}

// cappedConn caps every deadline set on it at d from now; the zero deadline (none) stays.
type cappedConn struct {
	net.Conn
	d time.Duration
}

func (c cappedConn) capped(t time.Time) time.Time {
	if lim := time.Now().Add(c.d); !t.IsZero() && t.After(lim) {
		return lim
	}
	return t
}

func (c cappedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.capped(t)) }
func (c cappedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.capped(t)) }
func (c cappedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.capped(t)) }
