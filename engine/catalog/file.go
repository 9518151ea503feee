package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ParseEntries reads a catalog file: a JSON list of {"name", "description"}
// objects, "token_ids" optional (verified by Compile). Unknown keys and
// trailing data are errors.
func ParseEntries(data []byte) ([]Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var es []Entry
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		return nil, fmt.Errorf("%w: a catalog is a JSON list of {\"name\", \"description\"} objects", ErrInvalid)
	}
	if err := dec.Decode(&es); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the catalog's list", ErrInvalid)
	}
	return es, nil
}
