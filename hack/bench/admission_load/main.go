// The load client of admission_bench.py: AdmissionReviews POSTed over TLS to one webhook path,
// on a fixed number of connections, each connection one goroutine sending its next review as
// soon as the last one is answered (closed loop).
//
// Why Go: a Python client on the same two cores would spend more CPU per review than the server
// it measures, so the figures would be the client's. Standard library only (nothing to download).
//
// With -rate R the load is open instead: reviews are due at R a second, evenly spaced, and a
// connection takes the next due one when it is free; a review's latency counts from when it was
// due, so a server that falls behind shows its queue in the latency instead of lowering the rate
// (as the API server's pod creates would queue behind a slow webhook).
//
// Protocol with the bench, on stdin and stdout, so that the bench decides the window and reads
// the server's CPU at exactly its edges:
//
//	stdout "ready"  every connection is open (TLS handshake done) and has had one review answered
//	stdin  "start"  the window opens: latencies are recorded from now
//	stdin  "stop"   (or EOF) the window closes; reviews still in flight then are not counted
//	stdout {...}    one JSON line: reviews, errors, the first error, seconds, p50/p99/max in ms
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Reviews    int     `json:"reviews"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Max        float64 `json:"max_ms"`
}

type worker struct {
	client    *http.Client
	latencies []time.Duration
	errors    int
	first     string
}

func main() {
	url := flag.String("url", "", "https://127.0.0.1:PORT/path of the webhook")
	caFile := flag.String("ca", "", "PEM file of the CA that issued the server's certificate")
	bodyFile := flag.String("body", "", "file holding the AdmissionReview to POST")
	expect := flag.String("expect", `"allowed":true`, "bytes every answer must contain")
	conns := flag.Int("conns", 1, "connections, each with one review in flight")
	rate := flag.Float64("rate", 0, "reviews due per second (0: each connection sends as soon as answered)")
	flag.Parse()

	pem, err := os.ReadFile(*caFile)
	check(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		check(fmt.Errorf("no certificate in %s", *caFile))
	}
	body, err := os.ReadFile(*bodyFile)
	check(err)
	want := []byte(*expect)

	workers := make([]*worker, *conns)
	for i := range workers {
		// One transport per worker: exactly one connection each, kept alive, HTTP/1.1 as the
		// API server speaks to webhooks.
		transport := &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		workers[i] = &worker{client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	}

	var recording atomic.Bool
	var stopped atomic.Bool
	// Open load: the times reviews are due, from the window's start; closed when it ends.
	due := make(chan time.Time, 1<<20)
	var warm sync.WaitGroup
	var done sync.WaitGroup
	warm.Add(len(workers))
	done.Add(len(workers))
	for _, w := range workers {
		go func(w *worker) {
			defer done.Done()
			if ok, msg := w.post(*url, body, want); !ok {
				w.errors++
				w.first = msg
			}
			warm.Done()
			for !stopped.Load() {
				started := time.Now()
				if *rate > 0 {
					at, open := <-due
					if !open {
						return
					}
					started = at
				}
				ok, msg := w.post(*url, body, want)
				took := time.Since(started)
				if !recording.Load() || stopped.Load() {
					continue
				}
				if ok {
					w.latencies = append(w.latencies, took)
				} else {
					w.errors++
					if w.first == "" {
						w.first = msg
					}
				}
			}
		}(w)
	}
	warm.Wait()
	for _, w := range workers { // the warm-up's errors are reported, not counted in the window
		if w.first != "" {
			fmt.Fprintf(os.Stderr, "warm-up: %s\n", w.first)
			w.errors, w.first = 0, ""
		}
	}
	fmt.Println("ready")

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() && lines.Text() != "start" {
	}
	recording.Store(true)
	began := time.Now()
	if *rate > 0 {
		go schedule(due, began, *rate, &stopped)
	}
	for lines.Scan() && lines.Text() != "stop" {
	}
	stopped.Store(true)
	seconds := time.Since(began).Seconds()
	done.Wait()

	var all []time.Duration
	out := result{Seconds: seconds}
	for _, w := range workers {
		all = append(all, w.latencies...)
		out.Errors += w.errors
		if out.FirstError == "" {
			out.FirstError = w.first
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	out.Reviews = len(all)
	if len(all) > 0 {
		ms := func(q float64) float64 {
			return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000
		}
		out.P50, out.P99, out.Max = ms(0.50), ms(0.99), ms(1)
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

// schedule puts on `due` the time each review is due, `rate` a second from `began`, until
// `stopped`; then closes it.
func schedule(due chan<- time.Time, began time.Time, rate float64, stopped *atomic.Bool) {
	defer close(due)
	interval := time.Duration(float64(time.Second) / rate)
	for n := 0; !stopped.Load(); n++ {
		at := began.Add(time.Duration(n) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case due <- at:
		default: // a million reviews behind: the figures say enough
		}
	}
}

// post sends one review and reads the whole answer; false and why when it is not a 200 holding
// the expected bytes.
func (w *worker) post(url string, body, want []byte) (bool, string) {
	request, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err.Error()
	}
	request.Header.Set("Content-Type", "application/json")
	request.Header.Set("Accept", "application/json")
	response, err := w.client.Do(request)
	if err != nil {
		return false, err.Error()
	}
	answer, err := io.ReadAll(response.Body)
	response.Body.Close()
	if err != nil {
		return false, err.Error()
	}
	if response.StatusCode != http.StatusOK || !bytes.Contains(answer, want) {
		if len(answer) > 300 {
			answer = answer[:300]
		}
		return false, fmt.Sprintf("%d %s", response.StatusCode, answer)
	}
	return true, ""
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
