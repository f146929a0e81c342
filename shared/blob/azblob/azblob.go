// Package azblob is the blob.Store on Azure Blob Storage (and Azurite):
// one block blob per artifact digest, "<namespace>/<sha256>", in a container
// Terraform creates.
//
// Authentication is Entra ID only in Azure: the managed identity (clientID),
// else DefaultAzureCredential. The shared key is used only for Azurite's
// well-known development account, when Config.Emulator is set.
//
// Stage spools the upload to a local temporary file while hashing it (a
// blob's name is its digest, known only at the end of the upload, and blob
// storage has no rename); Commit uploads the file with If-None-Match: *, and
// when the blob already exists gives it a new ETag by setting its metadata.
// The ETag is the version a Delete can be conditional on. The spool is
// bounded by the upload limit and removed by Discard.
package azblob

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	fleetblob "github.com/gigafactory/fleet/shared/blob"
)

// Azurite's development account: its name and its published, well-known key.
// Never valid against Azure.
const (
	EmulatorAccount = "devstoreaccount1"
	EmulatorKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	// EmulatorServiceURL is Azurite's default blob endpoint.
	EmulatorServiceURL = "http://127.0.0.1:10000/" + EmulatorAccount
)

// DefaultContainer is the container Terraform creates for artifacts.
const DefaultContainer = "artifacts"

// Config configures the store.
type Config struct {
	// ServiceURL is the account's blob endpoint, such as
	// https://<account>.blob.core.windows.net (Blob__serviceUri).
	ServiceURL string
	// Container holds the blobs; DefaultContainer when empty.
	Container string
	// ClientID selects a user-assigned managed identity; empty means
	// DefaultAzureCredential.
	ClientID string
	// Emulator uses Azurite's well-known account key (and creates the
	// container if missing); ServiceURL defaults to EmulatorServiceURL.
	Emulator bool
	// Credential overrides the credential choice (tests).
	Credential azcore.TokenCredential
	// SpoolDir holds staged uploads; os.TempDir() when empty.
	SpoolDir string
	// BlockSize is the size of each block of an upload larger than
	// SingleUploadMax; DefaultBlockSize when zero.
	BlockSize int64
	// SingleUploadMax is the largest blob written with one request;
	// blockblob.MaxUploadBlobBytes when zero. Larger ones go in blocks.
	SingleUploadMax int64
	// Transport replaces the HTTP client (tests).
	Transport policy.Transporter
}

// DefaultBlockSize is the block size of a multi-block upload.
const DefaultBlockSize = 8 << 20

// requestTimeout bounds one try of one request; the SDK retries a few
// times on transient failures before the call gives up.
const requestTimeout = 2 * time.Minute

// Store is a container of artifact blobs. It is safe for concurrent use.
type Store struct {
	c         *container.Client
	name      string
	spool     string
	blockSize int64
	single    int64
}

var _ fleetblob.Store = (*Store)(nil)

// New connects to the container. On the emulator it creates the container
// if missing; in Azure, Terraform owns it.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Container == "" {
		cfg.Container = DefaultContainer
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.SingleUploadMax <= 0 {
		cfg.SingleUploadMax = blockblob.MaxUploadBlobBytes
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = os.TempDir()
	}
	c, err := NewContainerClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Store{c: c, name: cfg.Container, spool: cfg.SpoolDir, blockSize: cfg.BlockSize, single: cfg.SingleUploadMax}, nil
}

// NewContainerClient is the client of cfg's container, authenticated as
// New documents (other stores in the same container use it too: the run
// logs). On the emulator it creates the container if missing.
func NewContainerClient(ctx context.Context, cfg Config) (*container.Client, error) {
	if cfg.Container == "" {
		cfg.Container = DefaultContainer
	}
	if cfg.ServiceURL == "" && cfg.Emulator {
		cfg.ServiceURL = EmulatorServiceURL
	}
	if cfg.ServiceURL == "" {
		return nil, errors.New("azblob: no service URL")
	}
	if !strings.HasPrefix(cfg.ServiceURL, "https://") && !cfg.Emulator {
		return nil, fmt.Errorf("azblob: service URL %q is not https (plain http only with the emulator)", cfg.ServiceURL)
	}
	url := strings.TrimSuffix(cfg.ServiceURL, "/") + "/" + cfg.Container
	opts := &container.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: 3, TryTimeout: requestTimeout}
	if cfg.Transport != nil {
		opts.Transport = cfg.Transport
	}
	var (
		c   *container.Client
		err error
	)
	switch {
	case cfg.Emulator && cfg.Credential == nil:
		key, kerr := container.NewSharedKeyCredential(EmulatorAccount, EmulatorKey)
		if kerr != nil {
			return nil, fmt.Errorf("azblob: emulator key: %w", kerr)
		}
		c, err = container.NewClientWithSharedKeyCredential(url, key, opts)
	default:
		cred := cfg.Credential
		if cred == nil {
			if cred, err = newCredential(cfg.ClientID); err != nil {
				return nil, err
			}
		}
		c, err = container.NewClient(url, cred, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("azblob: client for %s: %w", url, err)
	}
	if cfg.Emulator {
		if _, err := c.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return nil, fmt.Errorf("azblob: create container %s: %w", cfg.Container, MapError(err))
		}
	}
	return c, nil
}

