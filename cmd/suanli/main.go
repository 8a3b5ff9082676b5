// Command suanli is the Suanli node: a provider daemon for GPU owners and a
// CLI for buyers. Run `suanli help` for the commands.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
