package api

import "testing"

func TestAddressKey(t *testing.T) {
	for _, tc := range []struct {
		ip     string
		prefix int
		want   string
	}{
		{"198.51.100.7", 64, "198.51.100.7"},
		{"::ffff:198.51.100.7", 64, "198.51.100.7"},
		{"::ffff:c633:6407", 64, "198.51.100.7"},
		{"2001:db8:77:1::1", 64, "2001:db8:77:1::/64"},
		{"2001:0db8:0077:0001:ffff:0:0:1", 64, "2001:db8:77:1::/64"},
		{"2001:db8:77:1::1", 56, "2001:db8:77::/56"},
		{"2001:db8:77:1::1", 128, "2001:db8:77:1::1/128"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"not an address", 64, "not an address"},
	} {
		if got := addressKey(tc.ip, tc.prefix); got != tc.want {
			t.Errorf("addressKey(%q, %d) = %q, want %q", tc.ip, tc.prefix, got, tc.want)
		}
	}
}
