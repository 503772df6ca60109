// Command natsref is the nats.go reference benchmark for oncestream's bench-scale.
//
// It measures, against a given server URL, with N messages of SIZE bytes:
//
//	publish : async JetStream publish with a unique Nats-Msg-Id per message
//	ordered : ordered push consumer reading the whole stream
//	fetch   : durable pull consumer, Fetch(500) then Ack() per message
//
// and prints one JSON object per case on stdout. It uses the legacy
// nc.JetStream() API of nats.go 1.22 (Debian golang-github-nats-io-go-nats-dev)
// and builds offline with GO111MODULE=off GOPATH=/usr/share/gocode.
// The stream is created (file storage) when missing; pass -stream of a stream
// created by the harness to measure against exactly its configuration.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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
		Rate: float64(n) / elapsed.Seconds(), Unit: "msg/s", Client: "nats.go " + nats.Version}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "natsref: "+format+"\n", args...)
	os.Exit(1)
}

func ensureStream(js nats.JetStreamContext, stream, subject string) {
	if _, err := js.StreamInfo(stream); err == nil {
		return
	}
	_, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: nats.FileStorage})
	if err != nil {
		fail("cannot create stream %s: %v", stream, err)
	}
}

func publish(js nats.JetStreamContext, subject string, n, size int) time.Duration {
	payload := []byte(strings.Repeat("x", size))
	// nats.go fails a publish after 200 ms with a full window by default; at 10^7 the
	// server pauses longer than that (see docs/benchmarks.md), so wait as oncestream does.
	stall := nats.StallWait(60 * time.Second)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(subject, payload, nats.MsgId(fmt.Sprintf("g-%d", i)), stall); err != nil {
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

func ordered(js nats.JetStreamContext, stream, subject string, n int) time.Duration {
	done := make(chan struct{})
	got := 0
	start := time.Now()
	sub, err := js.Subscribe(subject, func(m *nats.Msg) {
		got++
		if got == n {
			close(done)
		}
	}, nats.OrderedConsumer(), nats.BindStream(stream), nats.DeliverAll())
	if err != nil {
		fail("ordered consumer on %s: %v", stream, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		fail("ordered: read %d of %d in 10 minutes", got, n)
	}
	elapsed := time.Since(start)
	_ = sub.Unsubscribe()
	return elapsed
}

func fetchAck(nc *nats.Conn, js nats.JetStreamContext, stream, subject string, n int) time.Duration {
	durable := fmt.Sprintf("natsref_%d", time.Now().UnixNano())
	sub, err := js.PullSubscribe(subject, durable, nats.BindStream(stream))
	if err != nil {
		fail("pull consumer on %s: %v", stream, err)
	}
	got := 0
	start := time.Now()
	for got < n {
		want := 500
		if n-got < want {
			want = n - got
		}
		msgs, err := sub.Fetch(want, nats.MaxWait(5*time.Second))
		if err != nil {
			fail("fetch after %d of %d: %v", got, n, err)
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				fail("ack: %v", err)
			}
		}
		got += len(msgs)
	}
	if err := nc.Flush(); err != nil {
		fail("flush: %v", err)
	}
	elapsed := time.Since(start)
	_ = js.DeleteConsumer(stream, durable)
	return elapsed
}

func main() {
	url := flag.String("url", nats.DefaultURL, "server URL")
	n := flag.Int("n", 100000, "messages")
	size := flag.Int("size", 128, "payload bytes")
	stream := flag.String("stream", "NATSREF", "stream (created with file storage when missing)")
	subject := flag.String("subject", "natsref.x", "subject")
	cases := flag.String("cases", "publish,ordered,fetch", "comma-separated cases; ordered and fetch read what publish wrote")
	pending := flag.Int("max-pending", 4000, "async publish window")
	flag.Parse()

	nc, err := nats.Connect(*url)
	if err != nil {
		fail("connect %s: %v", *url, err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(*pending))
	if err != nil {
		fail("jetstream: %v", err)
	}
	ensureStream(js, *stream, *subject)
	for _, c := range strings.Split(*cases, ",") {
		switch c {
		case "publish":
			emit("nats.go async publish with msg id", *n, publish(js, *subject, *n, *size))
		case "ordered":
			emit("nats.go ordered consumer", *n, ordered(js, *stream, *subject, *n))
		case "fetch":
			emit("nats.go fetch(500)+ack", *n, fetchAck(nc, js, *stream, *subject, *n))
		default:
			fail("unknown case %q (allowed: publish, ordered, fetch)", c)
		}
	}
}
