// watch-replay: the fastest server a client-go informer can sync from, to measure the
// client's own floor. It answers every request with the bytes of one recorded response
// (-body, e.g. a gzipped WatchList of every pod recorded through kache, up to and past its
// initial-events-end bookmark) and its headers (-content-type, -content-encoding), over TLS
// and HTTP/2 as kache and the apiserver serve, then holds the stream open as a watch does
// until the client goes. The bytes are in memory before the first request, so the server
// spends nothing but writing them. Prints its https address on stdout; stops on SIGTERM.
// Built by ../build.sh (the standard library only).
package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	bodyFile := flag.String("body", "", "the recorded response body, as sent (still encoded)")
	contentType := flag.String("content-type", "application/vnd.kubernetes.protobuf;stream=watch", "the response's Content-Type")
	contentEncoding := flag.String("content-encoding", "gzip", "the response's Content-Encoding (empty: none)")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", *contentType)
		if *contentEncoding != "" {
			w.Header().Set("Content-Encoding", *contentEncoding)
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	fmt.Println(srv.URL)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	srv.CloseClientConnections()
	srv.Close()
}
