// Command natsgo is the reference benchmark on the current nats.go `jetstream` package
// (and orbit.go's batch publishers), beside bench/go (nats.go 1.22's legacy API).
//
// Cases, each against -stream (created with file storage when missing):
//
//	publish : js.PublishAsync with a unique Nats-Msg-Id per message, -max-pending in flight
//	consume : a durable pull consumer, Consume() with an Ack() per message; with
//	          -filters, one such consumer per filter subject, all consumed at once
//	          (bench/group_scale.py: one per partition of a partitioned stream)
//	batch   : orbit.go atomic BatchPublisher, -batch messages per commit, a Nats-Msg-Id each
//	fast    : orbit.go FastPublisher (fast-ingest batch, flow-controlled acks), one batch
//
// -cpuprofile FILE writes a Go CPU profile of the cases (bench/profile_peers.py reads it).
//
// It prints one JSON object per case on stdout, like bench/go. Built by
// `make bench-peers` with the Go module proxy (go.mod pins the versions).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

type result struct {
	Case     string  `json:"case"`
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"rate"`
	Unit     string  `json:"unit"`
	Client   string  `json:"client"`
}

func emit(name string, n int, elapsed time.Duration) {
	r := result{Case: name, Messages: n, Seconds: elapsed.Seconds(),
		Rate: float64(n) / elapsed.Seconds(), Unit: "msg/s", Client: "nats.go " + nats.Version + " jetstream"}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "natsgo: "+format+"\n", args...)
	os.Exit(1)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, stream, subject string, batch bool) {
	if _, err := js.Stream(ctx, stream); err == nil {
		return
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, AllowAtomicPublish: batch, AllowBatchPublish: batch})
	if err != nil {
		fail("cannot create stream %s: %v", stream, err)
	}
}

func publish(js jetstream.JetStream, subject string, n, size int) time.Duration {
	payload := []byte(strings.Repeat("x", size))
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(subject, payload, jetstream.WithMsgID(fmt.Sprintf("g-%d", i)),
			jetstream.WithStallWait(60*time.Second)); err != nil {
			fail("publish %d: %v", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		fail("publish: %d acks still pending after 10 minutes", js.PublishAsyncPending())
	}
	return time.Since(start)
}

func consume(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, n int, filters []string) time.Duration {
	if len(filters) == 0 {
		filters = []string{""}
	}
	var got atomic.Int64
	done := make(chan struct{})
	var durables []string
	var ccs []jetstream.ConsumeContext
	start := time.Now()
	for i, filter := range filters {
		durable := fmt.Sprintf("natsgo_%d_%d", time.Now().UnixNano(), i)
		cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: durable,
			AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter})
		if err != nil {
			fail("consumer on %s: %v", stream, err)
		}
		durables = append(durables, durable)
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if err := m.Ack(); err != nil {
				fail("ack: %v", err)
			}
			if got.Add(1) == int64(n) {
				close(done)
			}
		}, jetstream.PullMaxMessages(500))
		if err != nil {
			fail("consume: %v", err)
		}
		ccs = append(ccs, cc)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		fail("consume: read %d of %d in 10 minutes", got.Load(), n)
	}
	if err := nc.Flush(); err != nil {
		fail("flush: %v", err)
	}
	elapsed := time.Since(start)
	for i, cc := range ccs {
		cc.Stop()
		_ = js.DeleteConsumer(ctx, stream, durables[i])
	}
	return elapsed
}

func batchPublish(ctx context.Context, js jetstream.JetStream, subject string, n, size, batch int) time.Duration {
	payload := []byte(strings.Repeat("x", size))
	start := time.Now()
	for i := 0; i < n; {
		b, err := jetstreamext.NewBatchPublisher(js)
		if err != nil {
			fail("batch publisher: %v", err)
		}
		end := i + batch
		if end > n {
			end = n
		}
		for ; i < end-1; i++ {
			m := nats.NewMsg(subject)
			m.Data = payload
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("b-%d", i))
			if err := b.AddMsg(m); err != nil {
				fail("batch add %d: %v", i, err)
			}
		}
		m := nats.NewMsg(subject)
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("b-%d", i))
		if _, err := b.CommitMsg(ctx, m); err != nil {
			fail("batch commit at %d: %v", i, err)
		}
		i++
	}
	return time.Since(start)
}

func fastPublish(ctx context.Context, js jetstream.JetStream, subject string, n, size int) time.Duration {
	payload := []byte(strings.Repeat("x", size))
	start := time.Now()
	fp, err := jetstreamext.NewFastPublisher(js)
	if err != nil {
		fail("fast publisher: %v", err)
	}
	for i := 0; i < n-1; i++ {
		m := nats.NewMsg(subject)
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("f-%d", i))
		if _, err := fp.AddMsg(m); err != nil {
			fail("fast add %d: %v", i, err)
		}
	}
	m := nats.NewMsg(subject)
	m.Data = payload
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("f-%d", n-1))
	if _, err := fp.CommitMsg(ctx, m); err != nil {
		fail("fast commit: %v", err)
	}
	return time.Since(start)
}

func main() {
	url := flag.String("url", nats.DefaultURL, "server URL")
	n := flag.Int("n", 100000, "messages")
	size := flag.Int("size", 128, "payload bytes")
	stream := flag.String("stream", "NATSGO", "stream (created with file storage when missing)")
	subject := flag.String("subject", "natsgo.x", "subject")
	cases := flag.String("cases", "publish,consume", "comma-separated cases; consume reads what publish wrote")
	pending := flag.Int("max-pending", 4000, "async publish window")
	batch := flag.Int("batch", 1000, "messages per atomic batch")
	filters := flag.String("filters", "", "consume: comma-separated filter subjects, a consumer each")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the cases to this file (go tool pprof)")
	flag.Parse()

	nc, err := nats.Connect(*url)
	if err != nil {
		fail("connect %s: %v", *url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(*pending))
	if err != nil {
		fail("jetstream: %v", err)
	}
	ctx := context.Background()
	ensureStream(ctx, js, *stream, *subject, strings.Contains(*cases, "batch") || strings.Contains(*cases, "fast"))
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail("cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail("cpuprofile: %v", err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	for _, c := range strings.Split(*cases, ",") {
		switch c {
		case "publish":
			emit("nats.go jetstream PublishAsync with msg id", *n, publish(js, *subject, *n, *size))
		case "consume":
			emit("nats.go jetstream Consume+Ack", *n, consume(ctx, nc, js, *stream, *n, splitNonEmpty(*filters)))
		case "batch":
			emit("orbit.go atomic batch publish", *n, batchPublish(ctx, js, *subject, *n, *size, *batch))
		case "fast":
			emit("orbit.go fast batch publish", *n, fastPublish(ctx, js, *subject, *n, *size))
		default:
			fail("unknown case %q (allowed: publish, consume, batch, fast)", c)
		}
	}
}
