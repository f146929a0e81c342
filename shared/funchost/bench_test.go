package funchost_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/funchost"
)

// benchBatch is a change-feed batch of n job-sized documents, with the
// characters that JSON escapes in them.
func benchBatch(n int) []json.RawMessage {
	docs := make([]json.RawMessage, n)
	for i := range docs {
		docs[i] = fmt.Appendf(nil, `{"_etag":"\"%d\"","_ts":1764230400,"id":"j%06d","productId":"p","stage":"queued","title":"Fix \"flaky\" <test>","task":%q}`,
			i, i, strings.Repeat("do the thing\n", 100))
	}
	return docs
}

// BenchmarkFeedBatch is a batch's trip through the host's encoding: the
// emulator encodes it, the handler decodes it.
func BenchmarkFeedBatch(b *testing.B) {
	docs := benchBatch(3)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = funchost.EncodeDocuments(docs)
		}
	})
	enc := funchost.EncodeDocuments(docs)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := funchost.Documents(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
