// Command loadgen sends pre-serialized, gzip-compressed OTLP Export requests to a gRPC server
// over one connection, a fixed number in flight, as a Collector's otlp exporter sends them
// behind its batch processor. bench/collector_load.py compresses the requests before the run,
// so the bytes on the wire are a gzip exporter's (grpc-encoding: gzip, compressed flag set)
// while the client, which shares the machine's cores with the server it measures, spends no
// CPU on compressing them during the run.
//
// Input (-in): the requests, each as a 4-byte little-endian length and the gzip'd message.
// Output (stdout): one JSON object, the outcome of every request and the client's CPU.
//
// A retryable answer (the server overloaded) is retried as the Collector's exporter retries it
// (retry_on_failure at its defaults, honouring the server's RetryInfo), so a run stores what a
// Collector would have stored; each request's latency runs from its send to its last answer.
package main

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// precompressed is gRPC's "gzip" for messages that are gzip already: sent as they are. A
// server may answer in the request's encoding, so responses are really inflated.
type precompressed struct{}

func (precompressed) Name() string { return "gzip" }

func (precompressed) Compress(w io.Writer) (io.WriteCloser, error) { return passThrough{w}, nil }

func (precompressed) Decompress(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

type passThrough struct{ io.Writer }

func (passThrough) Close() error { return nil }

// rawCodec passes messages through as bytes: requests are serialized before the run.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// Result is one request's outcome; times in seconds from the start of the run.
type Result struct {
	Index    int     `json:"index"`
	Sent     float64 `json:"sent"` // when it was sent, or (open loop) scheduled
	Done     float64 `json:"done"`
	Code     string  `json:"code"`     // gRPC status code name
	Rejected int64   `json:"rejected"` // partial_success's rejected items
	Retries  int     `json:"retries"`  // retryable answers before the last one
}

// retryAfter: whether an answer is retried and after how long, as the Collector's exporter
// (retry_on_failure at its defaults) does it: the codes OTLP calls retryable, RESOURCE_EXHAUSTED
// only with a RetryInfo; the server's RetryInfo delay, else 5 s growing by 1.5x up to 30 s.
func retryAfter(err error, retries int) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	answer := status.Convert(err)
	var info *errdetails.RetryInfo
	for _, detail := range answer.Details() {
		if found, ok := detail.(*errdetails.RetryInfo); ok {
			info = found
		}
	}
	switch answer.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange,
		codes.Unavailable, codes.DataLoss:
	case codes.ResourceExhausted:
		if info == nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if info != nil && info.GetRetryDelay() != nil {
		return info.GetRetryDelay().AsDuration(), true
	}
	wait := 5 * time.Second
	for range retries {
		wait = min(wait*3/2, 30*time.Second)
	}
	return wait, true
}

// Output is what the run prints.
type Output struct {
	Results         []Result `json:"results"`
	Unsent          int      `json:"unsent"` // requests not sent before the deadline
	CPUSeconds      float64  `json:"cpu_seconds"`
	DeadlineReached bool     `json:"deadline_reached"`
}

// rejected reads partial_success.rejected_<items> (field 1 of field 1 in every signal's
// Export response); 0 when absent.
func rejected(response []byte) int64 {
	partial, ok := field(response, 1, protowire.BytesType)
	if !ok {
		return 0
	}
	count, ok := field(partial, 1, protowire.VarintType)
	if !ok {
		return 0
	}
	value, n := protowire.ConsumeVarint(count)
	if n < 0 {
		return 0
	}
	return int64(value)
}

// field is the value of the first field `number` of wire type `kind` in a message (the
// bytes of a length-delimited one, without its length), or false.
func field(message []byte, number protowire.Number, kind protowire.Type) ([]byte, bool) {
	for len(message) > 0 {
		got, gotKind, n := protowire.ConsumeTag(message)
		if n < 0 {
			return nil, false
		}
		message = message[n:]
		size := protowire.ConsumeFieldValue(got, gotKind, message)
		if size < 0 {
			return nil, false
		}
		if got == number && gotKind == kind {
			if kind == protowire.BytesType {
				value, _ := protowire.ConsumeBytes(message)
				return value, true
			}
			return message[:size], true
		}
		message = message[size:]
	}
	return nil, false
}

func readRequests(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var requests [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, errors.New("truncated length")
		}
		size := int(binary.LittleEndian.Uint32(data))
		data = data[4:]
		if size > len(data) {
			return nil, errors.New("truncated request")
		}
		requests = append(requests, data[:size])
		data = data[size:]
	}
	return requests, nil
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

func run() error {
	address := flag.String("addr", "", "host:port of the server")
	method := flag.String("method", "", "full method, e.g. /opentelemetry.proto.collector.trace.v1.TraceService/Export")
	in := flag.String("in", "", "the requests (4-byte little-endian length, then gzip'd message)")
	inFlight := flag.Int("in-flight", 10, "requests in flight on the one connection")
	maxSeconds := flag.Float64("max-seconds", 300, "no request is sent after this")
	interval := flag.Float64("interval", 0, "open loop: seconds between scheduled sends (0: closed loop)")
	flag.Parse()
	if *address == "" || *method == "" || *in == "" || *inFlight < 1 {
		return errors.New("-addr, -method, -in and a positive -in-flight are required")
	}
	requests, err := readRequests(*in)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	encoding.RegisterCompressor(precompressed{})
	conn, err := grpc.NewClient(*address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.UseCompressor("gzip"),
			grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	// connected before the clock starts: the handshake is not part of the load
	ready, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ready, state) {
			return errors.New("no connection within 30 s")
		}
	}

	results := make([]Result, 0, len(requests))
	var mu sync.Mutex
	var next atomic.Int64
	var deadlineReached atomic.Bool
	start := time.Now()
	deadline := start.Add(time.Duration(*maxSeconds * float64(time.Second)))
	step := time.Duration(*interval * float64(time.Second))
	// retries stop here, as the exporter's max_elapsed_time stops them
	giveUp := deadline.Add(60 * time.Second)
	cpuBefore := cpuSeconds()
	var wg sync.WaitGroup
	for range *inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if time.Now().After(deadline) {
					deadlineReached.Store(true)
					return
				}
				index := int(next.Add(1) - 1)
				if index >= len(requests) {
					return
				}
				// open loop: request k is due at k * interval; its latency counts from then,
				// so time spent waiting for a free slot is counted
				sent := time.Now()
				if step > 0 {
					sent = start.Add(time.Duration(index) * step)
					time.Sleep(time.Until(sent))
				}
				var response []byte
				var err error
				retries := 0
				for {
					ctx, done := context.WithDeadline(context.Background(), giveUp)
					err = conn.Invoke(ctx, *method, requests[index], &response)
					done()
					wait, retry := retryAfter(err, retries)
					if !retry || time.Now().Add(wait).After(giveUp) {
						break
					}
					retries++
					time.Sleep(wait)
				}
				finished := time.Now()
				result := Result{
					Index:   index,
					Sent:    sent.Sub(start).Seconds(),
					Done:    finished.Sub(start).Seconds(),
					Code:    status.Code(err).String(),
					Retries: retries,
				}
				if err == nil {
					result.Rejected = rejected(response)
				}
				mu.Lock()
				results = append(results, result)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	output := Output{
		Results:         results,
		Unsent:          len(requests) - len(results),
		CPUSeconds:      cpuSeconds() - cpuBefore,
		DeadlineReached: deadlineReached.Load(),
	}
	return json.NewEncoder(os.Stdout).Encode(output)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}