// newCredential is the managed identity named by clientID, or
// DefaultAzureCredential (managed identity in Azure, the developer's login
// elsewhere).
func newCredential(clientID string) (azcore.TokenCredential, error) {
	if clientID != "" {
		cred, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: azidentity.ClientID(clientID)})
		if err != nil {
			return nil, fmt.Errorf("azblob: managed identity %s: %w", clientID, err)
		}
		return cred, nil
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("azblob: credential: %w", err)
	}
	return cred, nil
}

func (s *Store) blob(k fleetblob.Key) *blockblob.Client { return s.c.NewBlockBlobClient(k.String()) }

// Stage spools r to a temporary file, hashing it (SHA-256 for its name,
// MD5 for the service to check the upload against).
func (s *Store) Stage(ctx context.Context, namespace string, r io.Reader, limit int64) (fleetblob.Staged, error) {
	if err := fleetblob.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.spool, "fleet-blob-*")
	if err != nil {
		return nil, fmt.Errorf("azblob stage: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	sum, md := sha256.New(), md5.New()
	n, err := fleetblob.CopyLimited(ctx, io.MultiWriter(f, sum, md), r, limit)
	if err != nil {
		return nil, err
	}
	keep = true
	return &staged{s: s, f: f, size: n, md5: md.Sum(nil),
		key: fleetblob.Key{Namespace: namespace, SHA256: hex.EncodeToString(sum.Sum(nil))}}, nil
}

type staged struct {
	s    *Store
	f    *os.File
	key  fleetblob.Key
	size int64
	md5  []byte
}

func (b *staged) Key() fleetblob.Key { return b.key }
func (b *staged) Size() int64        { return b.size }

// Discard removes the spool file.
func (b *staged) Discard() error {
	if b.f == nil {
		return nil
	}
	f := b.f
	b.f = nil
	err := f.Close()
	if rerr := os.Remove(f.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("azblob discard: %w", err)
	}
	return nil
}

// maxCommitAttempts bounds the create/touch loop: each turn means a delete
// removed the blob between our create and our touch.
const maxCommitAttempts = 8

// Commit writes the blob unless it exists; if it does, it sets its metadata
// to give it a new ETag. A touch that finds the blob gone (a delete got in
// between) writes it again.
func (b *staged) Commit(ctx context.Context) (fleetblob.Info, error) {
	if b.f == nil {
		return fleetblob.Info{}, errors.New("azblob commit: the staged upload was discarded")
	}
	for range maxCommitAttempts {
		etag, err := b.create(ctx)
		if err == nil {
			return b.info(etag), nil
		}
		if !bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
			return fleetblob.Info{}, fmt.Errorf("azblob commit %s: %w", b.key, MapError(err))
		}
		resp, err := b.s.blob(b.key).SetMetadata(ctx, metadata(b.key), nil)
		if err == nil {
			return b.info(*resp.ETag), nil
		}
		if !bloberror.HasCode(err, bloberror.BlobNotFound) {
			return fleetblob.Info{}, fmt.Errorf("azblob commit %s: %w", b.key, MapError(err))
		}
	}
	return fleetblob.Info{}, fmt.Errorf("azblob commit %s: deleted and written again %d times in a row: %w", b.key, maxCommitAttempts, store.ErrUnavailable)
}

func (b *staged) info(etag azcore.ETag) fleetblob.Info {
	return fleetblob.Info{Key: b.key, Size: b.size, Version: string(etag)}
}

func metadata(k fleetblob.Key) map[string]*string {
	sum := k.SHA256
	return map[string]*string{"sha256": &sum}
}

var ifAbsent = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to(azcore.ETagAny)}}

