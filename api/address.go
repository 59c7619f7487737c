package api

import (
	"net/netip"

	"github.com/labstack/echo/v4"
)

// DefaultIPv6Prefix is the prefix one IPv6 client is counted by: a home or a cloud VM gets a
// whole /64 and may send from any address of it, so counting single addresses would give
// one machine 2^64 budgets.
const DefaultIPv6Prefix = 64

// addressKey turns a client address (Echo's RealIP) into the one the per-address limits
// count: an IPv4 address as it is (an IPv4-mapped IPv6 address is its IPv4 address), an
// IPv6 address as its network of prefix bits, however it was written. Something that is not
// an address is counted as it is.
func addressKey(realIP string, prefix int) string {
	ip, err := netip.ParseAddr(realIP)
	if err != nil {
		return realIP
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(prefix)
	if err != nil {
		return ip.String()
	}
	return p.String()
}

// clientAddress is the address key of the request's client (see addressKey).
func (s *Server) clientAddress(c echo.Context) string {
	return addressKey(c.RealIP(), s.cfg.IPv6Prefix)
}

// limitedAddress is the address key the per-address limits count the request by, or false
// when there is none to count. An authenticated client (a shop backend, CLIENT_TOKENS) is
// counted per client (RateLimits.CheckoutsPerClient), and its own address is not a buyer's:
// every buyer behind one backend host would share it. Only the buyer's address the backend
// forwards is counted: the backend listed in TrustedProxies, the buyer in X-Forwarded-For,
// so that RealIP is neither the connection's peer nor a trusted proxy.
func (s *Server) limitedAddress(c echo.Context) (string, bool) {
	if client, _ := c.Get(ctxClient).(string); client == "" {
		return s.clientAddress(c), true
	}
	buyer, err := netip.ParseAddr(c.RealIP())
	if err != nil {
		return "", false
	}
	buyer = buyer.Unmap().WithZone("")
	if peer, err := netip.ParseAddr(echo.ExtractIPDirect()(c.Request())); err == nil && peer.Unmap().WithZone("") == buyer {
		return "", false
	}
	for _, n := range s.cfg.TrustedProxies {
		if n.Contains(buyer.AsSlice()) {
			return "", false
		}
	}
	return addressKey(buyer.String(), s.cfg.IPv6Prefix), true
}
