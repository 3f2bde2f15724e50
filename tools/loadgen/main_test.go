package main

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// response is an Export response whose partial_success holds `message` (and `rejected`
// items, unless negative) after an unknown field.
func response(rejected int64, message string) []byte {
	var partial []byte
	partial = protowire.AppendTag(partial, 2, protowire.BytesType)
	partial = protowire.AppendString(partial, message)
	if rejected >= 0 {
		partial = protowire.AppendTag(partial, 1, protowire.VarintType)
		partial = protowire.AppendVarint(partial, uint64(rejected))
	}
	var out []byte
	out = protowire.AppendTag(out, 9, protowire.VarintType)
	out = protowire.AppendVarint(out, 3)
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	return protowire.AppendBytes(out, partial)
}

func TestRejectedReadsPartialSuccess(t *testing.T) {
	for _, c := range []struct {
		name     string
		response []byte
		want     int64
	}{
		{"empty response", nil, 0},
		{"rejected items", response(7, "bad ids"), 7},
		{"a message only", response(-1, "warning"), 0},
		{"truncated", response(7, "bad ids")[:4], 0},
	} {
		if got := rejected(c.response); got != c.want {
			t.Errorf("%s: rejected = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRetryAfterFollowsTheExporter(t *testing.T) {
	withDelay, err := status.New(codes.ResourceExhausted, "full").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		err     error
		retries int
		wait    time.Duration
		retry   bool
	}{
		{"ok", nil, 0, 0, false},
		{"unavailable, no RetryInfo", status.Error(codes.Unavailable, "x"), 0, 5 * time.Second, true},
		{"third retry", status.Error(codes.Unavailable, "x"), 2, 11250 * time.Millisecond, true},
		{"capped", status.Error(codes.Unavailable, "x"), 20, 30 * time.Second, true},
		{"resource exhausted, no RetryInfo", status.Error(codes.ResourceExhausted, "x"), 0, 0, false},
		{"resource exhausted with RetryInfo", withDelay.Err(), 0, 250 * time.Millisecond, true},
		{"invalid argument", status.Error(codes.InvalidArgument, "x"), 0, 0, false},
	} {
		wait, retry := retryAfter(c.err, c.retries)
		if wait != c.wait || retry != c.retry {
			t.Errorf("%s: retryAfter = %v, %v; want %v, %v", c.name, wait, retry, c.wait, c.retry)
		}
	}
}
