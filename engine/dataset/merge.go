package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// ConflictError reports two records that cannot both be right: one id at
// two indexes, two ids at one index, or one record with two outcomes.
type ConflictError struct {
	A, B       Record
	SourceA    string
	SourceB    string
	Difference string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("records %q (line %d, %s) and %q (line %d, %s) conflict: %s", e.A.ID, e.A.Line, e.SourceA, e.B.ID, e.B.Line, e.SourceB, e.Difference)
}

// Source is one log to merge.
type Source struct {
	Name string
	Log
}

// Merge joins the logs' records in input order (by index), under their
// header. Every log with records must have a header (else a
// *NoHeaderError), and all headers must be the same (else a
// *MismatchError naming the first log and the one that differs): records
// scored differently are not comparable. A record found in several logs is
// kept once when its outcome (the answer, or the error) is the same in
// each; anything else that disagrees is a *ConflictError. The header is nil
// when no log has one.
func Merge(srcs []Source) (*Header, []Record, error) {
	var head *Header
	headName := ""
	for _, s := range srcs {
		switch {
		case s.Header == nil && len(s.Records) > 0:
			return nil, nil, &NoHeaderError{s.Name}
		case s.Header == nil:
		case head == nil:
			head, headName = s.Header, s.Name
		default:
			if err := Compare(*head, *s.Header, headName, s.Name); err != nil {
				return nil, nil, err
			}
		}
	}
	type entry struct {
		rec Record
		src string
	}
	byIndex := map[int]entry{}
	byID := map[string]int{}
	for _, s := range srcs {
		for _, r := range s.Records {
			if i, ok := byID[r.ID]; ok && i != r.Index {
				o := byIndex[i]
				return nil, nil, &ConflictError{o.rec, r, o.src, s.Name, fmt.Sprintf("one id at two indexes (%d and %d)", i, r.Index)}
			}
			if o, ok := byIndex[r.Index]; ok {
				if o.rec.ID != r.ID {
					return nil, nil, &ConflictError{o.rec, r, o.src, s.Name, fmt.Sprintf("two ids at index %d", r.Index)}
				}
				if d := outcomeDiff(o.rec, r); d != "" {
					return nil, nil, &ConflictError{o.rec, r, o.src, s.Name, d}
				}
				continue
			}
			byIndex[r.Index] = entry{r, s.Name}
			byID[r.ID] = r.Index
		}
	}
	out := make([]Record, 0, len(byIndex))
	for _, e := range byIndex {
		out = append(out, e.rec)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return head, out, nil
}

// outcomeDiff says how two results of one record differ ("" when they give
// the same answer or the same error).
func outcomeDiff(a, b Record) string {
	switch {
	case a.Line != b.Line:
		return fmt.Sprintf("lines %d and %d", a.Line, b.Line)
	case a.Error != b.Error:
		return fmt.Sprintf("errors %q and %q", a.Error, b.Error)
	case !jsonEqual(a.Answer(), b.Answer()):
		return fmt.Sprintf("answers %s and %s", a.Answer(), b.Answer())
	}
	return ""
}

// jsonEqual compares two JSON values ignoring layout.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// Missing returns the indexes below n that recs (sorted by index) lack.
func Missing(recs []Record, n int) []int {
	var out []int
	j := 0
	for i := 0; i < n; i++ {
		for j < len(recs) && recs[j].Index < i {
			j++
		}
		if j >= len(recs) || recs[j].Index != i {
			out = append(out, i)
		}
	}
	return out
}
