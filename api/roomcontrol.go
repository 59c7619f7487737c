// The waiting room's operator controls: hold the line, resume it, set its pace, read its status.

package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// RoomStatusView is the waiting room as operators see it (GET /v1/admin/waiting-room).
type RoomStatusView struct {
	shop.RoomStatus
	// LastEstimatedWaitMS is the estimated wait of the last cart in line.
	LastEstimatedWaitMS int64 `json:"last_estimated_wait_ms"`
}

// PaceRequest is the body of PUT /v1/admin/waiting-room/pace.
type PaceRequest struct {
	// CartsPerSecond is how many carts may leave the line each second, across every
	// replica; 0 lifts the pace.
	CartsPerSecond *int64 `json:"carts_per_second"`
}

// maxPace bounds the pace: far above what a Temporal namespace starts in a second.
const maxPace = 100_000

func (s *Server) roomStatus(c echo.Context) error {
	if s.Room == nil {
		return noRoom()
	}
	st, err := s.Room.Status(c.Request().Context())
	if err != nil {
		return unavailable("redis", err)
	}
	return c.JSON(http.StatusOK, RoomStatusView{RoomStatus: st, LastEstimatedWaitMS: s.runner.EstimateWait(st.Waiting)})
}

func (s *Server) holdRoom(c echo.Context) error   { return s.setHeld(c, true) }
func (s *Server) resumeRoom(c echo.Context) error { return s.setHeld(c, false) }

func (s *Server) setHeld(c echo.Context, held bool) error {
	if s.Room == nil {
		return noRoom()
	}
	if err := s.Room.Hold(c.Request().Context(), held); err != nil {
		return unavailable("redis", err)
	}
	s.Logger.Info("waiting room held by an operator", "held", held)
	if !held {
		s.runner.Ring()
	}
	return s.roomStatus(c)
}

func (s *Server) setRoomPace(c echo.Context) error {
	if s.Room == nil {
		return noRoom()
	}
	var req PaceRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	if req.CartsPerSecond == nil || *req.CartsPerSecond < 0 || *req.CartsPerSecond > maxPace {
		return invalid("invalid_request", FieldError{"carts_per_second", "a whole number from 0 (no pace) to 100000"})
	}
	if err := s.Room.SetPace(c.Request().Context(), *req.CartsPerSecond); err != nil {
		return unavailable("redis", err)
	}
	s.Logger.Info("waiting room pace set by an operator", "carts_per_second", *req.CartsPerSecond)
	return s.roomStatus(c)
}

func noRoom() *Problem {
	return problem(http.StatusNotFound, "not_found", "this API runs without a waiting room")
}
