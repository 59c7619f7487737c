package shop

import "testing"

func TestJudgeComparesTheCallerThenTheBodyThenTheKey(t *testing.T) {
	creator := Fingerprint{RequestHash: "h", IdempotencyKey: "k", Caller: "customer/alice"}
	for _, tc := range []struct {
		name    string
		creator Fingerprint
		req     Fingerprint
		want    Match
	}{
		{"the creator's retry", creator, creator, SameRequest},
		{"the creator's body under another key", creator, Fingerprint{"h", "k2", "customer/alice"}, SameRequest},
		{"the creator's key with another body", creator, Fingerprint{"h2", "k", "customer/alice"}, KeyReused},
		{"the creator with another body and key", creator, Fingerprint{"h2", "k2", "customer/alice"}, OtherRequest},
		{"another caller with the creator's body and key", creator, Fingerprint{"h", "k", "customer/bob"}, OtherRequest},
		{"another caller's own body", creator, Fingerprint{"h2", "k", "customer/bob"}, OtherRequest},
		{"a checkout without a fingerprint", Fingerprint{}, Fingerprint{"h", "k", ""}, OtherRequest},
		{"no identity on either side", Fingerprint{"h", "k", ""}, Fingerprint{"h", "k", ""}, SameRequest},
		{"a saga older than callers, the creator's retry", Fingerprint{"h", "k", ""}, Fingerprint{"h", "k", "customer/alice"}, SameRequest},
		{"a saga older than callers, another body", Fingerprint{"h", "k", ""}, Fingerprint{"h2", "k2", "customer/bob"}, OtherRequest},
	} {
		if got := tc.creator.Judge(tc.req); got != tc.want {
			t.Errorf("%s: Judge = %d, want %d", tc.name, got, tc.want)
		}
	}
}
