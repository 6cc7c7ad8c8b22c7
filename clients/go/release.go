package pathlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseLater sends RELEASE for a token from a goroutine of its own until it gets through, or
// until `until`, when the token's locks have surely expired: for a grant that nobody will use
// (its reply was lost, its replicas failed) and a release that could not reach the server.
func releaseLater(client redis.UniversalClient, key, token string, until time.Time) {
	go func() {
		pause := 50 * time.Millisecond
		for {
			time.Sleep(pause)
			ctx, cancel := context.WithDeadline(context.Background(), until)
			err := client.Do(ctx, "PATHLOCK.RELEASE", key, token).Err()
			cancel()
			if err == nil || !transient(err) || !time.Now().Before(until) {
				return
			}
			pause = min(2*pause, time.Second)
		}
	}()
}
