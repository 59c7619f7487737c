package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Presence of workers, in Redis. Temporal's own poller list (DescribeTaskQueue) keeps a dead
// poller for minutes, so the API could start sagas nobody runs. Instead each worker writes
// its own key with a short TTL every beat, as asynq keeps its servers:
//
//	workers:{<task queue>}             set: the identities of workers that beat recently
//	worker:{<task queue>}:<identity>   string "1", PX HeartbeatTTL, rewritten every beat
//
// Redis expires a dead worker's key on its own clock, so no two machines' clocks are
// compared. Both keys carry the task queue as a hash tag, so one MGET reads them on a Redis
// Cluster. Readers remove set members whose key has expired.
const (
	// HeartbeatEvery is how often a running worker writes its key.
	HeartbeatEvery = time.Second
	// HeartbeatTTL is how long a key outlives its last beat: three beats, so one slow Redis
	// round trip or GC pause does not make a live worker look gone, yet a killed worker is
	// noticed within 3 s (the contract allows 5 s to answer 503 without one).
	HeartbeatTTL = 3 * HeartbeatEvery
	// setTTL lets the set itself vanish once no worker has beaten for a minute.
	setTTL = time.Minute
)

func setKey(taskQueue string) string { return "workers:{" + taskQueue + "}" }

func memberKey(taskQueue, identity string) string {
	return "worker:{" + taskQueue + "}:" + identity
}

// Heartbeat announces one worker on a task queue.
type Heartbeat struct {
	rdb       redis.UniversalClient
	taskQueue string
	identity  string
	// healthy is checked before each beat: a worker cut off from Temporal polls nothing, so
	// it must stop announcing itself even while Redis still answers.
	healthy func(context.Context) error
	logger  *slog.Logger
}

// NewHeartbeat returns the heartbeat of one worker process on taskQueue. healthy (e.g. the
// worker's Temporal client's CheckHealth) gates every beat; nil means always healthy.
func NewHeartbeat(rdb redis.UniversalClient, taskQueue string, healthy func(context.Context) error, logger *slog.Logger) *Heartbeat {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	if logger == nil {
		logger = slog.Default()
	}
	return &Heartbeat{
		rdb: rdb, taskQueue: taskQueue, healthy: healthy, logger: logger,
		// Unique per process start: a restarted worker never revives its old key.
		identity: fmt.Sprintf("%d@%s-%s", os.Getpid(), host, hex.EncodeToString(b)),
	}
}

// Identity is how this worker appears in Polling's answer.
func (h *Heartbeat) Identity() string { return h.identity }

// Run beats every HeartbeatEvery until ctx ends, then removes the worker's key at once, so a
// worker that stops cleanly is gone without waiting for the TTL. Call it after the worker
// started polling, and let it end before the worker stops.
func (h *Heartbeat) Run(ctx context.Context) {
	ticker := time.NewTicker(HeartbeatEvery)
	defer ticker.Stop()
	for {
		if err := h.beat(ctx); err != nil && ctx.Err() == nil {
			h.logger.Warn("worker heartbeat skipped", "task_queue", h.taskQueue, "identity", h.identity, "error", err)
		}
		select {
		case <-ctx.Done():
			h.remove()
			return
		case <-ticker.C:
		}
	}
}

func (h *Heartbeat) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, HeartbeatEvery)
	defer cancel()
	if h.healthy != nil {
		if err := h.healthy(ctx); err != nil {
			return fmt.Errorf("check temporal before the heartbeat: %w", err)
		}
	}
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, memberKey(h.taskQueue, h.identity), "1", HeartbeatTTL)
		p.SAdd(ctx, setKey(h.taskQueue), h.identity)
		p.Expire(ctx, setKey(h.taskQueue), setTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("write heartbeat of worker %s: %w", h.identity, err)
	}
	return nil
}

func (h *Heartbeat) remove() {
	// The run's context is done; removal gets its own short one.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, memberKey(h.taskQueue, h.identity))
		p.SRem(ctx, setKey(h.taskQueue), h.identity)
		return nil
	})
	if err != nil {
		h.logger.Warn("remove worker heartbeat (it expires on its own)", "identity", h.identity, "error", err)
	}
}

// Presence reads which workers are polling a task queue.
type Presence struct {
	RDB       redis.UniversalClient
	TaskQueue string
}

// Polling returns the identities of the workers whose heartbeat is live, sorted; none is an
// empty slice and no error.
func (p Presence) Polling(ctx context.Context) ([]string, error) {
	members, err := p.RDB.SMembers(ctx, setKey(p.TaskQueue)).Result()
	if err != nil {
		return nil, fmt.Errorf("read workers of task queue %s: %w", p.TaskQueue, err)
	}
	if len(members) == 0 {
		return []string{}, nil
	}
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = memberKey(p.TaskQueue, m)
	}
	vals, err := p.RDB.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read heartbeats of task queue %s: %w", p.TaskQueue, err)
	}
	alive := []string{}
	var dead []any
	for i, v := range vals {
		if v == nil {
			dead = append(dead, members[i])
			continue
		}
		alive = append(alive, members[i])
	}
	if len(dead) > 0 {
		// Best effort: a member left behind is only read again next time.
		_ = p.RDB.SRem(ctx, setKey(p.TaskQueue), dead...).Err()
	}
	sort.Strings(alive)
	return alive, nil
}
