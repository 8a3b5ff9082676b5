// Package lease runs the leases a node is party to: the loop that meters
// a provider's GPUs, bills each window with a signed receipt, takes the
// buyer's countersignatures and ends the lease (completed, unpaid, over
// credit, preempted, failed); the buyer's checks of receipts and its
// countersignatures; the close notices each side owes the other and their
// answers; the exec stream that runs a buyer's workload on the provider
// (start, attach, resume after a restart, sweep) and the buyer's stored
// copy of its output; redials of a lease's counterparty; and the leases'
// metrics.
//
// What a lease keeps on disk (its record, receipt chain, evidence and the
// settlement ledger) is package node/internal/leases, which knows the
// store, not the network; this package runs a lease and calls there. The
// two are apart so that the durable side stays a leaf that the CLI's
// offline checks and the node's API use without a host.
//
// A Manager is built from its dependencies (Config): the libp2p host, the
// node's key, store, Clock, logger, Metrics, GPU backend and executors,
// and Hooks for what it needs from the rest of the node (credit checks,
// capacity, preemption and resale frames, payments, the bid's workload,
// cached offers, resource limits). It imports no part of the node.
//
// # Time
//
// Every decision and every wait is on the Clock: billing ticks, graces,
// the close notice's resend backoff, the exec stream's reconnect backoff
// and the redial backoff. Tests drive it with a clockwork.FakeClock
// (machine_test.go); clockwork rather than testing/synctest because the
// tests run the protocols over real loopback sockets, which a synctest
// bubble cannot hold. The node passes RealClock: its WithClock time and
// the system's timers.
//
// # The lease protocol
//
// /suanli/receipt/1.0.0 carries one framed message and one answer per
// stream. A close notice is a proto.CloseNotice sealed by the party that
// ended the lease (SealClose), like receipts and countersignatures. States are market.LeaseState (starting, running, closed; a
// closed lease shows as ending while its workload stops); "owed" is a
// close notice this side still has to deliver (leases.Record.CloseOwed).
// Each row is a state and a message coming in, and what each side does;
// every refusal is answered FrameRefuse with the reason and counted under
// suanli_validation_rejects_total{kind,reason}.
//
//	state     message in              provider                                 buyer
//	any       receipt (R)             refused (receipt, receipt-lease): it is  -
//	                                  not the buyer
//	running   receipt                 -                                        checked (signer, chain, window, amount),
//	                                                                           countersigned if vouched
//	                                                                           (market.VouchWindow), else kept, refused
//	                                                                           (receipt, not-running)
//	running   receipt, same seq       -                                        same hash: the same answer; another:
//	                                                                           evidence stored, refused (equivocation)
//	starting  receipt                 -                                        as running (a buyer's lease starts with
//	                                                                           its fill: FromFill, replayLease)
//	running   countersign (answer)    checked (signer is the buyer, hash,      -
//	                                  seq), stored, chain advances; else
//	                                  refused (countersign, reason)
//	running   close (X), its reason   checked (parties; type: reserved not     checked (parties, the provider's reasons)
//	                                  ended early, market.CheckBuyerClose;     → closed at the notice's time
//	                                  completed only at the end) → closed at
//	                                  the notice's time, receipts past it
//	                                  dropped (never countersigned)
//	running   close, not its reason   refused (close, reason)                  refused (close, reason)
//	any       close, unsigned or not  refused (close, bad-envelope or          same
//	          an envelope             too-large)
//	any       close signed by another refused (close, wrong-signer): the       same
//	          than the sender         stream's peer, the envelope's signer and
//	                                  the notice's signer must be one party
//	any       close, bad fields       refused (close, malformed)               same
//	running   preemption (N)          refused: not the buyer                   checked (market.CheckPreemption), ends then
//	starting  close                   refused (close, out-of-turn)             same
//	closed    receipt                 -                                        taken for windows up to the close, else
//	                                                                           refused (receipt, receipt-window)
//	closed    close                   AgreeClose(own, theirs): the earlier;    same
//	                                  own refused by them: theirs
//	closed    owed                    re-sent until FrameOK or FrameRefuse,    same
//	                                  backoff 1 s doubling to 1 min (a
//	                                  redial that reaches the peer: at once)
//	any       unknown lease or peer   refused (close, unknown-lease)           same
//	any       payment (P)             the settlement ledger's (Hooks)          same
//	any       handover, premium       resale's (Hooks)                         same
//	any       unknown frame kind      refused (frame, unknown-kind)            same
//
// The provider's own transitions, at each step of its loop: running →
// closed when the preemption notice's time comes (preempted), at the
// lease's end (completed), when the buyer leaves receipts uncountersigned
// past the grace (unpaid), when a receipt would take the buyer over its
// credit (unpaid, at the end of what is billed), when a receipt cannot be
// stored (failed). The buyer's: at the preemption time, at the end, and
// when no receipt came for an interval and the grace (closed, and the
// close owed to the provider).
//
// # The exec stream
//
// /suanli/exec/1.0.0: the buyer's first frame is an execRequest (its
// workload, or an attach), then the provider streams frames back.
//
//	state     request in              provider
//	any       malformed request       exit -1, refused (exec, malformed)
//	any       unknown lease or peer   exit -1, refused (exec, unknown-lease)
//	running   workload, none yet      started with the executor asked for: started, stdout/stderr, exit;
//	                                  refused or failed to start: the lease fails (exec, workload-refused
//	                                  or workload-failed-to-start)
//	running   workload, one asked     taken as an attach
//	starting, workload                exit -1, refused (exec, not-running)
//	closed
//	any       attach                  started and output since SinceMs, then exit; the exit if it ended
//
// The buyer stores each output frame (under its log cap), records the
// started and exit frames, and reopens a broken stream as an attach while
// the lease runs (backoff 0.5 s doubling to 10 s).
//
// # Locks
//
// A Run's fields are guarded by its mu; the Manager's table of runs by
// its mu; stored output sizes by the logs' mu. Outermost first:
//
//	Manager.mu → Run.mu → leaseLogs.mu
//
// with one exception that cannot deadlock: FromFill holds a new run's mu
// while it adds the run to the table (no one else can hold or wait for a
// run not in the table yet). leaseLogs.mu is a leaf. No lock is held
// across a network call or while a workload stops (EndLocked stops it in
// the background); the store is written under Run.mu (its writes are
// synced: a receipt is on disk before it is answered). Hooks.OverCreditLocked
// runs under Run.mu and must take no lock of this package; every other
// hook runs with none held.
//
// The node's other parts read and mark leases through the Manager
// (others.go: Preemptible, MarkPreempted, Party, EachProvided, Snapshot,
// EndResold, HandOver, ResoldClosed, TermsFailed), each taking
// Manager.mu, then a run's, in the order above, so none may be called
// with a lock of this package held (from OverCreditLocked); callers may
// hold their own (the trade lock holds across Preemptible).
package lease
