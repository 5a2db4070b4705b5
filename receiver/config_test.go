package receiver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/wave"
)

// An invalid wave setting is reported under the Wave field and keeps both
// sentinels reachable with errors.Is.
func TestValidateWrapsWaveError(t *testing.T) {
	err := receiver.Config{Wave: wave.Config{Cap: -1}}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) || !errors.Is(err, wave.ErrInvalidConfig) || !strings.Contains(err.Error(), "Wave:") {
		t.Fatalf("Validate = %v, want ErrInvalidConfig and wave.ErrInvalidConfig under Wave", err)
	}
}
