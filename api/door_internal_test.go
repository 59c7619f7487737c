package api

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

func TestTheDoorDecidesFromEachOwnersWord(t *testing.T) {
	alice := shop.Fingerprint{RequestHash: "h", IdempotencyKey: "k", Caller: "customer/alice"}
	bob := shop.Fingerprint{RequestHash: "h-bob", IdempotencyKey: "k", Caller: "customer/bob"}
	aliceOtherBody := shop.Fingerprint{RequestHash: "h2", IdempotencyKey: "k", Caller: "customer/alice"}
	inLine := shop.RoomPlace{State: shop.PlaceQueued, Position: 3, Entry: &shop.RoomEntry{CartID: "c"}}
	starting := shop.RoomPlace{State: shop.PlaceLeaving, Entry: &shop.RoomEntry{CartID: "c"}}
	short := []shop.Shortage{{SKU: "S", Requested: 1}}
	for _, tc := range []struct {
		name  string
		facts doorFacts
		req   shop.Fingerprint
		want  doorDecision
	}{
		{"a new cart", doorFacts{}, alice, doorEnter},
		{"a new cart the stock cannot serve", doorFacts{shortages: short}, alice, doorSoldOut},
		{"a cart Redis saw start, not recorded yet", doorFacts{seen: true}, alice, doorToSaga},
		{"the creator's retry of a recorded cart", doorFacts{recorded: true, creator: alice}, alice, doorToSaga},
		{"a recorded cart, whatever the stock says", doorFacts{recorded: true, creator: alice, shortages: short}, alice, doorToSaga},
		{"a recorded cart, posted by another caller", doorFacts{recorded: true, creator: alice}, bob, doorOtherRequest},
		{"a recorded cart, the creator's key with another body", doorFacts{recorded: true, creator: alice}, aliceOtherBody, doorKeyReused},
		{"a recorded cart without a fingerprint", doorFacts{recorded: true}, alice, doorOtherRequest},
		{"the creator's retry of a cart in line", doorFacts{place: inLine, creator: alice}, alice, doorInLine},
		{"the creator's retry of a cart being started", doorFacts{place: starting, creator: alice}, alice, doorInLine},
		{"a cart in line, posted by another caller", doorFacts{place: inLine, creator: alice}, bob, doorOtherRequest},
		{"a cart in line, the creator's key with another body", doorFacts{place: inLine, creator: alice}, aliceOtherBody, doorKeyReused},
		{"a cart that just left the line for its saga", doorFacts{place: shop.RoomPlace{State: shop.PlaceLeft}, seen: true}, alice, doorToSaga},
		// Its start's mark may be lost (another Cluster node than the room's) and its saga not have
		// recorded or held yet: the room's word that it left is enough.
		{"a cart that left the line, its start not marked", doorFacts{place: shop.RoomPlace{State: shop.PlaceLeft}}, alice, doorToSaga},
		{"a cart that left the line, whatever the stock says", doorFacts{place: shop.RoomPlace{State: shop.PlaceLeft}, shortages: short}, alice, doorToSaga},
	} {
		if got := decideDoor(tc.facts, tc.req); got != tc.want {
			t.Errorf("%s: decideDoor = %d, want %d", tc.name, got, tc.want)
		}
	}
}
