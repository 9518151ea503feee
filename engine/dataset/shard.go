package dataset

import (
	"fmt"
	"strconv"
	"strings"
)

// Shard is part I of N of a file's records (0 <= I < N): the records whose
// Index is I modulo N. Cutting by position rather than by a hash of the id
// makes the shards' sizes differ by at most one record, whatever the ids;
// every shard reads the whole file, so the same file must be given to all.
type Shard struct{ I, N int }

// All is the whole file.
var All = Shard{0, 1}

// ParseShard reads "I/N", I from 0 (Kubernetes' JOB_COMPLETION_INDEX) to N-1.
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("shard %q: want I/N, as 0/4 (the first of four)", s)
	}
	if n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard %q: want 0 <= I < N", s)
	}
	return Shard{i, n}, nil
}

// Has reports whether the record at index belongs to the shard.
func (s Shard) Has(index int) bool { return s.N <= 1 || index%s.N == s.I }

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.I, s.N) }
