package capture

import (
	"context"
	"fmt"
	"image"
	"image/draw"
	"io"
	"sync"
	"time"

	"github.com/pion/mediadevices/pkg/driver"
	"github.com/pion/mediadevices/pkg/frame"
	"github.com/pion/mediadevices/pkg/io/video"
	"github.com/pion/mediadevices/pkg/prop"
)

// CameraOptions choose the capture format; zero fields take the defaults.
type CameraOptions struct {
	// Width and Height are the wanted frame size; the closest size the
	// camera offers is used (default 1280×720).
	Width, Height int
}

// Frame is one camera frame, copied out of the driver's buffers.
type Frame struct {
	Time  time.Time
	Image *image.RGBA
}

// Camera is an open camera, streaming until Close.
type Camera struct {
	dev     Device
	drv     driver.Driver
	timeout time.Duration
	done    chan struct{} // closed when the read loop ends

	mu      sync.Mutex
	latest  *Frame
	waiters []chan Frame
	feeds   map[chan Frame]struct{}
	err     error // why the read loop ended
	closing bool
	closed  chan struct{}
	once    sync.Once
}

// OpenCamera opens a camera (id "" for the first one) and starts streaming.
func (d *Devices) OpenCamera(id string, opt CameraOptions) (*Camera, error) {
	drv, err := d.find(VideoInput, id)
	if err != nil {
		return nil, err
	}
	dev := Device{ID: drv.ID(), Label: label(drv.Info()), Kind: VideoInput}
	if err := safely(dev.Label, "open", drv.Open); err != nil {
		return nil, fmt.Errorf("open camera %s: %w", dev.Label, err)
	}
	var p prop.Media
	var ok bool
	err = safely(dev.Label, "properties", func() error {
		p, ok = pickVideo(drv.Properties(), opt)
		return nil
	})
	if err == nil && !ok {
		err = fmt.Errorf("no supported frame format")
	}
	var r video.Reader
	if err == nil {
		err = safely(dev.Label, "start", func() error {
			var e error
			r, e = drv.(driver.VideoRecorder).VideoRecord(p)
			return e
		})
	}
	if err != nil {
		_ = safely(dev.Label, "close", drv.Close)
		return nil, &UnavailableError{Kind: VideoInput, Reason: fmt.Sprintf("%s could not start: %v", dev.Label, err), Err: err}
	}
	c := &Camera{dev: dev, drv: drv, timeout: d.readTimeout(), done: make(chan struct{}),
		feeds: map[chan Frame]struct{}{}, closed: make(chan struct{})}
	go c.loop(r)
	return c, nil
}

// pickVideo chooses the offered format closest to the wanted size, among
// those mediadevices decodes to colour images.
func pickVideo(props []prop.Media, opt CameraOptions) (prop.Media, bool) {
	w, h := opt.Width, opt.Height
	if w <= 0 || h <= 0 {
		w, h = 1280, 720
	}
	best, bestCost := prop.Media{}, -1
	for _, p := range props {
		switch p.FrameFormat {
		case frame.FormatI420, frame.FormatNV12, frame.FormatNV21, frame.FormatYUYV, frame.FormatUYVY,
			frame.FormatMJPEG, frame.FormatI444, frame.FormatRGBA:
		default:
			continue // depth (Z16) and unknown formats
		}
		if p.Width <= 0 || p.Height <= 0 {
			continue
		}
		cost := abs(p.Width-w) + abs(p.Height-h)
		if p.FrameRate > 0 && p.FrameRate < 10 {
			cost += 10000 // too slow for a live view
		}
		if bestCost < 0 || cost < bestCost || (cost == bestCost && p.FrameRate > best.FrameRate) {
			best, bestCost = p, cost
		}
	}
	return best, bestCost >= 0
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// Device returns the camera's device.
func (c *Camera) Device() Device { return c.dev }

// loop reads frames until Close or an error, copying a frame only when a
// snapshot or a feed wants it.
func (c *Camera) loop(r video.Reader) {
	defer close(c.done)
	for {
		select {
		case <-c.closed:
			c.finish(ErrClosed)
			return
		default:
		}
		var img image.Image
		var release func()
		err := safely(c.dev.Label, "read", func() error {
			var e error
			img, release, e = r.Read()
			return e
		})
		if err == nil && img == nil {
			err = fmt.Errorf("%s: empty frame", c.dev.Label)
		}
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("%s: stream ended: %w", c.dev.Label, ErrClosed)
			}
			c.finish(err)
			return
		}
		if c.wanted() {
			f := Frame{Time: time.Now(), Image: toRGBA(img)}
			c.deliver(f)
		}
		if release != nil {
			release()
		}
	}
}

func (c *Camera) wanted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0 || len(c.feeds) > 0
}

func (c *Camera) deliver(f Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = &f
	for _, w := range c.waiters {
		w <- f // buffered, one each
	}
	c.waiters = nil
	for ch := range c.feeds {
		select { // keep only the newest frame for a slow reader
		case <-ch:
		default:
		}
		ch <- f
	}
}

func (c *Camera) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	for ch := range c.feeds {
		close(ch)
	}
	c.feeds = map[chan Frame]struct{}{}
	for _, w := range c.waiters {
		close(w)
	}
	c.waiters = nil
}

// Err returns why the camera stopped streaming (nil while it streams).
func (c *Camera) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Snapshot returns the next frame, waiting at most the read timeout.
func (c *Camera) Snapshot(ctx context.Context) (*image.RGBA, error) {
	w := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case f, ok := <-w:
		if !ok {
			return nil, fmt.Errorf("snapshot: %w", c.Err())
		}
		return f.Image, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("snapshot: %w", ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("snapshot: %s gave no frame in %v", c.dev.Label, c.timeout)
	}
}

// Feed returns a channel of live frames, at most one every interval (0: every
// frame); a slow reader gets the newest frame, not a backlog. The channel is
// closed when ctx ends or the camera stops (see Err).
func (c *Camera) Feed(ctx context.Context, interval time.Duration) <-chan Frame {
	in := make(chan Frame, 1)
	out := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		close(out)
		c.mu.Unlock()
		return out
	}
	c.feeds[in] = struct{}{}
	c.mu.Unlock()
	go func() {
		defer close(out)
		defer c.unsubscribe(in)
		var last time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case f, ok := <-in:
				if !ok {
					return
				}
				if interval > 0 && f.Time.Sub(last) < interval {
					continue
				}
				last = f.Time
				select {
				case <-out: // drop a frame the reader has not taken
				default:
				}
				out <- f
			}
		}
	}()
	return out
}

func (c *Camera) unsubscribe(ch chan Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.feeds, ch)
}

// Close stops streaming and releases the camera. It waits for the frame being
// read (up to the read timeout), then closes the driver.
func (c *Camera) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		select {
		case <-c.done:
		case <-time.After(c.timeout):
		}
		err = safely(c.dev.Label, "close", c.drv.Close)
		c.finish(ErrClosed)
	})
	return err
}

// toRGBA copies a frame out of the driver's reused buffers.
func toRGBA(img image.Image) *image.RGBA {
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(out, out.Rect, img, b.Min, draw.Src)
	return out
}
