// Package compat holds Berth's wire-compatibility tests against the real
// peer libraries, in a module of its own (github.com/berth-go/berth/internal/compat)
// so that the library's go.mod does not require them (docs/development.md,
// Modules).
//
// The watermill-aws tests check transport/sqs's WatermillAWSCodec against
// github.com/ThreeDotsLabs/watermill-aws v1.0.1: its marshaler on its own
// (what the codec writes, watermill-aws reads, and the reverse) and its
// SQS and SNS publishers and subscribers next to Berth's on the emulator
// (BERTH_TEST_SQS_ENDPOINT; without it those tests skip).
//
// The package has no code besides this comment.
package compat
