package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
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
)

// Blocked reports whether ip is an address a webhook must not reach (SSRF guard).
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case v4compat.Contains(ip), nat64.Contains(ip):
			return Blocked(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			return Blocked(netip.AddrFrom4([4]byte(b[2:6])))
		case nat64Local.Contains(ip), siteLocal.Contains(ip):
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
		return strata.Invalid("url", "an IPv4 host must be written as four decimal numbers (a.b.c.d), not %q", host)
	}
	if allowPrivate {
		return nil
	}
	if loopbackName(host) {
		return strata.Invalid("url", "names %s, a loopback host; set STRATA_WEBHOOK_ALLOW_PRIVATE=true to allow it", host)
	}
	var addrs []netip.Addr
	if perr == nil {
		addrs = []netip.Addr{ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		if err != nil {
			return strata.Invalid("url", "the host does not resolve: %s", strings.TrimPrefix(err.Error(), "lookup "))
		}
		addrs = ips
	}
	for _, ip := range addrs {
		if Blocked(ip) {
			return strata.Invalid("url", "resolves to %s, a loopback, link-local or private address; "+
				"set STRATA_WEBHOOK_ALLOW_PRIVATE=true to allow it", ip)
		}
	}
	return nil
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
