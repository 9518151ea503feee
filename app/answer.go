package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ExtractAnswer finds the model's JSON answer: the first complete object in
// text that holds at least one of fields (any object when fields is empty),
// compacted. A stray {} or an example object without the fields is skipped.
func ExtractAnswer(text string, fields []string) (json.RawMessage, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return nil, errors.New("no text")
	}
	var firstErr error
	seen := false
	for from := 0; ; {
		i := strings.IndexByte(t[from:], '{')
		if i < 0 {
			break
		}
		i += from
		seen = true
		dec := json.NewDecoder(strings.NewReader(t[i:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("not valid JSON: %v", err)
			}
			from = i + 1
			continue
		}
		from = i + int(dec.InputOffset())
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || !holdsAny(obj, fields) {
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	switch {
	case !seen:
		return nil, errors.New("no JSON object in the text")
	case firstErr != nil:
		return nil, firstErr
	}
	return nil, fmt.Errorf("no JSON object with the fields (%s)", strings.Join(fields, ", "))
}

func holdsAny(obj map[string]json.RawMessage, fields []string) bool {
	if len(fields) == 0 {
		return true
	}
	for _, f := range fields {
		if _, ok := obj[f]; ok {
			return true
		}
	}
	return false
}
