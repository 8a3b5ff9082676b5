package api

// Isolation levels, weakest first: what keeps a buyer's workload from the
// provider and from the next tenant.
const (
	// IsolationNone: the provider runs no buyer code (reserve only).
	IsolationNone = "none"
	// IsolationProcess: an unprivileged uid and a cgroup of its own per
	// lease (the process executor).
	IsolationProcess = "process"
	// IsolationContainer: a container per lease on its own firewalled
	// network, its root the host's root held back by dropped capabilities.
	IsolationContainer = "container"
	// IsolationContainerUserNS: as container, with the engine remapping
	// the container's root to an unprivileged host uid.
	IsolationContainerUserNS = "container-userns"
)

// IsolationView is what a provider's executors enforce, as `suanli status`
// and the dashboard's provider page show it.
type IsolationView struct {
	// Level is the weakest level among the executors that run buyer code.
	Level     string              `json:"level"`
	Executors []ExecutorIsolation `json:"executors"`
}

// ExecutorIsolation is what one executor enforces, and what it does not.
type ExecutorIsolation struct {
	Executor    string   `json:"executor"`
	Level       string   `json:"level"`
	Enforced    []string `json:"enforced"`
	NotEnforced []string `json:"not_enforced,omitempty"`
}
