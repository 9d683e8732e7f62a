// A tiny server behind the ratekeeper middleware:
//
//	RATEKEEPER_URL=http://127.0.0.1:8080 go run .
//
// HOST (default 127.0.0.1) and PORT (default 8000; 0 picks a free one) say
// where it listens; it prints the address once it does. The middleware is
// configured from RATEKEEPER_* (see README.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"ratekeeper-example/ratekeeper"
)

func main() {
	cfg, err := ratekeeper.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello\n")
	})
	listener, err := net.Listen("tcp", net.JoinHostPort(getenv("HOST", "127.0.0.1"), getenv("PORT", "8000")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", listener.Addr())
	server := &http.Server{
		Handler:           ratekeeper.New(cfg).Handler(hello),
		ReadHeaderTimeout: 10 * time.Second,
	}
	// Docker and systemd stop with SIGTERM: finish what is in flight, then exit.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	drained := make(chan struct{})
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
		close(drained)
	}()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-drained // Serve returns at once on Shutdown: let the requests in flight finish
}

func getenv(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
