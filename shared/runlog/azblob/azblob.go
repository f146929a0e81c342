// Package azblob is the runlog.Store on Azure Blob Storage (and Azurite):
// each segment of a run's log is an append blob named
// "runlog/<namespace>/<job>/<epoch>/<segment>" (runlog.SegmentName: the
// offset of its first byte), in the artifacts container, reached with the
// same identity (blob/azblob.NewContainerClient).
//
// Appends are idempotent and racing instances safe by the service's own
// conditions: a segment is created with If-None-Match: * (never truncating
// one another instance made), and a block is appended with the append
// position the caller saw (x-ms-blob-condition-appendpos) and the segment's
// full size as its max size (x-ms-blob-condition-maxsize). A writer that
// lost a race gets 412, lists the segments again and finds its bytes
// stored (nothing to do) or the new end to append at. An append blob takes
// at most 50,000 blocks: one that has them all is left as it is and the
// next segment starts early (segments are found by listing, not by offset
// arithmetic).
package azblob

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	blobazure "github.com/gigafactory/fleet/shared/blob/azblob"
	"github.com/gigafactory/fleet/shared/runlog"
)

// Prefix is where run logs live in the container, apart from artifacts
// ("<namespace>/<sha256>").
const Prefix = "runlog/"

// maxRaces bounds one append's turns of list, create, append: each turn
// means another writer moved the log meanwhile.
const maxRaces = 16

// Store keeps run logs in a container. It is safe for concurrent use and
// for several instances sharing the container.
type Store struct {
	c      *container.Client
	limits runlog.Limits

	mu sync.Mutex
	// full are segments the service refused more blocks for (50,000).
	full map[string]bool
}

var _ runlog.Store = (*Store)(nil)

// New keeps run logs in the container c.
func New(c *container.Client, limits runlog.Limits) *Store {
	return &Store{c: c, limits: limits.Resolve(), full: map[string]bool{}}
}

func runPrefix(k runlog.Key) string { return Prefix + k.String() + "/" }

func segmentBlob(k runlog.Key, start int64) string { return runPrefix(k) + runlog.SegmentName(start) }

// segments lists the run's segments, oldest first.
func (s *Store) segments(ctx context.Context, k runlog.Key) ([]runlog.Segment, error) {
	prefix := runPrefix(k)
	var segs []runlog.Segment
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, blobazure.MapError(err)
		}
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil || it.Properties == nil || it.Properties.ContentLength == nil {
				continue
			}
			start, ok := runlog.ParseSegmentName(strings.TrimPrefix(*it.Name, prefix))
			if !ok {
				continue
			}
			segs = append(segs, runlog.Segment{Start: start, Len: *it.Properties.ContentLength})
		}
	}
	slices.SortFunc(segs, func(a, b runlog.Segment) int { return cmp.Compare(a.Start, b.Start) })
	return segs, nil
}

func (s *Store) isFull(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full[name]
}

func (s *Store) markFull(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.full) > 4096 {
		clear(s.full) // a cache: the service says it again when asked
	}
	s.full[name] = true
}

