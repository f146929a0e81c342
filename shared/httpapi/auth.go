package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/fleet"
)

// OperatorToken is one accepted operator bearer token.
type OperatorToken struct {
	// Name identifies the operator in logs and job events.
	Name string
	// Token is the secret the operator presents.
	Token string
	// Products scopes the token; empty means every product.
	Products []string
}

// MinOperatorTokenLen is the shortest operator token ParseOperatorTokens
// accepts: anything shorter is guessable.
const MinOperatorTokenLen = 16

// defaultOperatorName names an operator token configured without a name.
const defaultOperatorName = "operator"

// ParseOperatorTokens reads the FLEET_OPERATOR_TOKEN setting: a
// comma-separated list of entries, each one of
//
//	token                               an operator named "operator", every product
//	name:token                          a named operator, every product
//	name:token:productA|productB        a named operator scoped to those products
//
// Blanks around entries and parts are ignored. Names and products are plain
// names (letters, digits, '.', '_', '-'); tokens are at least
// MinOperatorTokenLen printable characters other than ',' and ':'. Empty
// entries, empty parts, a fourth part and a token listed twice are errors. An
// empty setting yields no tokens. Error messages never quote a token.
func ParseOperatorTokens(s string) ([]OperatorToken, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	entries := strings.Split(s, ",")
	out := make([]OperatorToken, 0, len(entries))
	seen := make(map[string]int, len(entries))
	for i, entry := range entries {
		n := i + 1
		t, err := parseOperatorEntry(strings.TrimSpace(entry))
		if err != nil {
			return nil, fmt.Errorf("operator token entry %d: %w", n, err)
		}
		if prev, dup := seen[t.Token]; dup {
			return nil, fmt.Errorf("operator token entry %d: same token as entry %d", n, prev)
		}
		seen[t.Token] = n
		out = append(out, t)
	}
	return out, nil
}

func parseOperatorEntry(entry string) (OperatorToken, error) {
	if entry == "" {
		return OperatorToken{}, fmt.Errorf("is empty (want token, name:token or name:token:productA|productB)")
	}
	parts := strings.Split(entry, ":")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	t := OperatorToken{Name: defaultOperatorName}
	switch len(parts) {
	case 1:
		t.Token = parts[0]
	case 2, 3:
		t.Name, t.Token = parts[0], parts[1]
		if err := fleet.ValidateName("name", t.Name); err != nil {
			return t, fmt.Errorf("name %s", messageOf(err))
		}
	default:
		return t, fmt.Errorf("has %d ':'-separated parts; want token, name:token or name:token:productA|productB", len(parts))
	}
	if len(t.Token) < MinOperatorTokenLen {
		return t, fmt.Errorf("token is shorter than %d characters", MinOperatorTokenLen)
	}
	if strings.IndexFunc(t.Token, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		return t, fmt.Errorf("token may hold only printable ASCII without spaces")
	}
	if len(parts) == 3 {
		for j, p := range strings.Split(parts[2], "|") {
			p = strings.TrimSpace(p)
			if err := fleet.ValidateName("product", p); err != nil {
				return t, fmt.Errorf("product %d %s (omit the third part for every product)", j+1, messageOf(err))
			}
			if !slices.Contains(t.Products, p) {
				t.Products = append(t.Products, p)
			}
		}
	}
	return t, nil
}

