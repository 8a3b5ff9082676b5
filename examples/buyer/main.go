// Command buyer embeds a Suanli node as a buyer: it joins the network
// through one bootstrap peer and lists the offers matching a GPU search.
//
//	go run ./examples/buyer -bootstrap /ip4/127.0.0.1/tcp/PORT/p2p/PEER -gpu h100
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

func main() {
	boot := flag.String("bootstrap", "", "multiaddr of any peer, ending in /p2p/<id> (required)")
	gpu := flag.String("gpu", "", "market key or model substring, e.g. h100")
	maxPrice := flag.String("max-price", "", "highest USD per GPU-hour")
	wait := flag.Duration("wait", 30*time.Second, "how long to keep searching for at least one offer")
	flag.Parse()
	if *boot == "" {
		flag.Usage()
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "suanli-buyer-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	n, err := node.New(node.WithRepo(dir), node.WithAutoInit(), node.WithoutGPU(),
		node.WithListen("/ip4/127.0.0.1/tcp/0"), node.WithAPI(""), node.WithBootstrap(*boot))
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	q := api.OfferQuery{GPU: *gpu, MaxPrice: *maxPrice, Sort: "price"}
	for {
		offers, err := n.Offers(ctx, q)
		if err == nil && len(offers) > 0 {
			for _, o := range offers {
				fmt.Printf("%s  %s  %d GPUs (%s)  %s %s/GPU-h  %s\n",
					o.Provider, o.Region, len(o.GPUs), o.GPUs[0].Market, o.Price, o.Currency, o.Attestation)
			}
			return
		}
		if errors.Is(err, api.ErrBadRequest) {
			log.Fatal(err)
		}
		select {
		case <-ctx.Done():
			log.Fatalf("no offer found in %s (last error: %v)", *wait, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
