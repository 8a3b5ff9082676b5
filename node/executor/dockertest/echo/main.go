// Command echo is the workload of the docker executor's tests: it prints
// its lease and GPUs, serves its environment and files over HTTP on
// $PORT (default 8080), and exits, crashes or eats memory when told.
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) >= 2 && args[0] == "exit" {
		code, _ := strconv.Atoi(args[1])
		fmt.Println("exiting with", code)
		os.Exit(code)
	}
	if len(args) >= 1 && args[0] == "oom" {
		var hog [][]byte
		for {
			b := make([]byte, 16<<20)
			for i := range b {
				b[i] = 1
			}
			hog = append(hog, b)
		}
	}
	fmt.Printf("hello from lease %s gpus=%s\n", os.Getenv("SUANLI_LEASE"), os.Getenv("CUDA_VISIBLE_DEVICES"))
	fmt.Fprintln(os.Stderr, "echo: serving")
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(os.Environ())
	})
	http.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	http.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		err := os.WriteFile(r.URL.Query().Get("path"), []byte("x"), 0o644)
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// /fill writes mb MiB to path and reports how much it could.
	http.HandleFunc("/fill", func(w http.ResponseWriter, r *http.Request) {
		mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		f, err := os.Create(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		defer f.Close()
		chunk := make([]byte, 64<<10)
		written := 0
		for written < mb<<20 {
			n, err := f.Write(chunk)
			written += n
			if err != nil {
				http.Error(w, fmt.Sprintf("wrote %d: %v", written, err), http.StatusInsufficientStorage)
				return
			}
		}
		fmt.Fprintf(w, "wrote %d\n", written)
	})
	go func() {
		for i := 0; ; i++ {
			time.Sleep(500 * time.Millisecond)
			fmt.Println("tick", i)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Println("bye")
		os.Exit(0)
	}()
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
