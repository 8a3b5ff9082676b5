// Package resale is the resale of reserved time, all three sides of it,
// apart from the node that wires it: the holder's resale ask and its
// answer to a take of it (Manager.Place, Manager.HandleTake), the
// provider's handover (Manager.TakeHandover), and the new buyer's check of
// the holder's reply (Manager.TakeResale) and the countersigned premium
// (Manager.TakePremiumCountersign). market/resale.go has the rules; this
// package runs the protocol and keeps its records.
//
// It is a package of its own, not part of package trade: it is a
// three-party protocol that runs over the take stream and the lease
// protocol both (p2p.FrameHandover, p2p.FramePremium), with its own
// records and claims; package trade only hands it a take of a resale ask
// (trade.Node.ResaleTake) and the reply to one (trade.Node.TakeResale).
// What it needs of the node comes in through Config, the rest behind one
// small interface (Node: leases, own orders, the books' gossip, offers),
// implemented in node/wire_trade.go. It imports nothing of package node.
//
// Three parties: the holder H of reserved lease L (provider P → H), the
// provider P, and a new buyer B.
//
//  1. H places a reserved ask naming L (OrderRequest.Resell): the ask
//     carries L's signed terms (proto.Order.resell), sells L's GPUs all
//     or none for the rest of its block (its max duration; a bid taking
//     it must want all that is left), and only rests. Replicas take its
//     facts (region, attestation, memory) from P's offer (resaleFacts).
//  2. B's bid takes it from H as any ask (trade stream, proto.Take).
//  3. H signs a proto.Handover of L to B naming B's take and sends it to P
//     on the lease protocol (p2p.FrameHandover).
//  4. P checks it (L reserved, H its buyer, running, not resold before —
//     the handover is stored in one Badger transaction with the new
//     lease's terms, so a second is refused), moves the GPUs' hold from L
//     to L', ends L as resold at the handover t, and answers with its
//     sealed proto.Accept of L' (P → B, the same GPUs from t to the block's
//     end at L's price; ID: B's take's CID).
//  5. H checks the accept, ends L as resold at t, signs the
//     proto.Premium ((ask price − L's price) × GPUs × (end − t)), stores
//     the sale and its answer to B's take in one transaction
//     (store.PutResoldTake), and answers B's take with a
//     proto.ResaleReply: accept, handover, premium.
//  6. B checks the accept is L's provider's and its lease is L's rest, the
//     handover and the premium, countersigns the premium, stores the
//     record and starts L'; the countersignature goes to H
//     (p2p.FramePremium), which stores the same record.
//
// # State tables
//
// The holder, per lease L it holds (a take of its resale ask comes in
// through trade.Trader.HandleTake, inside its gate and after its replay
// and freshness rows):
//
//	state     message                                    answer, effect                                 next
//	holding   place a resale ask, L reserved, running,   the ask rests and is gossiped                  offered
//	          not resold, this node its buyer
//	holding   place a resale ask otherwise               refused; rejects{resale,<why>}                 holding
//	offered   take of the ask, L claimed by another      Reject; rejects{resale-take,busy}              offered
//	offered   take not for all L's GPUs, another price,  Reject; rejects{resale-take,<why>}             offered
//	          not reserved, shorter than L's rest, or
//	          not matching the ask by the book's rules
//	offered   take that checks                           Handover sent to P                             handing
//	handing   P unreachable, refuses, or its accept is   Reject; rejects{resale-take,<why>}             offered
//	          not L's rest for this take
//	handing   P's accept that checks                     L ends resold at t; premium signed; sale and   sold
//	                                                     answer stored (synced); ResaleReply
//	sold      the same take again (also after restart)   the stored ResaleReply (package trade)         sold
//	sold      another take, or a resale ask of L         Reject / refused; already-resold               sold
//	sold      premium countersign by B of this premium   stored beside the premium                      countersigned
//	sold      countersign by another, or of another      refused; rejects{premium,bad-countersign}      sold
//
// The provider, per lease L it provides:
//
//	state     message                                    answer, effect                                 next
//	running   handover not signed by its sender          Refuse; rejects{handover,not-holder}           running
//	running   handover of a lease it does not provide    Refuse; rejects{handover,unknown-lease}        running
//	running   handover failing market.CheckHandover, or  Refuse; rejects{handover,<why>}                running
//	          its take not B's, not of the ask, not all
//	          L's GPUs reserved
//	running   handover that checks                       handover + L' stored once (synced), GPUs moved  handed
//	                                                     to L', L ends resold at t, L' starts; Accept
//	handed    the same handover again                    the same Accept                                handed
//	handed    another handover of L                      Refuse; rejects{handover,already-resold}       handed
//	ended     any handover of L                          Refuse; rejects{handover,ended}                ended
//
// The new buyer, per take it sent of a resale ask: a ResaleReply whose
// accept is L's provider's for this take and L's rest, whose handover is
// the ask's maker's of this take to this buyer, and whose premium checks
// (market.CheckPremium) is countersigned, stored and L' started (filled);
// any other reply is refused with rejects{resale-reply,<why>} and the
// take fails (refused).
//
// Keys (synced writes):
//
//	handover/<lease>        on P: proto.ResaleReply (handover, accept) of the lease resold
//	resale/sold/<lease>     on H: proto.SignedPremium of the lease it resold
//	answer/<take id>        on H: its answer to the take that bought the lease (proto.TradeReply)
//	resale/bought/<lease>   on B: proto.SignedPremium of the lease it bought by resale
//
// # Locks
//
// The Manager's lock guards only its claims (the leases being handed
// over by this holder) and is a leaf. The provider's handover runs under
// the lease's lock (Node.HandOver), where it writes the handover and the
// GPUs' move; no other lock is held across the network.
package resale
