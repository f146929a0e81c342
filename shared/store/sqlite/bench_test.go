package sqlite

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// BenchmarkCASReplace measures the claim cycle: Read, then Replace with
// ifRev, retried when another writer won. writes/s counts successful
// replaces; conflicts/op is lost races per successful replace.
func BenchmarkCASReplace(b *testing.B) {
	for _, bc := range []struct {
		name     string
		docs     int
		parallel bool
	}{
		{"one-doc", 1, false},
		{"many-docs", 1000, false},
		{"parallel/one-doc", 1, true},
		{"parallel/many-docs", 1000, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := openTemp(b)
			ctx := b.Context()
			ids := make([]string, bc.docs)
			for i := range ids {
				ids[i] = fmt.Sprintf("job-%04d", i)
				_, err := s.Create(ctx, store.Jobs, "p1", ids[i], jobBody(ids[i], 0))
				require.NoError(b, err)
			}
			var writes, conflicts, next atomic.Int64
			cycle := func(id string) error {
				for {
					it, err := s.Read(ctx, store.Jobs, "p1", id)
					if err != nil {
						return err
					}
					_, err = s.Replace(ctx, store.Jobs, "p1", id, jobBody(id, int(writes.Load())), it.Rev)
					if errors.Is(err, store.ErrPrecondition) {
						conflicts.Add(1)
						continue
					}
					if err != nil {
						return err
					}
					writes.Add(1)
					return nil
				}
			}
			b.ResetTimer()
			if bc.parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := cycle(ids[int(next.Add(1))%len(ids)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for i := 0; b.Loop(); i++ {
					require.NoError(b, cycle(ids[i%len(ids)]))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(writes.Load())/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(conflicts.Load())/float64(max(writes.Load(), 1)), "conflicts/op")
		})
	}
}
