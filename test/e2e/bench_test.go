//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkDevUp measures `cloister dev up` on a warm toolchain cache: from
// nothing to a control plane with every node Ready. Tear-down is not timed.
func BenchmarkDevUp(b *testing.B) {
	for _, nodes := range []int{3, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c := newCluster(b, fmt.Sprintf("bench-%d", nodes))
				b.Cleanup(func() {
					if _, err := c.Down(context.Background()); err != nil {
						b.Error(err)
					}
					os.RemoveAll(c.Workdir)
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				b.StartTimer()
				_, err := c.Up(ctx, nodes)
				b.StopTimer()
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Down(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