// Append stores the new part of p, a block at a time, each conditional on
// where the log ended when it was listed.
func (s *Store) Append(ctx context.Context, key runlog.Key, off int64, p []byte) (runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return runlog.Info{}, err
	}
	if off < 0 {
		return runlog.Info{}, fmt.Errorf("runlog append %s: negative offset %d", key, off)
	}
	full := s.limits.SegmentBytes()
	for range maxRaces {
		segs, err := s.segments(ctx, key)
		if err != nil {
			return runlog.Info{}, fmt.Errorf("runlog append %s: %w", key, err)
		}
		info := runlog.InfoOf(segs)
		skip, err := runlog.Trim(info.Size, off, len(p))
		if err != nil {
			return info, err
		}
		if skip == len(p) {
			return s.expire(ctx, key, segs, info)
		}
		rest := p[skip:]
		var seg runlog.Segment
		if n := len(segs); n > 0 && segs[n-1].Len < full && !s.isFull(segmentBlob(key, segs[n-1].Start)) {
			seg = segs[n-1]
		} else {
			seg = runlog.Segment{Start: info.Size}
			_, err := s.c.NewAppendBlobClient(segmentBlob(key, seg.Start)).Create(ctx, &appendblob.CreateOptions{
				HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to("text/plain; charset=utf-8")},
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to(azcore.ETagAny)}},
			})
			if err != nil && !bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
				return info, fmt.Errorf("runlog append %s: create segment %d: %w", key, seg.Start, blobazure.MapError(err))
			}
			if err != nil {
				continue // another writer made it: list again
			}
		}
		n := int(min(full-seg.Len, int64(len(rest))))
		name := segmentBlob(key, seg.Start)
		_, err = s.c.NewAppendBlobClient(name).AppendBlock(ctx, streaming.NopCloser(bytes.NewReader(rest[:n])), &appendblob.AppendBlockOptions{
			AppendPositionAccessConditions: &appendblob.AppendPositionAccessConditions{AppendPosition: to(seg.Len), MaxSize: to(full)},
		})
		switch {
		case err == nil:
			// More of p may be left (it crossed a segment's end): list
			// again, which also finds it all stored and expires.
		case bloberror.HasCode(err, bloberror.BlockCountExceedsLimit):
			s.markFull(name)
		case bloberror.HasCode(err, bloberror.AppendPositionConditionNotMet, bloberror.MaxBlobSizeConditionNotMet, bloberror.BlobNotFound):
			// Another writer moved the end (or the cap dropped the
			// segment): list again.
		default:
			return info, fmt.Errorf("runlog append %s: %w", key, blobazure.MapError(err))
		}
	}
	return runlog.Info{}, fmt.Errorf("runlog append %s: the log moved under %d tries in a row", key, maxRaces)
}

// expire deletes the segments the cap drops.
func (s *Store) expire(ctx context.Context, key runlog.Key, segs []runlog.Segment, info runlog.Info) (runlog.Info, error) {
	drop := runlog.Expired(segs, info.Size, s.limits)
	for _, sg := range segs[:drop] {
		_, err := s.c.NewAppendBlobClient(segmentBlob(key, sg.Start)).Delete(ctx, nil)
		if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
			return info, fmt.Errorf("runlog expire %s: %w", key, blobazure.MapError(err))
		}
	}
	return runlog.InfoOf(segs[drop:]), nil
}

// Stat lists the run's segments: one List Blobs request.
func (s *Store) Stat(ctx context.Context, key runlog.Key) (runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return runlog.Info{}, err
	}
	segs, err := s.segments(ctx, key)
	if err != nil {
		return runlog.Info{}, fmt.Errorf("runlog stat %s: %w", key, err)
	}
	return runlog.InfoOf(segs), nil
}

// Read downloads a range of the segment holding off (runlog.ReadSegments).
func (s *Store) Read(ctx context.Context, key runlog.Key, off int64, limit int) ([]byte, int64, runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return nil, 0, runlog.Info{}, err
	}
	data, at, info, err := runlog.ReadSegments(ctx, off, limit,
		func(ctx context.Context) ([]runlog.Segment, error) { return s.segments(ctx, key) },
		func(ctx context.Context, seg runlog.Segment, at, n int64) ([]byte, bool, error) {
			resp, err := s.c.NewAppendBlobClient(segmentBlob(key, seg.Start)).DownloadStream(ctx, &blob.DownloadStreamOptions{
				Range: blob.HTTPRange{Offset: at - seg.Start, Count: n}})
			if bloberror.HasCode(err, bloberror.BlobNotFound) {
				return nil, true, nil
			}
			if err != nil {
				return nil, false, blobazure.MapError(err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(io.LimitReader(resp.Body, n))
			return data, false, err
		})
	if err != nil {
		return nil, 0, info, fmt.Errorf("runlog read %s: %w", key, err)
	}
	return data, at, info, nil
}

// DeleteJob deletes every segment of every run of the job.
func (s *Store) DeleteJob(ctx context.Context, namespace, jobID string) error {
	if err := (runlog.Key{Namespace: namespace, JobID: jobID}).Validate(); err != nil {
		return err
	}
	prefix := Prefix + namespace + "/" + jobID + "/"
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	var errs []error
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("runlog delete %s/%s: %w", namespace, jobID, blobazure.MapError(err))
		}
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil {
				continue
			}
			_, err := s.c.NewBlobClient(*it.Name).Delete(ctx, nil)
			if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
				errs = append(errs, blobazure.MapError(err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runlog delete %s/%s: %w", namespace, jobID, err)
	}
	return nil
}

func to[T any](v T) *T { return &v }
