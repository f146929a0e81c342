package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxProfileBodyBytes bounds a persona's instructions. Every job submitted
// with the persona carries a copy (JobProfile.Body), so the bound keeps
// profiles from eating the job document's room.
const MaxProfileBodyBytes = 64 << 10

// Profile is one immutable version of a persona: the capabilities any
// factory running it must hold, defaults for the jobs that name it, and the
// instructions (Markdown) the engine works under.
type Profile struct {
	Name         string   `json:"name"`
	ProductID    string   `json:"productId"`
	Version      int64    `json:"version"`
	Capabilities []string `json:"capabilities"`
	// Engine, when set, is the engine a job gets (engine:<Engine>) when its
	// manifest names none.
	Engine string `json:"engine,omitempty"`
	// Budget fills the parts of a job's budget its manifest leaves out.
	Budget    Budget    `json:"budget"`
	Body      string    `json:"body"`
	CreatedBy string    `json:"createdBy,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// JobProfile is the profile version a job was submitted with, snapshotted
// into the job so a re-run (requeue, retry, reap) works under the same
// instructions and needs nothing but the job to do so.
type JobProfile struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// Capabilities are those the profile added to the job's own (the ones
	// the manifest did not list already): /explain names them.
	Capabilities []string `json:"capabilities"`
	// Body is the version's instructions, handed to the engine.
	Body string `json:"body"`
}

// ParseProfile parses a profile document for name: YAML front matter
// (capabilities, engine, budget; name, when given, must be name) and the
// instructions as the body. Errors are invalid_argument naming the field.
func ParseProfile(name string, src []byte) (*Profile, error) {
	if err := ValidateName("name", name); err != nil {
		return nil, err
	}
	front, body, err := splitFrontMatter(src)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			return nil, Invalid("profile", "%s", fe.Message)
		}
		return nil, err
	}
	p := &Profile{Name: name, Body: body, Capabilities: []string{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(front))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, Invalid("profile", "front matter is not valid YAML: %v", err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, Invalid("profile", "front matter must be a single YAML document")
	}
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			return nil, Invalid("profile", "front matter must be a mapping of field: value")
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(root.Content); i += 2 {
			if err := checkKey("profile", root.Content[i]); err != nil {
				return nil, err
			}
			key, val := root.Content[i].Value, root.Content[i+1]
			if seen[key] {
				return nil, Invalid(key, "appears twice")
			}
			seen[key] = true
			if err := p.set(key, val); err != nil {
				return nil, err
			}
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Profile) set(key string, n *yaml.Node) error {
	switch key {
	case "name":
		var s string
		if err := decodeScalar(key, n, &s); err != nil {
			return err
		}
		if s != p.Name {
			return Invalid("name", "%q differs from the profile's name %q in the path", s, p.Name)
		}
		return nil
	case "capabilities":
		return decodeStrings(key, n, &p.Capabilities)
	case "engine":
		return decodeScalar(key, n, &p.Engine)
	case "budget":
		// The manifest's budget rules, one place: parse it as a manifest
		// field and keep the result.
		var m Manifest
		if err := manifestFields["budget"](&m, key, n); err != nil {
			return err
		}
		p.Budget = m.Budget
		return nil
	}
	return Invalid(key, "unknown field (known: name, capabilities, engine, budget)")
}

func (p *Profile) validate() error {
	if len(p.Body) > MaxProfileBodyBytes {
		return Invalid("body", "the instructions are %d bytes, at most %d allowed", len(p.Body), MaxProfileBodyBytes)
	}
	// Free text as a title is: an operator scoped to one product must not
	// store escapes that command the terminal of an admin reading it.
	if err := ValidateText("body", p.Body, MaxProfileBodyBytes); err != nil {
		return err
	}
	caps, err := ValidateCapabilities("capabilities", p.Capabilities)
	if err != nil {
		return err
	}
	p.Capabilities = caps
	if p.Engine != "" {
		if err := ValidateName("engine", p.Engine); err != nil {
			return err
		}
	}
	return nil
}

// engineKind is the capability kind naming an engine (engine:claude).
const engineKind = "engine:"

// ApplyProfile snapshots p into j: p's capabilities merged into j's (j's
// first, duplicates dropped), engine:<p.Engine> when j names no engine, and
// p's budget where j's is silent. A merge past MaxCapabilities is invalid,
// naming persona.
func (j *Job) ApplyProfile(p *Profile) error {
	merged := slices.Clone(j.Capabilities)
	var added []string
	add := func(c string) {
		if !slices.Contains(merged, c) {
			merged = append(merged, c)
			added = append(added, c)
		}
	}
	for _, c := range p.Capabilities {
		add(c)
	}
	if p.Engine != "" && !slices.ContainsFunc(merged, func(c string) bool { return strings.HasPrefix(c, engineKind) }) {
		add(engineKind + p.Engine)
	}
	if len(merged) > MaxCapabilities {
		return Invalid("persona", "profile %s adds %d capabilities to the job's %d: at most %d allowed in all",
			p.Name, len(added), len(j.Capabilities), MaxCapabilities)
	}
	if j.Budget.Wall == 0 {
		j.Budget.Wall = p.Budget.Wall
	}
	if j.Budget.USD == 0 {
		j.Budget.USD = p.Budget.USD
	}
	if added == nil {
		added = []string{}
	}
	j.Capabilities = merged
	j.Persona = p.Name
	j.Profile = &JobProfile{Name: p.Name, Version: p.Version, Capabilities: added, Body: p.Body}
	return nil
}

// ProfileVersionID names version v of profile name in its product's
// partition; zero-padded so a partition's id order is version order. Names
// hold no ':', so it never collides with a latest pointer (named name).
func ProfileVersionID(name string, v int64) string { return fmt.Sprintf("%s:%09d", name, v) }
