package receiver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

// An invalid wave setting names its field and wraps
// transport.ErrInvalidConfig.
func TestValidateNamesWaveFields(t *testing.T) {
	err := receiver.Config{WaveCap: -1, IdleAfter: -1}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "WaveCap:") || !strings.Contains(err.Error(), "IdleAfter:") {
		t.Fatalf("Validate = %v, want ErrInvalidConfig naming WaveCap and IdleAfter", err)
	}
}
