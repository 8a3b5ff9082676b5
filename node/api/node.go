package api

import "time"

// IDInfo identifies a node. Addrs are full multiaddrs ending in /p2p/<id>.
type IDInfo struct {
	ID       string   `json:"id"`
	Addrs    []string `json:"addrs"`
	Provider bool     `json:"provider"`
	// NoGPUReason says why the node is not a provider, when it is not.
	NoGPUReason string `json:"no_gpu_reason,omitempty"`
}

// PeerView is one connected peer.
type PeerView struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

// GPUReport is the local inventory with one telemetry sample per GPU.
type GPUReport struct {
	Backend               string      `json:"backend"`
	DriverVersion         string      `json:"driver_version"`
	CUDADriverVersion     string      `json:"cuda_driver_version"`
	NVMLVersion           string      `json:"nvml_version"`
	ConfidentialComputing bool        `json:"confidential_computing"`
	Attestation           string      `json:"attestation"`
	GPUs                  []GPUDetail `json:"gpus"`
}

// GPUDetail is one local GPU.
type GPUDetail struct {
	Index                int    `json:"index"`
	UUID                 string `json:"uuid"`
	Name                 string `json:"name"`
	Market               string `json:"market"`
	MemoryBytes          uint64 `json:"memory_bytes"`
	PCIBusID             string `json:"pci_bus_id"`
	ComputeCapability    string `json:"compute_capability"`
	Architecture         string `json:"architecture,omitempty"`
	Serial               string `json:"serial,omitempty"`
	PowerLimitMilliwatts uint32 `json:"power_limit_mw,omitempty"`
	ECC                  string `json:"ecc,omitempty"`
	MIGEnabled           bool   `json:"mig_enabled"`
	// EvidenceReportSHA256 names the attestation report, when there is one.
	EvidenceReportSHA256 string     `json:"evidence_report_sha256,omitempty"`
	Telemetry            *Telemetry `json:"telemetry,omitempty"`
}

// StatusView is a node at a glance, for `suanli status` and the dashboard.
type StatusView struct {
	ID          string `json:"id"`
	Provider    bool   `json:"provider"`
	NoGPUReason string `json:"no_gpu_reason,omitempty"`
	Peers       int    `json:"peers"`
	// Markets are the markets this node has joined.
	Markets []string `json:"markets"`
	// Offer is the offer this node last published, if any.
	Offer         *PublishedOffer `json:"offer,omitempty"`
	OpenOrders    int             `json:"open_orders"`
	Orders        int             `json:"orders"`
	RunningLeases int             `json:"running_leases"`
	Leases        int             `json:"leases"`
	// Owed is, per currency, what peers owe this node over every
	// countersigned receipt less payments; negative when this node owes.
	Owed []OwedView `json:"owed"`
	// Isolation is what this provider's executors enforce.
	Isolation *IsolationView `json:"isolation,omitempty"`
}

// OwedView is a net amount in one currency.
type OwedView struct {
	Currency   string `json:"currency"`
	Owed       string `json:"owed"`
	OwedMicros int64  `json:"owed_micros"`
}

// PublishedOffer is a summary of this node's published offer.
type PublishedOffer struct {
	Seq      uint64    `json:"seq"`
	GPUs     int       `json:"gpus"`
	Price    string    `json:"price"`
	Currency string    `json:"currency"`
	Region   string    `json:"region"`
	Expires  time.Time `json:"expires"`
}

// CreditView is a buyer's credit with this provider in one currency.
type CreditView struct {
	Currency  string `json:"currency"`
	Limit     string `json:"limit"`
	Unpaid    string `json:"unpaid"`
	Available string `json:"available"`
	// AvailableMicros is Available in micro-units; negative when over.
	AvailableMicros int64 `json:"available_micros"`
}

// AccessView says what the token of a request may do.
type AccessView struct {
	// Access is "full" or "read-only".
	Access string `json:"access"`
}

// Telemetry is one sample of a GPU's counters (the JSON keeps the Go field
// names, as gpu.Telemetry has always been served).
type Telemetry struct {
	UUID               string
	UtilizationPercent uint32
	MemoryUsedBytes    uint64
	MemoryTotalBytes   uint64
	TemperatureC       uint32
	PowerMilliwatts    uint32
	EnergyMillijoules  uint64 // total since driver load; 0 when not reported
}