// create writes the spool file as the blob, only if no blob has the name.
// Up to SingleUploadMax it is one Put Blob whose MD5 the service checks;
// beyond, blocks and a Put Block List carrying the condition (the SDK's
// UploadFile drops access conditions on its block path).
func (b *staged) create(ctx context.Context) (azcore.ETag, error) {
	bb := b.s.blob(b.key)
	headers := &blob.HTTPHeaders{BlobContentType: to("application/octet-stream"), BlobContentMD5: b.md5}
	if b.size <= b.s.single {
		resp, err := bb.Upload(ctx, streaming.NopCloser(io.NewSectionReader(b.f, 0, b.size)), &blockblob.UploadOptions{
			HTTPHeaders: headers, Metadata: metadata(b.key), AccessConditions: ifAbsent,
			TransactionalValidation: blob.TransferValidationTypeMD5(b.md5),
		})
		if err != nil {
			return "", err
		}
		return *resp.ETag, nil
	}
	var ids []string
	for off := int64(0); off < b.size; off += b.s.blockSize {
		n := min(b.s.blockSize, b.size-off)
		// Block ids are per upload, so concurrent uploads of the same
		// blob never commit each other's blocks.
		id := blockID(len(ids))
		if _, err := bb.StageBlock(ctx, id, streaming.NopCloser(io.NewSectionReader(b.f, off, n)), nil); err != nil {
			return "", err
		}
		ids = append(ids, id)
	}
	resp, err := bb.CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{
		HTTPHeaders: headers, Metadata: metadata(b.key), AccessConditions: ifAbsent,
	})
	if err != nil {
		return "", err
	}
	return *resp.ETag, nil
}

// blockID is a fresh random block id; Azure requires every id of a blob
// to have the same length.
func blockID(i int) string {
	var raw [24]byte
	_, _ = rand.Read(raw[:16])
	binary.BigEndian.PutUint64(raw[16:], uint64(i))
	return base64.StdEncoding.EncodeToString(raw[:])
}

// Open streams the blob. A dropped connection is resumed at the same ETag,
// so a reader never mixes two versions; if the blob is gone by then, the
// reader ends with an error.
func (s *Store) Open(ctx context.Context, key fleetblob.Key) (io.ReadCloser, fleetblob.Info, error) {
	if err := key.Validate(); err != nil {
		return nil, fleetblob.Info{}, err
	}
	resp, err := s.blob(key).DownloadStream(ctx, nil)
	if err != nil {
		return nil, fleetblob.Info{}, fmt.Errorf("azblob open %s: %w", key, MapError(err))
	}
	info := fleetblob.Info{Key: key, Size: deref(resp.ContentLength), Version: string(deref(resp.ETag))}
	return resp.NewRetryReader(ctx, &blob.RetryReaderOptions{MaxRetries: 3}), info, nil
}

// Stat reads the blob's properties.
func (s *Store) Stat(ctx context.Context, key fleetblob.Key) (fleetblob.Info, error) {
	if err := key.Validate(); err != nil {
		return fleetblob.Info{}, err
	}
	resp, err := s.blob(key).GetProperties(ctx, nil)
	if err != nil {
		return fleetblob.Info{}, fmt.Errorf("azblob stat %s: %w", key, MapError(err))
	}
	return fleetblob.Info{Key: key, Size: deref(resp.ContentLength), Version: string(deref(resp.ETag))}, nil
}

// Delete removes the blob, with If-Match when ifVersion is set.
func (s *Store) Delete(ctx context.Context, key fleetblob.Key, ifVersion string) error {
	if err := key.Validate(); err != nil {
		return err
	}
	var opts *blob.DeleteOptions
	if ifVersion != "" {
		etag := azcore.ETag(ifVersion)
		opts = &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}}
	}
	_, err := s.blob(key).Delete(ctx, opts)
	switch {
	case err == nil, bloberror.HasCode(err, bloberror.BlobNotFound):
		return nil
	case bloberror.HasCode(err, bloberror.ConditionNotMet):
		// Azurite answers 412, not 404, for If-Match on a missing blob:
		// look, so that deleting what is gone stays no error.
		if _, serr := s.Stat(ctx, key); errors.Is(serr, fleetblob.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("azblob delete %s: %w", key, fleetblob.ErrVersion)
	}
	return fmt.Errorf("azblob delete %s: %w", key, MapError(err))
}

// MapError turns the SDK's errors into the blob.Store contract's: a
// missing blob is ErrNotFound, an unreachable or overloaded service
// ErrUnavailable (wrapped with the cause); a missing container, a refused
// credential and the like stay as they are, a fault of configuration.
func MapError(err error) error {
	var re *azcore.ResponseError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case bloberror.HasCode(err, bloberror.BlobNotFound):
		return fmt.Errorf("%w: %w", fleetblob.ErrNotFound, err)
	case errors.As(err, &re):
		if re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= http.StatusInternalServerError {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		if re.StatusCode == http.StatusNotFound && re.ErrorCode == "" {
			// A HEAD answers 404 without an error body.
			return fmt.Errorf("%w: %w", fleetblob.ErrNotFound, err)
		}
		return err
	}
	// No response at all: the network, DNS, TLS, or a credential that could
	// not get a token.
	var authErr *azidentity.AuthenticationFailedError
	if errors.As(err, &authErr) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

func to[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
