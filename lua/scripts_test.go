package lua

import (
	"regexp"
	"strings"
	"testing"
)

// replyCodes are the reply codes as common.lua names them, with the Go constant each wrapper
// reads them by (doc.go has the table).
var replyCodes = []struct {
	name string
	code int64
}{
	{"OK", codeOK}, {"NOT_STOCKED", codeNotStocked}, {"HOLD_ENDED", codeHoldEnded},
	{"ALREADY_HELD", codeAlreadyHeld}, {"OVER_LIMIT", codeOverLimit}, {"OUT_OF_STOCK", codeOutOfStock},
	{"ALREADY_RELEASED", codeAlreadyReleased}, {"ALREADY_COMMITTED", codeAlreadyCommitted},
	{"NO_HOLD", codeNoHold}, {"ON_HAND_BELOW_HELD", codeOnHandBelowHeld},
	{"INVALID_ARGUMENT", codeInvalidArgument}, {"ALREADY_STOCKED", codeAlreadyStocked},
	{"ROLLED_BACK", codeRolledBack},
}

// TestCommonLuaNamesTheReplyCodesAsGoReadsThem runs common.lua on real Redis and reads back
// each code by its name: the scripts and the Go wrappers agree on every number.
func TestCommonLuaNamesTheReplyCodesAsGoReadsThem(t *testing.T) {
	rdb := testClient(t)
	names := make([]string, len(replyCodes))
	for i, c := range replyCodes {
		names[i] = c.name
	}
	got, err := rdb.Eval(t.Context(), commonLua+"\nreturn {"+strings.Join(names, ", ")+"}", nil).Int64Slice()
	if err != nil {
		t.Fatalf("read the reply codes common.lua names: %v", err)
	}
	if len(got) != len(replyCodes) {
		t.Fatalf("common.lua gave %d codes for %d names: %v", len(got), len(replyCodes), got)
	}
	for i, c := range replyCodes {
		if got[i] != c.code {
			t.Errorf("common.lua's %s = %d, the Go wrappers read %d", c.name, got[i], c.code)
		}
	}
}

// TestScriptsReplyWithNamedCodes reads every script: a reply's code is one of common.lua's
// names, never a number written in place.
func TestScriptsReplyWithNamedCodes(t *testing.T) {
	numbered := regexp.MustCompile(`return \{\s*-?[0-9]`)
	files, err := sources.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := sources.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if numbered.MatchString(line) {
				t.Errorf("%s:%d: %s: name the reply code (common.lua)", f.Name(), i+1, strings.TrimSpace(line))
			}
		}
	}
}
