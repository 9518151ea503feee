package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Record is one line of a result log: the outcome of one input record.
type Record struct {
	ID    string `json:"id"`
	Index int    `json:"index"`
	Line  int    `json:"line"`
	// Result is the scorer's result (absent on an error line).
	Result json.RawMessage `json:"result,omitempty"`
	// Error says why the record has no result ("" when it has one).
	Error string `json:"error,omitempty"`
	// ElapsedMS is the wall time of scoring the record, in milliseconds.
	ElapsedMS float64 `json:"elapsed_ms"`
}

// Answer is the "answer" of the record's result (nil on an error line or
// when the result has none).
func (r Record) Answer() json.RawMessage {
	if len(r.Result) == 0 {
		return nil
	}
	var v struct {
		Answer json.RawMessage `json:"answer"`
	}
	if json.Unmarshal(r.Result, &v) != nil {
		return nil
	}
	return v.Answer
}

// Writer appends records to a result log, one line each in a single write,
// so that a crash of the process loses no record it wrote and leaves at
// most a torn last line; it syncs the file to disk every SyncEvery (a crash
// of the machine loses at most that much) and on Close. The log's header
// goes before its first record, in the same write. All of a run's writes
// to its log go through its Writer.
type Writer struct {
	f         *os.File
	SyncEvery time.Duration
	synced    time.Time
	now       func() time.Time
	closed    bool
	header    *Header // the log's: read from it, or given by SetHeader
	written   bool    // the file holds the header line
}

// DefaultSyncEvery is how often a log is synced to disk. BenchmarkWrite on
// the development machine's ext4 disk: a 3 KB record with an fsync after
// every line took 0.8 to 2.3 ms, batched 0.03 to 0.05 ms; a record of the
// support-ticket schema takes 26 to 90 ms on the built-in model (2 shared
// cores), so syncing every line would cost up to 9% there and more on
// faster hardware. Once a second bounds both the cost and what a machine
// crash can lose; a killed process loses nothing either way.
const DefaultSyncEvery = time.Second

// SetHeader gives the log the header of this run: a log that has one
// must have the same (else a *MismatchError naming the log and "this
// run"); a log without one gets h before its first record.
func (w *Writer) SetHeader(h Header) error {
	if w.header != nil && w.written {
		return Compare(*w.header, h, w.f.Name(), "this run")
	}
	w.header = &h
	return nil
}

// Header is the log's header: the one it holds, or the one set (nil when
// neither).
func (w *Writer) Header() *Header { return w.header }

// Write appends rec as one line, after the header when the log has none
// yet (ErrNoHeader when no header was set).
func (w *Writer) Write(rec Record) error {
	line, err := encodeLine(rec)
	if err != nil {
		return err
	}
	if !w.written {
		if w.header == nil {
			return ErrNoHeader
		}
		head, err := encodeLine(w.header)
		if err != nil {
			return err
		}
		line = append(head, line...)
	}
	if _, err := w.f.Write(line); err != nil {
		return fmt.Errorf("write %s: %w", w.f.Name(), err)
	}
	w.written = true
	if now := w.now(); now.Sub(w.synced) >= w.SyncEvery {
		w.synced = now
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", w.f.Name(), err)
		}
	}
	return nil
}

// Close syncs and closes the log; a second Close does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.f.Sync()
	if e := w.f.Close(); err == nil {
		err = e
	}
	return err
}

// Name is the log's path.
func (w *Writer) Name() string { return w.f.Name() }

// ErrExists is returned by Create for a log that has records already and
// resume is false.
var ErrExists = errors.New("the output has results already: give --resume to go on with it, or remove it")

// Log is a result log's content.
type Log struct {
	// Header is its first line (nil for an empty log, and for one written
	// before logs had headers).
	Header  *Header
	Records []Record
}

// Create opens the result log at path for appending. Without resume, a log
// with content is refused (ErrExists). With resume, what it holds is
// returned, and a torn last line (a crash in the middle of a write) is cut
// off; a log with records but no header is a *NoHeaderError, and any other
// line that is not a record is an error. The caller sets the run's header
// (SetHeader) before the first Write.
func Create(path string, resume bool) (*Writer, Log, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, Log{}, err
	}
	fail := func(err error) (*Writer, Log, error) {
		f.Close()
		return nil, Log{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("%s is not a regular file", path))
	}
	var log Log
	if fi.Size() > 0 {
		if !resume {
			return fail(fmt.Errorf("%s: %w", path, ErrExists))
		}
		var good int64
		log, good, err = ReadLog(f, path, true)
		if err != nil {
			return fail(err)
		}
		if log.Header == nil && len(log.Records) > 0 {
			return fail(&NoHeaderError{path})
		}
		if good < fi.Size() {
			if err := f.Truncate(good); err != nil {
				return fail(fmt.Errorf("cut the torn last line of %s: %w", path, err))
			}
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fail(err)
	}
	w := &Writer{f: f, SyncEvery: DefaultSyncEvery, now: time.Now, synced: time.Now(), header: log.Header, written: log.Header != nil}
	return w, log, nil
}

// TornError reports a log whose last line is incomplete.
type TornError struct {
	Path string
	Line int
}

func (e *TornError) Error() string {
	return fmt.Sprintf("%s: line %d is torn (the run that wrote it stopped in the middle); resume it with score-file --resume first", e.Path, e.Line)
}

// ReadLog reads a result log: its header line, when it has one, then its
// records. With torn, an incomplete last line (no line ending, or not a
// record) is left out and good is the length of the part before it;
// without, it is a *TornError. Any other line that is not a record is an
// error naming it.
func ReadLog(r io.Reader, name string, torn bool) (log Log, good int64, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return Log{}, 0, err
		}
		if len(b) == 0 {
			return log, good, nil
		}
		complete := b[len(b)-1] == '\n'
		var rec Record
		var perr error
		isHeader := false
		if line == 1 && complete {
			var h Header
			if h, isHeader, perr = parseHeader(b, name); isHeader && perr != nil {
				return Log{}, 0, perr
			}
			if isHeader {
				log.Header = &h
			}
		}
		if !isHeader {
			rec, perr = parseRecord(b)
		}
		if !complete || perr != nil {
			// Only the last line can be torn: is there anything after it?
			last := err == io.EOF
			if !last {
				_, peek := br.Peek(1)
				last = peek == io.EOF
			}
			switch {
			case last && torn:
				return log, good, nil
			case last:
				return Log{}, 0, &TornError{name, line}
			}
			return Log{}, 0, fmt.Errorf("%s: line %d is not a result record: %v", name, line, perr)
		}
		if !isHeader {
			log.Records = append(log.Records, rec)
		}
		good += int64(len(b))
		if err == io.EOF {
			return log, good, nil
		}
	}
}

func parseRecord(b []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, err
	}
	if rec.ID == "" {
		return rec, errors.New(`no "id"`)
	}
	if len(rec.Result) == 0 && rec.Error == "" {
		return rec, errors.New(`neither "result" nor "error"`)
	}
	return rec, nil
}
