package native

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// niceOf reads thread tid's nice value from /proc (field 19 of stat).
func niceOf(t *testing.T, tid int) int {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKernelThreadsYield: the thread that runs a parallel kernel, and the
// pool's threads, run at nice 5, so the kernels yield to interactive work.
func TestKernelThreadsYield(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer SetThreads(0)
	SetThreads(2)
	r := newRand(5)
	w := randMatrix(r, F32, 512, 512)
	x := randVec(r, 64*512, 1)
	y := make([]float32, 64*512)
	Linear(y, x, w, 64)
	if n := niceOf(t, syscall.Gettid()); n != 5 {
		t.Errorf("the calling thread runs at nice %d after a kernel, want 5", n)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	niced := 0
	for _, e := range tasks {
		id, _ := strconv.Atoi(e.Name())
		if niceOf(t, id) == 5 {
			niced++
		}
	}
	if niced < 2 { // the caller and at least one pool thread
		t.Errorf("%d threads at nice 5, want the caller and the pool's", niced)
	}
}
