package fleet

import (
	"fmt"
	"mime"
	"slices"
	"strings"
	"time"
)

// ArtifactKind says what an artifact holds.
type ArtifactKind string

// Artifact kinds.
const (
	ArtifactLog    ArtifactKind = "log"    // the engine's output
	ArtifactDiff   ArtifactKind = "diff"   // the change the run made
	ArtifactReport ArtifactKind = "report" // a usage or test report
	ArtifactOther  ArtifactKind = "other"
)

// DefaultArtifactMaxBytes is the largest artifact upload a coordinator
// takes unless configured otherwise (FLEET_ARTIFACT_MAX_BYTES): under the
// Functions host's 100 MiB request limit, which refuses larger bodies
// before the API sees them. A factory bounds its run logs by it.
const DefaultArtifactMaxBytes = 50 << 20

// ArtifactKinds lists every artifact kind.
func ArtifactKinds() []ArtifactKind {
	return []ArtifactKind{ArtifactLog, ArtifactDiff, ArtifactReport, ArtifactOther}
}

// ParseArtifactKind validates a kind; "" means other.
func ParseArtifactKind(field, s string) (ArtifactKind, error) {
	switch k := ArtifactKind(s); {
	case k == "":
		return ArtifactOther, nil
	case slices.Contains(ArtifactKinds(), k):
		return k, nil
	}
	return "", Invalid(field, "unknown kind %q (want %s)", s, alternatives(ArtifactKinds()))
}

// Artifact is the pointer document of some bytes a job produced: what they
// are and their digest. The bytes live in a blob store under the digest,
// never in the document store.
type Artifact struct {
	ID        string `json:"id"`
	JobID     string `json:"jobId"`
	ProductID string `json:"productId"`
	// RunID is the run that produced it, "" when an operator attached it
	// outside any run.
	RunID       string       `json:"runId"`
	Name        string       `json:"name"`
	Kind        ArtifactKind `json:"kind"`
	ContentType string       `json:"contentType"`
	Size        int64        `json:"size"`
	SHA256      string       `json:"sha256"`
	CreatedAt   time.Time    `json:"createdAt"`
}

// ArtifactID names artifact suffix of job jobID. The job id comes first so
// that the id alone locates the document (its partition is the job), and
// job ids hold no '.', so the first '.' splits them off again.
func ArtifactID(jobID, suffix string) string { return jobID + "." + suffix }

// ArtifactJobID returns the job of artifact id, or false when id is not an
// artifact id.
func ArtifactJobID(id string) (string, bool) {
	job, suffix, ok := strings.Cut(id, ".")
	if !ok || job == "" || suffix == "" || ValidateName("id", id) != nil {
		return "", false
	}
	return job, true
}

// DefaultContentType is the content type of bytes sent without one.
const DefaultContentType = "application/octet-stream"

// MaxContentTypeLen bounds a stored content type.
const MaxContentTypeLen = 200

// NormalizeContentType validates a media type sent with an artifact and
// returns it in canonical form; "" gives DefaultContentType.
func NormalizeContentType(field, s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultContentType, nil
	}
	if len(s) > MaxContentTypeLen {
		return "", Invalid(field, "is longer than %d characters", MaxContentTypeLen)
	}
	mt, params, err := mime.ParseMediaType(s)
	if err != nil {
		return "", Invalid(field, "%q is not a media type such as text/plain; charset=utf-8", s)
	}
	out := mime.FormatMediaType(mt, params)
	if out == "" {
		return "", Invalid(field, "%q is not a media type such as text/plain; charset=utf-8", s)
	}
	if len(out) > MaxContentTypeLen {
		// The canonical form can be longer than what was sent (a non-ASCII
		// parameter is percent-encoded): the bound holds for what is stored.
		return "", Invalid(field, "is longer than %d characters once written in canonical form", MaxContentTypeLen)
	}
	return out, nil
}

// ValidSHA256 reports whether s is a SHA-256 digest in lower-case hex.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ArtifactMessage is the event message of an artifact being added or removed.
func ArtifactMessage(verb string, a *Artifact) string {
	return fmt.Sprintf("artifact %s %s (%s, %d bytes, sha256 %s)", a.Name, verb, a.Kind, a.Size, a.SHA256)
}
