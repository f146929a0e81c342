package sqlite

import (
	"errors"
	"fmt"
	"strings"
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

// BenchmarkLifecycleWALFrames counts the pages (WAL frames) each of a job's
// lifecycle writes commits, on a store holding 1,000 earlier jobs: the
// create, the dispatch stamp (no indexed field changes), the accept (stage
// and lease), building (stage) and shipped (stage, lease released). The
// stage and the lease's expiry are indexed, so the writes that move them
// commit two to three times the pages of one that does not, which is why
// the bench's raw CAS yardstick makes a lifecycle's own writes (issue 25).
func BenchmarkLifecycleWALFrames(b *testing.B) {
	const earlier, round = 1000, 100
	ctx := b.Context()
	s, _ := openTemp(b)
	pad := strings.Repeat("x", 1200) // a real job is about 1.5 KB
	doc := func(id, stage string, leased bool) []byte {
		lease := ""
		if leased {
			lease = `,"holderFactoryId":"f1","leaseExpiresAt":"2026-11-28T05:00:00Z"`
		}
		return fmt.Appendf(nil, `{"id":%q,"productId":"p1","stage":%q,"priority":2,"task":%q%s}`, id, stage, pad, lease)
	}
	for i := range earlier {
		id := fmt.Sprintf("old-%05d", i)
		_, err := s.Create(ctx, store.Jobs, "p1", id, doc(id, "shipped", false))
		require.NoError(b, err)
	}
	steps := []struct {
		name   string
		stage  string
		leased bool
	}{{"create", "queued", false}, {"stamp", "queued", false}, {"accept", "assigned", true}, {"building", "building", true}, {"shipped", "shipped", false}}
	frames := make([]float64, len(steps))
	revs := make([]string, round)
	for r := 0; b.Loop(); r++ {
		// A round: each of the lifecycle's writes in turn, for 100 new jobs.
		for k, st := range steps {
			frames[k] += walFrames(b, s, round, func(i int) {
				id := fmt.Sprintf("job-%03d-%07d", i, r)
				var err error
				if k == 0 {
					revs[i], err = s.Create(ctx, store.Jobs, "p1", id, doc(id, st.stage, st.leased))
				} else {
					revs[i], err = s.Replace(ctx, store.Jobs, "p1", id, doc(id, st.stage, st.leased), revs[i])
				}
				require.NoError(b, err)
			})
		}
	}
	for k, st := range steps {
		b.ReportMetric(frames[k]/float64(b.N), st.name+"-frames/write")
	}
}
