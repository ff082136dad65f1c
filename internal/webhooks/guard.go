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

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Blocked reports whether ip is an address a webhook must not reach (SSRF guard).
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !ip.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		cgnat.Contains(ip) || (ip.Is4() && ip.As4()[0] == 0)
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
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
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