// messageOf is the client-facing message of a fleet error.
func messageOf(err error) string {
	var fe *fleet.Error
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

// operatorKey is a configured operator token kept as its SHA-256, so every
// comparison is between equal-length values and leaks no length.
type operatorKey struct {
	name     string
	products []string
	sum      [sha256.Size]byte
}

func operatorKeys(tokens []OperatorToken) []operatorKey {
	keys := make([]operatorKey, 0, len(tokens))
	for _, t := range tokens {
		if t.Token == "" {
			continue
		}
		name := t.Name
		if name == "" {
			name = defaultOperatorName
		}
		keys = append(keys, operatorKey{name: name, products: slices.Clone(t.Products), sum: sha256.Sum256([]byte(t.Token))})
	}
	return keys
}

// principal is who a request authenticated as.
type principal struct {
	kind fleet.PrincipalKind
	// id is the operator's name or the factory's id.
	id string
	// products scopes the principal; empty means every product.
	products []string
	// token is the factory's token; nil for operators.
	token *fleet.Token
	// capKey names the principal for the stream caps: the factory, or the
	// operator token (two tokens under one name are two principals).
	capKey string
}

func (p *principal) String() string { return string(p.kind) + ":" + p.id }

func (p *principal) isFactory() bool { return p.kind == fleet.PrincipalFactory }

// allows reports whether product is inside p's scope.
func (p *principal) allows(product string) bool {
	return len(p.products) == 0 || slices.Contains(p.products, product)
}

// only returns p's product when it is scoped to exactly one.
func (p *principal) only() (string, bool) {
	if len(p.products) == 1 {
		return p.products[0], true
	}
	return "", false
}

// covers reports whether p may manage factory f: f's products must all be
// inside p's scope, and a factory serving every product needs an unscoped
// principal, since acting on it affects every product.
func (p *principal) covers(f *fleet.Factory) bool {
	if len(p.products) == 0 {
		return true
	}
	if len(f.Products) == 0 {
		return false
	}
	for _, prod := range f.Products {
		if !p.allows(prod) {
			return false
		}
	}
	return true
}

// access says which principals a route admits.
type access int

const (
	public         access = iota // no token
	operatorOnly                 // operator tokens
	factoryOnly                  // factory tokens: the route acts as the factory
	anyPrincipal                 // operators, and factories within their products
	operatorOrSelf               // operators, and a factory acting on its own {id}
	// operatorOrHolder: operators, and a factory only for a job it holds
	// now (the job {id}, or the artifact {id}'s job). The handler checks
	// the holding (heldJobProduct, holderRead), as it reads the job anyway;
	// authorize admits the factory as for anyPrincipal.
	operatorOrHolder
)

func (a access) String() string {
	switch a {
	case public:
		return "public"
	case operatorOnly:
		return "operator"
	case factoryOnly:
		return "factory"
	case anyPrincipal:
		return "operator,factory"
	case operatorOrSelf:
		return "operator,factory-self"
	case operatorOrHolder:
		return "operator,factory-holder"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// authorize authenticates r and checks it may use a route of access a and
// the product its x-product-id names. It runs before the handler, so a
// request rejected here has touched nothing.
func (s *server) authorize(r *http.Request, a access) (*principal, error) {
	if a == public {
		return nil, nil
	}
	p, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	stateOf(r.Context()).principal = p.String()
	switch {
	case a == operatorOnly && p.isFactory():
		return nil, forbidden("this route needs an operator token; factory tokens may not use it")
	case a == factoryOnly && !p.isFactory():
		return nil, forbidden("this route acts as a factory and needs that factory's token")
	case a == operatorOrSelf && p.isFactory() && r.PathValue("id") != p.id:
		return nil, forbidden("a factory token may act only on its own factory")
	}
	if prod := r.Header.Get(headerProduct); prod != "" {
		if err := fleet.ValidateName(productField, prod); err != nil {
			return nil, err
		}
		if !p.allows(prod) {
			return nil, forbidden("product %s is outside this token's scope", prod)
		}
	}
	return p, nil
}

// authenticate resolves the bearer token of r.
func (s *server) authenticate(r *http.Request) (*principal, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return nil, unauthenticated("missing Authorization header; send Authorization: Bearer <token>")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimSpace(token)
	if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return nil, unauthenticated("malformed Authorization header; send Authorization: Bearer <token>")
	}
	if k := s.operator(token); k != nil {
		return &principal{kind: fleet.PrincipalOperator, id: k.name, products: k.products,
			capKey: "operator:" + k.name + ":" + hex.EncodeToString(k.sum[:6])}, nil
	}
	if !strings.HasPrefix(token, catalog.FactoryTokenPrefix) {
		return nil, errBadToken
	}
	tok, err := s.coord.AuthenticateFactory(r.Context(), token)
	if err != nil {
		if fleet.CodeOf(err) == fleet.CodeUnauthenticated {
			return nil, errBadToken
		}
		return nil, err
	}
	return &principal{kind: fleet.PrincipalFactory, id: tok.FactoryID, products: tok.Products, token: tok,
		capKey: "factory:" + tok.FactoryID}, nil
}

// errBadToken is the one answer for unknown and revoked tokens alike.
var errBadToken = unauthenticated("the token is unknown or revoked")

// operator finds the configured operator token equal to token. It compares
// against every configured token and selects without branching on the
// result, so the time taken says nothing about which token, or how much of
// one, matched.
func (s *server) operator(token string) *operatorKey {
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range s.operators {
		eq := subtle.ConstantTimeCompare(sum[:], s.operators[i].sum[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil
	}
	return &s.operators[match]
}
