package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/gigafactory/fleet/shared/store"
)

// Continuation prefixes tell a single-partition continuation (the last id)
// from a cross-partition one (the last rowid), so one passed to the other
// kind of query is refused instead of misread.
const (
	partitionCont = "p:"
	descCont      = "d:" // a single-partition query in descending id order
	crossCont     = "x:"
)

// partitionPrefix is the continuation prefix of a single-partition query.
func partitionPrefix(q store.Query) string {
	if q.Descending {
		return descCont
	}
	return partitionCont
}

var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validField reports whether f may name a top-level field. Field names are
// spliced into SQL (so the planner can match expression indexes), which is
// safe only because this pattern admits no quote, dot or bracket.
func validField(f string) bool { return fieldName.MatchString(f) }

// fieldExpr is the SQL expression for a top-level field. The expression
// indexes are built from it too: SQLite uses an expression index only when
// the query repeats the indexed expression exactly.
func fieldExpr(f string) string { return `json_extract(body, '$.` + f + `')` }

func fieldType(f string) string { return `json_type(body, '$.` + f + `')` }

// buildQuery turns q into SQL text and arguments. Every value is a bound
// parameter. It selects limit+1 rows: the extra one only tells whether
// another page follows.
func buildQuery(t *table, q store.Query) (text string, args []any, limit int, err error) {
	if q.Limit < 0 {
		return "", nil, 0, fmt.Errorf("negative limit %d", q.Limit)
	}
	limit = pageSize(q.Limit)
	var b strings.Builder
	b.WriteString(`SELECT rid, pk, id, rev, body FROM `)
	b.WriteString(quoteIdent(t.name))
	if q.PartitionKey != "" {
		after, ok := strings.CutPrefix(q.Continuation, partitionPrefix(q))
		if !ok && q.Continuation != "" {
			return "", nil, 0, fmt.Errorf("continuation %q is not of a single-partition query in this order: %w", q.Continuation, store.ErrBadContinuation)
		}
		switch {
		case !q.Descending:
			// Ids are never empty, so id > '' starts at the top.
			b.WriteString(` WHERE pk = ? AND id > ?`)
			args = append(args, q.PartitionKey, after)
		case after == "":
			b.WriteString(` WHERE pk = ?`)
			args = append(args, q.PartitionKey)
		default:
			b.WriteString(` WHERE pk = ? AND id < ?`)
			args = append(args, q.PartitionKey, after)
		}
	} else {
		if q.Descending {
			return "", nil, 0, errors.New("a cross-partition query has no order to reverse (Descending)")
		}
		// rid > ? only from the second page on: on a first page it would
		// tie, for the planner, the (field, rowid) index of an equality
		// with a two-column index serving a range too ((stage,
		// leaseExpiresAt)), and it picks the former, which reads every
		// lease to find the expired ones.
		b.WriteString(` WHERE 1`)
		if q.Continuation != "" {
			s, ok := strings.CutPrefix(q.Continuation, crossCont)
			after, err := strconv.ParseInt(s, 10, 64)
			if !ok || err != nil || after < 0 {
				return "", nil, 0, fmt.Errorf("continuation %q is not of a cross-partition query: %w", q.Continuation, store.ErrBadContinuation)
			}
			b.WriteString(` AND rid > ?`)
			args = append(args, after)
		}
	}
	for _, c := range q.Where {
		cond, cargs, err := condSQL(c)
		if err != nil {
			return "", nil, 0, err
		}
		b.WriteString(` AND `)
		b.WriteString(cond)
		args = append(args, cargs...)
	}
	switch {
	case q.PartitionKey != "" && q.Descending:
		b.WriteString(` ORDER BY id DESC LIMIT ?`)
	case q.PartitionKey != "":
		b.WriteString(` ORDER BY id LIMIT ?`)
	default:
		b.WriteString(` ORDER BY rid LIMIT ?`)
	}
	args = append(args, limit+1)
	return b.String(), args, limit, nil
}

