package cosmos

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// fieldName is what a Cond.Field may be: a plain top-level property name.
// Field names are the only caller text that reaches the SQL; values always
// travel as parameters.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedWords are Cosmos DB SQL keywords. A property with such a name
// cannot be written as c.name and is written c["name"] instead.
var reservedWords = map[string]bool{
	"and": true, "array": true, "as": true, "asc": true, "between": true,
	"by": true, "case": true, "cast": true, "convert": true, "cross": true,
	"desc": true, "distinct": true, "else": true, "end": true, "escape": true,
	"exists": true, "false": true, "first": true, "for": true, "from": true,
	"group": true, "having": true, "in": true, "inner": true, "insert": true,
	"into": true, "is": true, "join": true, "last": true, "left": true,
	"like": true, "limit": true, "not": true, "null": true, "offset": true,
	"on": true, "or": true, "order": true, "outer": true, "over": true,
	"right": true, "select": true, "set": true, "then": true, "top": true,
	"true": true, "udf": true, "undefined": true, "update": true,
	"value": true, "when": true, "where": true, "with": true,
}

// Statement is a parameterised Cosmos DB SQL query.
type Statement struct {
	Text   string
	Params []azcosmos.QueryParameter
	// CrossPartition is set when the statement runs without a partition key.
	CrossPartition bool
	// MatchesNothing is set when a condition no document can satisfy (IN
	// with no values) makes the result empty; Text is then empty and the
	// store answers without a round trip.
	MatchesNothing bool
}

// BuildQuery translates a store query into the only two shapes the adapter
// ever sends:
//
//	SELECT * FROM c [WHERE <conds>] ORDER BY c.id [DESC]   (single partition)
//	SELECT * FROM c [WHERE <conds>]                 (cross partition)
//
// where <conds> is "c.f = @pN", "c.f IN (@pN, …)" and "c.f < @pN" joined
// by AND. A range filter is a plain filter too: every partition applies it
// on its own (from the range index), so it needs no query plan.
//
// ORDER BY c.id is only used within one partition. There the whole query runs
// on the one physical partition that holds the logical partition, whose
// index returns documents in order, so the gateway can serve it page by page.
// Across partitions an ORDER BY needs a client-side merge of every
// partition's sorted stream (a query plan plus a k-way merge), which the Go
// SDK does not implement; the gateway answers such queries 400. The same
// holds for aggregates, TOP, DISTINCT, GROUP BY and OFFSET/LIMIT, which is
// why coord.Query offers only plain filters and why a cross-partition result
// has no defined order.
//
// It is exported so that tests can enumerate every statement shape.
func BuildQuery(where []store.Cond, partitioned, descending bool) (Statement, error) {
	if descending && !partitioned {
		return Statement{}, fmt.Errorf("a cross-partition query has no order to reverse (Descending)")
	}
	var (
		b       strings.Builder
		params  []azcosmos.QueryParameter
		nothing bool
	)
	b.WriteString("SELECT * FROM c")
	for i, c := range where {
		if !fieldName.MatchString(c.Field) {
			return Statement{}, fmt.Errorf("query field %q: must match %s", c.Field, fieldName)
		}
		if i == 0 {
			b.WriteString(" WHERE ")
		} else {
			b.WriteString(" AND ")
		}
		b.WriteString(propertyRef(c.Field))
		switch c.Op {
		case store.OpEq, store.OpLt, store.OpGt:
			if len(c.Values) != 1 {
				return Statement{}, fmt.Errorf("query field %q: %s takes one value, got %d", c.Field, c.Op, len(c.Values))
			}
			if _, ok := c.Values[0].(bool); ok && c.Op != store.OpEq {
				return Statement{}, fmt.Errorf("query field %q: %s takes a string or a number, got a bool", c.Field, c.Op)
			}
			p, err := param(len(params), c.Field, c.Values[0])
			if err != nil {
				return Statement{}, err
			}
			params = append(params, p)
			b.WriteString(" " + string(c.Op) + " ")
			b.WriteString(p.Name)
		case store.OpIn:
			if len(c.Values) == 0 {
				nothing = true
				continue
			}
			b.WriteString(" IN (")
			for j, v := range c.Values {
				p, err := param(len(params), c.Field, v)
				if err != nil {
					return Statement{}, err
				}
				params = append(params, p)
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(p.Name)
			}
			b.WriteString(")")
		default:
			return Statement{}, fmt.Errorf("query field %q: unsupported operator %q", c.Field, c.Op)
		}
	}
	if nothing {
		return Statement{CrossPartition: !partitioned, MatchesNothing: true}, nil
	}
	if partitioned {
		b.WriteString(" ORDER BY c.id")
		if descending {
			b.WriteString(" DESC")
		}
	}
	return Statement{Text: b.String(), Params: params, CrossPartition: !partitioned}, nil
}

// propertyRef writes a validated top-level field as a property reference.
func propertyRef(field string) string {
	if reservedWords[strings.ToLower(field)] {
		return `c["` + field + `"]`
	}
	return "c." + field
}

// param makes the n-th query parameter, accepting only JSON scalars: they are
// the values stored documents can compare equal to.
func param(n int, field string, v any) (azcosmos.QueryParameter, error) {
	name := "@p" + strconv.Itoa(n)
	switch x := v.(type) {
	case string, bool,
		int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64:
		return azcosmos.QueryParameter{Name: name, Value: x}, nil
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return azcosmos.QueryParameter{}, fmt.Errorf("query field %q: value %v is not a JSON number", field, x)
		}
		return azcosmos.QueryParameter{Name: name, Value: x}, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return azcosmos.QueryParameter{}, fmt.Errorf("query field %q: value %v is not a JSON number", field, x)
		}
		return azcosmos.QueryParameter{Name: name, Value: x}, nil
	case json.Number:
		if _, err := x.Float64(); err != nil {
			return azcosmos.QueryParameter{}, fmt.Errorf("query field %q: value %q is not a JSON number", field, x)
		}
		return azcosmos.QueryParameter{Name: name, Value: x}, nil
	default:
		return azcosmos.QueryParameter{}, fmt.Errorf("query field %q: value of type %T is not a string, number or bool", field, v)
	}
}
