package webhooks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/strata-mem/strata/internal/strata"
)

// ErrBlockedAddress is a webhook target that resolves to an address Strata does not call
// (loopback, link-local, private, unspecified, multicast, carrier-grade NAT) while
// STRATA_WEBHOOK_ALLOW_PRIVATE is off.
var ErrBlockedAddress = errors.New("webhooks: address not allowed")

var (
	cgnat = netip.MustParsePrefix("100.64.0.0/10")
	// IPv6 forms that carry an IPv4 address a host or a gateway may turn back into IPv4:
	// IPv4-compatible (::a.b.c.d, deprecated), NAT64's well-known prefix (RFC 6052) and
	// 6to4 (2002:aabb:ccdd::/48). The embedded address is judged instead.
	v4compat  = netip.MustParsePrefix("::/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// Refused outright: NAT64's local-use prefix (RFC 8215: the operator's own translator,
	// any IPv4 behind it) and the deprecated site-local range (fec0::/10, private in effect).
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	siteLocal  = netip.MustParsePrefix("fec0::/10")
	// IPv4-translated (SIIT, RFC 2765: ::ffff:0:a.b.c.d), which Unmap does not unwrap: judged
	// by the address inside, like the compatible and NAT64 forms.
	v4translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	// Refused outright: Teredo (its IPv4 addresses are obscured, the relay is anyone's),
	// the discard prefix and IPv6 documentation.
	teredo   = netip.MustParsePrefix("2001::/32")
	discard6 = netip.MustParsePrefix("100::/64")
	doc6     = netip.MustParsePrefix("2001:db8::/32")
	// Reserved IPv4 ranges no receiver lives in: IETF protocol assignments (192.0.0.0/24),
	// benchmarking (198.18.0.0/15), the documentation nets, and 240.0.0.0/4 (with the
	// broadcast address).
	reserved4 = []netip.Prefix{netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("198.18.0.0/15"),
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("240.0.0.0/4")}
)

// The refusals' fixed texts: neither the addresses a name resolved to nor the resolver's
// error (which names the resolver) reaches the caller.
const (
	MsgBlocked    = "refused: resolves to a private or loopback address"
	MsgUnresolved = "refused: the host does not resolve"
	msgNumeric    = "must name an IPv4 host as four decimal numbers (a.b.c.d)"
)

// Blocked reports whether ip is an address a webhook must not reach (SSRF guard).
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case v4compat.Contains(ip), nat64.Contains(ip), v4translated.Contains(ip):
			return Blocked(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			return Blocked(netip.AddrFrom4([4]byte(b[2:6])))
		case nat64Local.Contains(ip), siteLocal.Contains(ip), teredo.Contains(ip), discard6.Contains(ip), doc6.Contains(ip):
			return true
		}
	}
	for _, p := range reserved4 {
		if p.Contains(ip) {
			return true
		}
	}
	return !ip.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		cgnat.Contains(ip) || (ip.Is4() && ip.As4()[0] == 0)
}

// numericHost reports whether host ends in a number (its last label is decimal digits or
// 0x and hex digits), the WHATWG URL rule by which browsers, curl and C resolvers read it
// as an IPv4 address: 2130706433, 0177.0.0.1, 0x7f.1 and 127.1 all mean 127.0.0.1 to them.
// Go's resolver would ask DNS for such a name instead, so whether the guard saw an address
// would depend on the DNS server: CheckURL refuses any such host that is not plain a.b.c.d.
func numericHost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	digits := "0123456789"
	if h, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		last, digits = h, "0123456789abcdef"
	}
	return strings.Trim(last, digits) == ""
}

// loopbackName reports whether host is localhost or a name under it (RFC 6761: they
// resolve to loopback whatever DNS says), with or without the root's trailing dot.
func loopbackName(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// CheckURL validates a webhook URL (field "url"): http or https, a host, no credentials,
// and — unless allowPrivate — every address the host resolves to is public.
func CheckURL(ctx context.Context, raw string, allowPrivate bool) error {
	return checkURL(ctx, raw, allowPrivate, net.DefaultResolver.LookupNetIP)
}

// checkURL is CheckURL with the resolver's lookup given (tests fake the resolver's errors).
func checkURL(ctx context.Context, raw string, allowPrivate bool,
	lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) error {
	if len(raw) > 2000 {
		return strata.Invalid("url", "must be at most 2000 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return strata.Invalid("url", "must be an absolute http or https URL")
	}
	if u.User != nil {
		return strata.Invalid("url", "must not carry credentials")
	}
	if u.Fragment != "" {
		return strata.Invalid("url", "must not have a fragment")
	}
	host := u.Hostname()
	ip, perr := netip.ParseAddr(host)
	if perr != nil && numericHost(host) {
		return strata.Invalid("url", msgNumeric)
	}
	if allowPrivate {
		return nil
	}
	if loopbackName(host) {
		return strata.Invalid("url", MsgBlocked)
	}
	var addrs []netip.Addr
	if perr == nil {
		addrs = []netip.Addr{ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := lookup(rctx, "ip", host)
		if err != nil || len(ips) == 0 {
			return strata.Invalid("url", MsgUnresolved)
		}
		addrs = ips
	}
	for _, ip := range addrs {
		if Blocked(ip) {
			return strata.Invalid("url", MsgBlocked)
		}
	}
	return nil
}

// attemptMessage is the recorded (and API-visible) text of a failed delivery attempt: one
// of a few fixed texts, never the client's own error, which quotes the URL, the address
// dialled and the resolver's.
func attemptMessage(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	var cert *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	switch {
	case errors.Is(err, ErrBlockedAddress):
		return MsgBlocked
	case errors.As(err, &cert):
		return "the receiver's TLS certificate was not accepted"
	case errors.As(err, &record):
		return "the receiver does not speak TLS"
	case errors.As(err, &dns):
		if dns.IsTimeout {
			return "the host's name lookup timed out"
		}
		return "the host does not resolve"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed by the receiver"
	case errors.As(err, &op):
		return "connection failed"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	return "the request failed"
}

// dialControl refuses, at connect time, a blocked address: whatever DNS answered by then (a
// rebinding answer included), the socket never connects to it.
func dialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrBlockedAddress, address)
		}
		if Blocked(ap.Addr()) {
			return fmt.Errorf("%w: %s", ErrBlockedAddress, ap.Addr())
		}
		return nil
	}
}
