package p2p

// Resale frames on the lease protocol (ReceiptProtocol); see node/internal/resale.
const (
	// FrameHandover carries a holder's sealed proto.Handover to the
	// lease's provider, answered by FrameOK with the provider's sealed
	// Accept of the new lease, or FrameRefuse with the reason.
	FrameHandover byte = 'H'
	// FramePremium carries a new buyer's sealed proto.PremiumCountersign
	// to the holder that resold it the lease.
	FramePremium byte = 'M'
)
