package limits

import (
	"errors"
	"testing"
	"time"
)

func TestMessages(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{Count(Images, 9, MaxImages), "images 9 exceeds the limit of 8"},
		{Duration(AudioDuration, 30020*time.Millisecond, MaxAudio), "audio clip duration 30.02 s exceeds the limit of 30 s"},
		{&Error{Limit: AudioDuration, Value: 31, Max: 30, Unit: "s", AtLeast: true, Source: "mic"}, "mic: audio clip duration more than 31 s exceeds the limit of 30 s"},
		{Pixels(10000, 10000), "image size 100000000 pixels exceeds the limit of 67108864 pixels"},
		{Bytes(600<<20, MaxFileBytes), "file size 629145600 bytes exceeds the limit of 536870912 bytes"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		err   error
		limit string // "" for none
	}{
		{CheckAudio(30 * time.Second), ""},
		{CheckAudio(30*time.Second + time.Millisecond), AudioDuration},
		{CheckVideo(60*time.Second, false), ""},
		{CheckVideo(61*time.Second, false), SilentVideo},
		{CheckVideo(30*time.Second, true), ""},
		{CheckVideo(31*time.Second, true), VideoWithSound},
	}
	for i, tt := range tests {
		var le *Error
		switch {
		case tt.limit == "" && tt.err != nil:
			t.Errorf("%d: unexpected %v", i, tt.err)
		case tt.limit != "" && (!errors.As(tt.err, &le) || le.Limit != tt.limit):
			t.Errorf("%d: %v, want %s", i, tt.err, tt.limit)
		}
	}
}
