package proto

import "github.com/libp2p/go-libp2p/core/record"

// Envelope domain and payload type of close notices (see close.proto).
const CloseNoticeDomain = "suanli-close"

// CloseNoticeCodec is the envelope payload type of a CloseNotice.
var CloseNoticeCodec = []byte("/suanli/close/1")

// MaxCloseNoticeSize bounds a sealed CloseNotice; larger ones are refused
// unread (a note is at most 512 bytes).
const MaxCloseNoticeSize = 4 << 10

func (*CloseNotice) EnvelopeDomain() string { return CloseNoticeDomain }
func (*CloseNotice) EnvelopeCodec() []byte  { return CloseNoticeCodec }

func init() { record.RegisterType(&Record[*CloseNotice]{}) }
