package main

import (
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/node/api"
)

func TestLeaseProgress(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	later := now.Add(15 * time.Second)
	tests := []struct {
		name string
		l    api.LeaseView
		want string
	}{
		{"reserved ahead", api.LeaseView{State: "running", LeaseType: "reserved", Start: later}, "agreed; the reserved block starts at"},
		{"on-demand after a notice", api.LeaseView{State: "running", LeaseType: "on-demand", Start: later}, "when a preemption notice to a spot lease ends"},
		{"running", api.LeaseView{State: "running", Start: now.Add(-time.Second)}, "running"},
		{"failed with its reason once", api.LeaseView{State: "closed", Reason: "failed", Note: "image not allowed: x", Exit: &api.ExitResult{Code: -1, Error: "image not allowed: x"}}, "closed failed: image not allowed: x"},
		{"exit code", api.LeaseView{State: "closed", Reason: "exited", Exit: &api.ExitResult{Code: 3}}, "closed exited, exit code 3"},
		{"signal", api.LeaseView{State: "closed", Reason: "completed", Exit: &api.ExitResult{Code: -1, Signal: "terminated"}}, "closed completed, killed by terminated"},
		{"oom", api.LeaseView{State: "closed", Reason: "exited", Exit: &api.ExitResult{Code: 137, OOMKilled: true}}, "killed for want of memory"},
	}
	for _, tc := range tests {
		if got := leaseProgress(tc.l, now); !strings.HasPrefix(got, tc.want) && !strings.Contains(got, tc.want) {
			t.Errorf("%s: leaseProgress = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := leaseProgress(tests[3].l, now); strings.Count(got, "image not allowed") != 1 {
		t.Errorf("leaseProgress stutters: %q", got)
	}
}

func TestOrderProgress(t *testing.T) {
	fill := api.TradeView{Count: 1}
	tests := []struct {
		o    api.OrderView
		want string
	}{
		{api.OrderView{Status: "done", Count: 2}, "nothing crossed it"},
		{api.OrderView{Status: "done", Count: 2, Fills: []api.TradeView{fill}}, "filled 1 of 2 GPUs"},
		{api.OrderView{Status: "done", Count: 1, Fills: []api.TradeView{fill}}, "filled: all 1 GPU"},
		{api.OrderView{Status: "resting", Count: 4, Remaining: 3}, "resting, 3 of 4 GPUs left"},
		{api.OrderView{Status: "cancelled", Count: 4}, "cancelled, filled 0 of 4 GPUs"},
	}
	for _, tc := range tests {
		if got := orderProgress(tc.o); !strings.Contains(got, tc.want) {
			t.Errorf("orderProgress(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestAmountText(t *testing.T) {
	for in, want := range map[string]string{"0.003278": "0.003278 USD", "12": "12.000000 USD", "0.1": "0.100000 USD", "": "0.000000 USD"} {
		if got := amountText(in, "USD"); got != want {
			t.Errorf("amountText(%q) = %q, want %q", in, got, want)
		}
	}
}
