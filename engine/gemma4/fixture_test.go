package gemma4

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// fixtureDir extracts testdata/<name>.tar.gz into a temporary folder (once
// per test binary) and returns it.
var fixtureDirs sync.Map

func fixtureDir(t testing.TB, name string) string {
	t.Helper()
	if d, ok := fixtureDirs.Load(name); ok {
		return d.(string)
	}
	f, err := os.Open(filepath.Join("..", "..", "testdata", name+".tar.gz"))
	if err != nil {
		t.Fatalf("fixture: %v (the repository's testdata/ should hold it)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gemma4-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(h.Name)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixtureDirs.Store(name, dir)
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	fixtureDirs.Range(func(_, v any) bool {
		os.RemoveAll(v.(string))
		return true
	})
	os.Exit(code)
}

// fixtureData is one fixture, opened (closed when the test ends).
type fixtureData struct {
	*Fixture
	name string
}

func loadFixture(t testing.TB, name string) *fixtureData {
	t.Helper()
	fx, err := OpenFixture(fixtureDir(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Close() })
	if fx.scoring == nil || len(fx.scoring.Fields) == 0 {
		t.Fatalf("%s: no scoring_ids.json fields", name)
	}
	return &fixtureData{fx, name}
}

func (fx *fixtureData) model(t testing.TB) *Model {
	t.Helper()
	m, err := fx.Load()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
