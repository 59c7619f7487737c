package api_test

import (
	"net/http"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
)

func admin() map[string]string { return map[string]string{"Authorization": "Bearer " + testAdminToken} }

func roomStatus(t *testing.T, h *roomHarness, r request) api.RoomStatusView {
	t.Helper()
	rec := h.do(t, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", r.method, r.path, rec.Code, rec.Body)
	}
	var st api.RoomStatusView
	decodeJSON(t, rec, &st)
	return st
}

// Operators hold the line (nobody leaves it, not even a cart that finds it empty, and new
// carts still queue), set its pace, resume it, and read its status; only with the admin
// token, and a pace out of bounds is refused naming its field.
func TestOperatorsHoldPaceAndReadTheWaitingRoom(t *testing.T) {
	h := newRoomHarness(t, 10, 1, 100, func(cfg *api.Config, _ *api.Deps) { cfg.Room.MaxStarting = 4 })
	if rec := h.do(t, request{method: http.MethodGet, path: "/v1/admin/waiting-room"}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("status without the admin token: %d, want 401", rec.Code)
	}
	st := roomStatus(t, h, request{method: http.MethodGet, path: "/v1/admin/waiting-room", header: admin()})
	if st.Waiting != 1 || st.SpokenFor[h.sku] != 1 || st.Held || st.Pace != 0 || st.LastEstimatedWaitMS <= 0 {
		t.Fatalf("status = %+v, want the blocker waiting, 1 unit spoken for, no hold, no pace, an estimate", st)
	}
	held := roomStatus(t, h, request{method: http.MethodPost, path: "/v1/admin/waiting-room/hold", header: admin()})
	if !held.Held {
		t.Fatalf("after hold: %+v", held)
	}
	// The blocker leaves (as if started), and the line is empty: a new cart with a place
	// free still queues, for the line is held.
	if e, ok, err := h.room.Pop(t.Context()); err != nil || ok {
		t.Fatalf("took %+v %v %v from a held line", e, ok, err)
	}
	if _, err := h.room.Forget(t.Context(), "blocker"); err != nil {
		t.Fatal(err)
	}
	v := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	if v.Position != 1 || v.RefreshAfterMS < 1000 {
		t.Fatalf("a cart entering a held, empty line: %+v, want place 1 and a refresh hint", v)
	}
	paced := roomStatus(t, h, request{method: http.MethodPut, path: "/v1/admin/waiting-room/pace", header: admin(), body: body(`{"carts_per_second": 50}`)})
	if paced.Pace != 50 || !paced.Held || paced.Waiting != 1 {
		t.Fatalf("after the pace: %+v", paced)
	}
	for _, bad := range []string{`{"carts_per_second": -1}`, `{"carts_per_second": 100001}`, `{}`} {
		problemOf(t, h.do(t, request{method: http.MethodPut, path: "/v1/admin/waiting-room/pace", header: admin(), body: body(bad)}),
			http.StatusUnprocessableEntity, "invalid_request")
	}
	resumed := roomStatus(t, h, request{method: http.MethodPost, path: "/v1/admin/waiting-room/resume", header: admin()})
	if resumed.Held || resumed.Pace != 50 {
		t.Fatalf("after the resume: %+v", resumed)
	}
	if e, ok, err := h.room.Pop(t.Context()); err != nil || !ok || e.CartID != "c-1" {
		t.Fatalf("take after the resume: %+v %v %v, want c-1", e, ok, err)
	}
}
