// Command provider embeds a Suanli node as a GPU provider: it offers a
// simulated DGX H100 (or real GPUs with -real) on 127.0.0.1 and prints the
// address buyers bootstrap from.
//
//	go run ./examples/provider
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/suanli/suanli/node"
)

func main() {
	repo := flag.String("repo", "", "repo directory (default: a temporary one)")
	real := flag.Bool("real", false, "offer the real GPUs found by NVML instead of a simulated DGX H100")
	region := flag.String("region", "CN-GZ", "region code")
	price := flag.String("price", "2.49", "USD per GPU-hour")
	flag.Parse()

	dir := *repo
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "suanli-provider-"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	opts := []node.Option{
		node.WithRepo(dir), node.WithAutoInit(),
		node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI("127.0.0.1:0"),
		node.WithRegion(*region), node.WithPrice(*price, "USD"),
	}
	if !*real {
		opts = append(opts, node.WithGPUSim("dgxh100", 1))
	}
	n, err := node.New(opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for n.Published() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	o := n.Published()
	fmt.Printf("offering %d GPUs (%s) in %s, seq %d\n", len(o.Gpus), o.Gpus[0].Market, o.Region, o.Seq)
	for _, a := range n.Addrs() {
		fmt.Printf("buyers: go run ./examples/buyer -bootstrap %s\n", a)
	}
	<-ctx.Done()
}