// condSQL renders one condition. Comparisons are type-exact, as in Cosmos
// DB: SQLite's json_extract returns 1 for true and the JSON text of an
// object or array, so each group of values is paired with a json_type guard
// ("5" never equals 5, true never equals 1).
func condSQL(c store.Cond) (string, []any, error) {
	if !validField(c.Field) {
		return "", nil, fmt.Errorf("invalid field name %q", c.Field)
	}
	switch c.Op {
	case store.OpEq:
		if len(c.Values) != 1 {
			return "", nil, fmt.Errorf("field %q: = takes one value, got %d", c.Field, len(c.Values))
		}
	case store.OpIn:
		if len(c.Values) == 0 {
			return "0", nil, nil // IN () holds for no document, as in Cosmos DB
		}
	case store.OpLt, store.OpGt:
		return rangeSQL(c)
	default:
		return "", nil, fmt.Errorf("field %q: unsupported operator %q", c.Field, c.Op)
	}
	var strs, nums, bools []any
	for _, v := range c.Values {
		kind, bound, err := bindValue(v)
		if err != nil {
			return "", nil, fmt.Errorf("field %q: %w", c.Field, err)
		}
		switch kind {
		case kindString:
			strs = append(strs, bound)
		case kindNumber:
			nums = append(nums, bound)
		case kindBool:
			bools = append(bools, bound)
		}
	}
	var (
		parts []string
		args  []any
	)
	if len(strs) > 0 {
		parts = append(parts, "("+fieldExpr(c.Field)+in(len(strs))+" AND "+fieldType(c.Field)+" = 'text')")
		args = append(args, strs...)
	}
	if len(nums) > 0 {
		parts = append(parts, "("+fieldExpr(c.Field)+in(len(nums))+" AND "+fieldType(c.Field)+" IN ('integer', 'real'))")
		args = append(args, nums...)
	}
	if len(bools) > 0 {
		// json_type names the boolean itself: 'true' or 'false'.
		parts = append(parts, "("+fieldType(c.Field)+in(len(bools))+")")
		args = append(args, bools...)
	}
	if len(parts) == 1 {
		return parts[0], args, nil
	}
	return "(" + strings.Join(parts, " OR ") + ")", args, nil
}

// rangeSQL renders field < value or field > value. As in Cosmos DB, only
// a value of the same JSON type compares: text by code point (SQLite's
// default BINARY collation of UTF-8 text), numbers numerically.
func rangeSQL(c store.Cond) (string, []any, error) {
	if len(c.Values) != 1 {
		return "", nil, fmt.Errorf("field %q: %s takes one value, got %d", c.Field, c.Op, len(c.Values))
	}
	kind, bound, err := bindValue(c.Values[0])
	if err != nil {
		return "", nil, fmt.Errorf("field %q: %w", c.Field, err)
	}
	op := " " + string(c.Op) + " ? AND "
	switch kind {
	case kindString:
		return "(" + fieldExpr(c.Field) + op + fieldType(c.Field) + " = 'text')", []any{bound}, nil
	case kindNumber:
		return "(" + fieldExpr(c.Field) + op + fieldType(c.Field) + " IN ('integer', 'real'))", []any{bound}, nil
	}
	return "", nil, fmt.Errorf("field %q: %s takes a string or a number, got %T", c.Field, c.Op, c.Values[0])
}

// in renders "= ?" or "IN (?, ...)" for n values.
func in(n int) string {
	if n == 1 {
		return " = ?"
	}
	return " IN (?" + strings.Repeat(", ?", n-1) + ")"
}

type valueKind int

const (
	kindString valueKind = iota
	kindNumber
	kindBool
)

// bindValue checks a condition value and converts it to what the driver
// binds: strings, numbers (int64 or float64) and booleans (as the json_type
// name), nothing else.
func bindValue(v any) (valueKind, any, error) {
	switch x := v.(type) {
	case string:
		return kindString, x, nil
	case bool:
		return kindBool, strconv.FormatBool(x), nil
	case int:
		return kindNumber, int64(x), nil
	case int8:
		return kindNumber, int64(x), nil
	case int16:
		return kindNumber, int64(x), nil
	case int32:
		return kindNumber, int64(x), nil
	case int64:
		return kindNumber, x, nil
	case uint:
		return uintValue(uint64(x))
	case uint8:
		return kindNumber, int64(x), nil
	case uint16:
		return kindNumber, int64(x), nil
	case uint32:
		return kindNumber, int64(x), nil
	case uint64:
		return uintValue(x)
	case float32:
		return floatValue(float64(x))
	case float64:
		return floatValue(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return kindNumber, i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return 0, nil, fmt.Errorf("invalid number %q", x)
		}
		return floatValue(f)
	}
	return 0, nil, fmt.Errorf("unsupported value %v of type %T (want string, number or bool)", v, v)
}

func uintValue(u uint64) (valueKind, any, error) {
	if u > math.MaxInt64 {
		return 0, nil, fmt.Errorf("value %d overflows int64", u)
	}
	return kindNumber, int64(u), nil
}

func floatValue(f float64) (valueKind, any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, nil, errors.New("value is not a finite number")
	}
	return kindNumber, f, nil
}
