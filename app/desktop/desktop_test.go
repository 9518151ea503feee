package desktop

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoWindowWithoutTags(t *testing.T) {
	if HasWindow {
		t.Skip("built with the window")
	}
	err := Run(context.Background(), Options{Model: "none"})
	if !errors.Is(err, ErrNoWindow) || !strings.Contains(err.Error(), "verdict serve") {
		t.Errorf("Run = %v", err)
	}
}

// The window's icon is the app icon Wails' packaging uses.
func TestIconMatchesBuildAssets(t *testing.T) {
	a, err := os.ReadFile("appicon.png")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "build", "appicon.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("app/desktop/appicon.png differs from build/appicon.png")
	}
}
