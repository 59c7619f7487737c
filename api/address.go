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
