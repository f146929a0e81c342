package httpapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseOperatorTokens(t *testing.T) {
	t.Parallel()
	const tok, tok2 = "0123456789abcdef-token", "fedcba9876543210-token"
	for _, tc := range []struct {
		in   string
		want []OperatorToken
		err  string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: tok, want: []OperatorToken{{Name: "operator", Token: tok}}},
		{in: "alice:" + tok, want: []OperatorToken{{Name: "alice", Token: tok}}},
		{in: "alice:" + tok + ":p1|p2", want: []OperatorToken{{Name: "alice", Token: tok, Products: []string{"p1", "p2"}}}},
		{in: " alice : " + tok + " : p1 | p2 | p1 , bob:" + tok2, want: []OperatorToken{
			{Name: "alice", Token: tok, Products: []string{"p1", "p2"}}, {Name: "bob", Token: tok2}}},
		{in: "short", err: "entry 1: token is shorter than 16 characters"},
		{in: "alice:" + tok + ":p1:extra", err: "entry 1: has 4 ':'-separated parts"},
		{in: ":" + tok, err: "entry 1: name is required"},
		{in: "al ice:" + tok, err: "entry 1: name \"al ice\" may hold only"},
		{in: "alice:", err: "entry 1: token is shorter"},
		{in: "alice:" + tok + ":", err: "entry 1: product 1 is required (omit the third part for every product)"},
		{in: "alice:" + tok + ":p1||p2", err: "entry 1: product 2 is required"},
		{in: "alice:" + tok + ":../x", err: "entry 1: product 1 \"../x\" must not start with '.'"},
		{in: tok + ",", err: "entry 2: is empty"},
		{in: tok + ",,", err: "entry 2: is empty"},
		{in: tok + ",bob:" + tok, err: "entry 2: same token as entry 1"},
		{in: "alice:0123456789 abcdef-token", err: "entry 1: token may hold only printable ASCII without spaces"},
	} {
		got, err := ParseOperatorTokens(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%q", tc.in)
			require.NotContains(t, err.Error(), tok, "errors never quote a token")
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestOperatorMatchesAnyConfiguredToken(t *testing.T) {
	t.Parallel()
	s := &server{operators: operatorKeys([]OperatorToken{
		{Name: "a", Token: "token-a-0123456789"},
		{Token: "token-b-0123456789", Products: []string{"p1"}},
		{Name: "empty"},
	})}
	require.Len(t, s.operators, 2, "a token-less entry is dropped")
	require.Equal(t, "a", s.operator("token-a-0123456789").name)
	b := s.operator("token-b-0123456789")
	require.Equal(t, "operator", b.name)
	require.Equal(t, []string{"p1"}, b.products)
	require.Nil(t, s.operator("token-a-012345678"))
	require.Nil(t, s.operator(""))
	require.Nil(t, s.operator(strings.Repeat("x", 1000)))
}
