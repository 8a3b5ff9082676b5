package executor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// LeaseLabel is the label, valued with the lease ID, on every container
// and volume the docker executor creates; OwnerLabel, valued with
// DockerConfig.Owner, says which daemon created it, so one daemon never
// adopts or sweeps another's on a shared engine.
const (
	LeaseLabel = "suanli.lease"
	OwnerLabel = "suanli.owner"
)

// GPU access modes (Info.GPUAccess).
const (
	GPUAccessNvidia  = "nvidia"
	GPUAccessEnvOnly = "env-only"
)

// Defaults of DockerConfig.
const (
	DefaultPortMin     = 20000
	DefaultPortMax     = 20999
	DefaultPullTimeout = 10 * time.Minute
	DefaultPidsLimit   = 4096
	DefaultEngineGrace = time.Minute
	// MaxPorts bounds the ports one lease may publish.
	MaxPorts = 16
)

// defaultCapAdd is what a workload keeps of the capabilities once all are
// dropped: enough for an entrypoint that drops to a user, sshd, and a
// server on a low port; nothing that reaches the host (no NET_RAW,
// MKNOD, SYS_ADMIN, …).
var defaultCapAdd = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL", "NET_BIND_SERVICE"}

// sshCapAdd is added when the buyer gives an SSH key: sshd chroots its
// privilege-separated child and writes audit records.
var sshCapAdd = []string{"SYS_CHROOT", "AUDIT_WRITE"}

// DockerConfig configures the docker executor.
type DockerConfig struct {
	// Owner names this daemon on the engine (the node sets its peer ID):
	// Sweep and Adopt touch only what carries it.
	Owner string
	// Images is what may run; the zero policy allows nothing.
	Images ImagePolicy
	// PortMin and PortMax bound the host ports buyers' container ports are
	// published on. Default DefaultPortMin–DefaultPortMax.
	PortMin, PortMax uint16
	// BindIP is the host address published ports listen on. Default
	// 127.0.0.1; a provider serving buyers elsewhere sets 0.0.0.0.
	BindIP string
	// AdvertiseHost is the host buyers are told to reach the ports at.
	// Default BindIP (127.0.0.1 when BindIP is 0.0.0.0: set it).
	AdvertiseHost string
	// EnvOnlyGPUs runs containers without GPU device requests when the
	// engine has no NVIDIA runtime, the UUIDs still in the environment. Only
	// for simulated GPUs; otherwise such leases are refused.
	EnvOnlyGPUs bool
	// PullTimeout bounds pulling a missing image, before billing starts.
	PullTimeout time.Duration
	// EngineGrace is how long a running container's engine may stay out of
	// reach (restarting, say) before the workload is taken as lost.
	// Default DefaultEngineGrace.
	EngineGrace time.Duration
	// PidsLimit bounds a container's processes. Default DefaultPidsLimit.
	PidsLimit int64
	// OpenPrivateEgress lets containers reach the private, link-local
	// (cloud metadata) and other non-public ranges and the host itself,
	// which are blocked by default (with iptables rules per lease).
	OpenPrivateEgress bool
	// Client talks to the engine; default: from the environment
	// (DOCKER_HOST, …), API version negotiated.
	Client *client.Client
	// OnBusy, when set, is told when a container starts and ends.
	OnBusy func(gpus []string, busy bool)
}

// DockerExecutor runs each lease's workload as a container on the Docker
// Engine, through the engine's API: GPUs requested as device requests for
// exactly the leased UUIDs (driver nvidia), resources limited from the
// offer, every capability dropped but a few, no privilege escalation, a
// read-only root, a per-lease scratch volume, and the buyer's ports
// published on host ports of a configured range.
type DockerExecutor struct {
	cfg   DockerConfig
	cli   *client.Client
	ports *portPool
	fw    *firewall // nil when private egress is open
	// quota is whether the engine's storage driver limits a container's
	// writable layer (set by Isolation).
	mu    sync.Mutex
	quota bool
}

var (
	_ Adopter     = (*DockerExecutor)(nil)
	_ Execution   = (*dockerRun)(nil)
	_ LogFollower = (*dockerRun)(nil)
	_ Detacher    = (*dockerRun)(nil)
)

// NewDocker returns a docker executor. It does not contact the engine:
// Ping does, and every Start.
func NewDocker(cfg DockerConfig) (*DockerExecutor, error) {
	if cfg.PortMin == 0 && cfg.PortMax == 0 {
		cfg.PortMin, cfg.PortMax = DefaultPortMin, DefaultPortMax
	}
	if cfg.PortMin == 0 || cfg.PortMax < cfg.PortMin {
		return nil, fmt.Errorf("executor: docker port range %d-%d", cfg.PortMin, cfg.PortMax)
	}
	if cfg.BindIP == "" {
		cfg.BindIP = "127.0.0.1"
	}
	if _, err := netip.ParseAddr(cfg.BindIP); err != nil {
		return nil, fmt.Errorf("executor: docker bind address: %v", err)
	}
	if cfg.AdvertiseHost == "" {
		cfg.AdvertiseHost = cfg.BindIP
		if a, _ := netip.ParseAddr(cfg.BindIP); a.IsUnspecified() {
			cfg.AdvertiseHost = "127.0.0.1"
		}
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = DefaultPullTimeout
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = DefaultPidsLimit
	}
	if cfg.EngineGrace <= 0 {
		cfg.EngineGrace = DefaultEngineGrace
	}
	var fw *firewall
	if !cfg.OpenPrivateEgress {
		f, err := newFirewall()
		if err != nil {
			return nil, err
		}
		fw = f
	}
	cli := cfg.Client
	if cli == nil {
		c, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrEngine, err)
		}
		cli = c
	}
	return &DockerExecutor{cfg: cfg, cli: cli, fw: fw, ports: newPortPool(cfg.BindIP, cfg.PortMin, cfg.PortMax)}, nil
}

// Name implements Executor.
func (*DockerExecutor) Name() string { return Docker }

// Client is the engine client the executor uses.
func (d *DockerExecutor) Client() *client.Client { return d.cli }

// Close releases the engine client.
func (d *DockerExecutor) Close() error { return d.cli.Close() }

// Ping checks that the engine answers, and reports whether it has the
// NVIDIA runtime.
func (d *DockerExecutor) Ping(ctx context.Context) (nvidia bool, err error) {
	info, err := d.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	_, nvidia = info.Info.Runtimes["nvidia"]
	return nvidia, nil
}

// DockerIsolation is what the engine enforces for a lease, as Isolation
// finds it.
type DockerIsolation struct {
	// UserNS is whether the engine remaps containers' root to an
	// unprivileged host uid (userns-remap); without it a container's root
	// is the host's root, held back only by dropped capabilities.
	UserNS bool `json:"userns"`
	// StorageDriver is the engine's; DiskQuota whether it bounds a
	// container's writable layer.
	StorageDriver string `json:"storage_driver"`
	DiskQuota     bool   `json:"disk_quota"`
	// Disk says how the disk sold is enforced.
	Disk string `json:"disk"`
	// Network says how leases are kept apart and from the provider.
	Network string `json:"network"`
	// Logs is the cap on a lease's kept output.
	Logs string `json:"logs"`
}

// quotaDrivers are storage drivers that bound a container's size
// (overlay2 only on xfs with project quotas).
var quotaDrivers = []string{"btrfs", "zfs", "devicemapper", "windowsfilter"}

// Isolation asks the engine what it enforces, and remembers whether its
// storage has quotas.
func (d *DockerExecutor) Isolation(ctx context.Context) (DockerIsolation, error) {
	info, err := d.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return DockerIsolation{}, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	iso := DockerIsolation{StorageDriver: info.Info.Driver, Logs: "16 MiB × 2 files per lease"}
	for _, o := range info.Info.SecurityOptions {
		if strings.Contains(o, "name=userns") {
			iso.UserNS = true
		}
	}
	iso.DiskQuota = slices.Contains(quotaDrivers, info.Info.Driver)
	if info.Info.Driver == "overlay2" {
		for _, kv := range info.Info.DriverStatus {
			if kv[0] == "Backing Filesystem" && kv[1] == "xfs" {
				iso.DiskQuota = true
			}
		}
	}
	if iso.DiskQuota {
		iso.Disk = "the disk sold bounds /scratch and the writable layer (" + iso.StorageDriver + " quota)"
	} else {
		iso.Disk = "the disk sold bounds /scratch (memory-backed, counted in the lease's memory); no writable root when disk is sold: " + iso.StorageDriver + " has no quota"
	}
	if d.fw != nil {
		iso.Network = "own network per lease, no traffic between containers; host, private, link-local and metadata addresses blocked"
	} else {
		iso.Network = "own network per lease, no traffic between containers; private egress open"
	}
	d.mu.Lock()
	d.quota = iso.DiskQuota
	d.mu.Unlock()
	return iso, nil
}

// gpuAccess decides how the GPUs reach a container on this engine.
func (d *DockerExecutor) gpuAccess(ctx context.Context) (string, error) {
	nvidia, err := d.Ping(ctx)
	if err != nil {
		return "", err
	}
	switch {
	case nvidia:
		return GPUAccessNvidia, nil
	case d.cfg.EnvOnlyGPUs:
		return GPUAccessEnvOnly, nil
	}
	return "", fmt.Errorf("%w: the container engine has no NVIDIA runtime (install the NVIDIA Container Toolkit)", ErrRefused)
}

// Admit checks what can be checked of w without the engine: the image
// reference and the allow-list by name, the ports. A workload Admit
// refuses is refused before anything is created.
func (d *DockerExecutor) Admit(w Workload) error {
	n, err := ParseImage(w.Image)
	if err != nil {
		return err
	}
	if ok, _ := d.cfg.Images.AllowsRef(n); !ok {
		return fmt.Errorf("%w: image %s is not allowed by this provider", ErrRefused, n.String())
	}
	if len(w.Ports) > MaxPorts {
		return fmt.Errorf("%w: %d ports, at most %d", ErrRefused, len(w.Ports), MaxPorts)
	}
	seen := map[uint16]bool{}
	for _, p := range w.Ports {
		if p == 0 {
			return fmt.Errorf("%w: container port 0", ErrRefused)
		}
		if seen[p] {
			return fmt.Errorf("%w: container port %d twice", ErrRefused, p)
		}
		seen[p] = true
	}
	if strings.ContainsAny(w.SSHKey, "\x00") || len(w.SSHKey) > 16<<10 {
		return fmt.Errorf("%w: malformed SSH key", ErrRefused)
	}
	return nil
}

func (d *DockerExecutor) labels(lease string) map[string]string {
	return map[string]string{LeaseLabel: lease, OwnerLabel: d.cfg.Owner}
}

// filter selects this daemon's objects of lease ("": of every lease).
func (d *DockerExecutor) filter(lease string) client.Filters {
	f := make(client.Filters).Add("label", OwnerLabel+"="+d.cfg.Owner)
	if lease == "" {
		return f.Add("label", LeaseLabel)
	}
	return f.Add("label", LeaseLabel+"="+lease)
}

func containerName(lease string) string { return "suanli-" + lease }
func networkName(lease string) string   { return "suanli-" + leaseName(lease) }
func volumeName(lease, what string) string {
	return "suanli-" + lease + "-" + what
}

// Start implements Executor: it checks the workload, makes sure the image
// is present (pulling it within PullTimeout), creates the lease's volumes
// and container and starts it. On any failure everything it created is
// removed again.
func (d *DockerExecutor) Start(ctx context.Context, w Workload) (_ Execution, err error) {
	if err := d.Admit(w); err != nil {
		return nil, err
	}
	access, err := d.gpuAccess(ctx)
	if err != nil {
		return nil, err
	}
	// Admit has checked the reference against the allow-list: nothing is
	// pulled that the provider did not allow.
	img, err := d.ensureImage(ctx, w.Image)
	if err != nil {
		return nil, err
	}
	named, _ := ParseImage(w.Image)
	if _, byDigest := d.cfg.Images.AllowsRef(named); byDigest {
		dg := named.(reference.Canonical).Digest().String()
		if img.ID != dg && !slices.ContainsFunc(img.RepoDigests, func(r string) bool { return strings.HasSuffix(r, "@"+dg) }) {
			return nil, fmt.Errorf("%w: image %s resolved to %s, which does not have the allowed digest", ErrRefused, w.Image, img.ID)
		}
	}
	// The container is made from the image ID just checked, not from the
	// reference, which could name another image by then.
	ref := w.Image
	w.Image = img.ID
	defer func() {
		if err != nil {
			d.remove(context.WithoutCancel(ctx), w.LeaseID)
		}
	}()
	id, ports, err := d.create(ctx, w, access)
	if err != nil {
		return nil, err
	}
	run := d.newRun(w, id, access, img.ID, firstOr(img.RepoDigests))
	run.info.Image = ref
	run.info.Endpoints = ports
	// The exit is watched from before the start, so a workload that exits
	// at once is seen.
	waitCtx, cancel := context.WithCancel(context.Background())
	run.cancel = cancel
	wait := d.cli.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		cancel()
		return nil, fmt.Errorf("%w: start container: %v", ErrEngine, err)
	}
	run.info.Started = time.Now()
	run.followLogs(waitCtx, time.Time{}, w.Stdout, w.Stderr)
	go run.watch(waitCtx, wait)
	if d.cfg.OnBusy != nil {
		d.cfg.OnBusy(w.GPUs, true)
	}
	return run, nil
}

func firstOr(s []string) string {
	if len(s) > 0 {
		return s[0]
	}
	return ""
}

type imageInfo struct {
	ID          string
	RepoDigests []string
}

// ensureImage inspects ref, pulling it first when the engine lacks it.
func (d *DockerExecutor) ensureImage(ctx context.Context, ref string) (imageInfo, error) {
	res, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		return imageInfo{ID: res.ID, RepoDigests: res.RepoDigests}, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return imageInfo{}, fmt.Errorf("%w: inspect image: %v", ErrEngine, err)
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.PullTimeout)
	defer cancel()
	pull, err := d.cli.ImagePull(pctx, ref, client.ImagePullOptions{})
	if err == nil {
		err = pull.Wait(pctx)
		pull.Close()
	}
	if err != nil {
		return imageInfo{}, fmt.Errorf("%w: image %s is not on this provider and could not be pulled: %v", ErrRefused, ref, err)
	}
	if res, err = d.cli.ImageInspect(ctx, ref); err != nil {
		return imageInfo{}, fmt.Errorf("%w: inspect pulled image: %v", ErrEngine, err)
	}
	return imageInfo{ID: res.ID, RepoDigests: res.RepoDigests}, nil
}

// create makes the lease's volumes and container, with host ports from the
// pool; a port that turns out taken is replaced and the start retried.
func (d *DockerExecutor) create(ctx context.Context, w Workload, access string) (string, []Endpoint, error) {
	devs := strings.Join(w.GPUs, ",")
	cfg := &container.Config{
		Image:  w.Image,
		Cmd:    w.Command,
		Labels: d.labels(w.LeaseID),
		Env: []string{
			"NVIDIA_VISIBLE_DEVICES=" + devs, "CUDA_VISIBLE_DEVICES=" + devs,
			"NVIDIA_DRIVER_CAPABILITIES=compute,utility",
			"SUANLI_LEASE=" + w.LeaseID, "SUANLI_GPUS=" + devs, "SUANLI_GPU_ACCESS=" + access,
		},
		ExposedPorts: network.PortSet{},
	}
	if w.SSHKey != "" {
		cfg.Env = append(cfg.Env, "SUANLI_SSH_AUTHORIZED_KEYS="+w.SSHKey)
	}
	pids := d.cfg.PidsLimit
	if w.Limits.Pids > 0 {
		pids = min(pids, w.Limits.Pids)
	}
	caps := append([]string(nil), defaultCapAdd...)
	if w.SSHKey != "" {
		caps = append(caps, sshCapAdd...)
	}
	netName, err := d.createNetwork(ctx, w.LeaseID)
	if err != nil {
		return "", nil, err
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(netName),
		PortBindings:   network.PortMap{},
		Privileged:     false,
		ReadonlyRootfs: !w.WritableRoot,
		CapDrop:        []string{"ALL"},
		CapAdd:         caps,
		SecurityOpt:    []string{"no-new-privileges"},
		Resources: container.Resources{
			NanoCPUs:  w.Limits.MilliCPUs * 1_000_000,
			Memory:    w.Limits.MemoryBytes,
			PidsLimit: &pids,
		},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "16m", "max-file": "2"}},
	}
	if w.Limits.MemoryBytes > 0 {
		hc.Resources.MemorySwap = w.Limits.MemoryBytes // no swap
	}
	if access == GPUAccessNvidia {
		hc.Resources.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: w.GPUs, Capabilities: [][]string{{"gpu"}}}}
	}
	d.mu.Lock()
	quota := d.quota
	d.mu.Unlock()
	scratchOpts := map[string]string(nil)
	if w.Limits.DiskBytes > 0 {
		// The disk sold: /scratch is a volume of exactly that size; the
		// writable layer is bounded by the storage driver's quota, or not
		// offered where the driver has none.
		scratchOpts = map[string]string{"type": "tmpfs", "device": "tmpfs", "o": fmt.Sprintf("size=%d,mode=1777", w.Limits.DiskBytes)}
		if quota {
			hc.StorageOpt = map[string]string{"size": strconv.FormatInt(w.Limits.DiskBytes, 10)}
		} else if w.WritableRoot {
			return "", nil, fmt.Errorf("%w: a writable root cannot be bounded to the disk sold on this provider's storage driver (no quota): use /scratch", ErrRefused)
		}
	}
	scratch := volumeName(w.LeaseID, "scratch")
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: scratch, DriverOpts: scratchOpts, Labels: d.labels(w.LeaseID)}); err != nil {
		return "", nil, fmt.Errorf("%w: create volume: %v", ErrEngine, err)
	}
	hc.Mounts = []mount.Mount{{Type: mount.TypeVolume, Source: scratch, Target: "/scratch"}}
	if !w.WritableRoot {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeTmpfs, Target: "/tmp", TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 256 << 20}})
	}
	if w.SSHKey != "" {
		ssh := volumeName(w.LeaseID, "ssh")
		if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: ssh, Labels: d.labels(w.LeaseID)}); err != nil {
			return "", nil, fmt.Errorf("%w: create volume: %v", ErrEngine, err)
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: ssh, Target: "/root/.ssh"})
	}
	hostPorts, err := d.ports.take(w.LeaseID, len(w.Ports))
	if err != nil {
		return "", nil, err
	}
	bind, _ := netip.ParseAddr(d.cfg.BindIP)
	var eps []Endpoint
	for i, p := range w.Ports {
		cp, _ := network.PortFrom(p, network.TCP)
		cfg.ExposedPorts[cp] = struct{}{}
		hc.PortBindings[cp] = []network.PortBinding{{HostIP: bind, HostPort: strconv.Itoa(int(hostPorts[i]))}}
		eps = append(eps, Endpoint{ContainerPort: p, Host: d.cfg.AdvertiseHost, HostPort: hostPorts[i]})
	}
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: containerName(w.LeaseID), Config: cfg, HostConfig: hc})
	if err != nil {
		if cerrdefs.IsInvalidArgument(err) || cerrdefs.IsNotFound(err) {
			return "", nil, fmt.Errorf("%w: create container: %v", ErrRefused, err)
		}
		return "", nil, fmt.Errorf("%w: create container: %v", ErrEngine, err)
	}
	if w.SSHKey != "" {
		if err := d.copyAuthorizedKeys(ctx, res.ID, w.SSHKey); err != nil {
			return "", nil, err
		}
	}
	return res.ID, eps, nil
}

// createNetwork makes the lease's own bridge network, with traffic
// between its containers off, and its firewall rules: a lease reaches no
// other lease, nor (unless opened) the host, the LAN or the cloud's
// metadata address.
func (d *DockerExecutor) createNetwork(ctx context.Context, lease string) (string, error) {
	name := networkName(lease)
	_, err := d.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		Labels: d.labels(lease),
		Options: map[string]string{
			"com.docker.network.bridge.enable_icc": "false",
			"com.docker.network.bridge.name":       bridgeName(lease),
		},
	})
	if err != nil {
		if strings.Contains(err.Error(), "address pool") || strings.Contains(err.Error(), "overlap") {
			return "", fmt.Errorf("%w: no free address range for the lease's network: %v", ErrRefused, err)
		}
		return "", fmt.Errorf("%w: create network: %v", ErrEngine, err)
	}
	if d.fw != nil {
		if err := d.fw.add(lease, false); err != nil {
			return "", err
		}
	}
	return name, nil
}

// copyAuthorizedKeys writes the buyer's key as /root/.ssh/authorized_keys
// (0600, owned by root) into the lease's ssh volume.
func (d *DockerExecutor) copyAuthorizedKeys(ctx context.Context, id, key string) error {
	key = strings.TrimSpace(key) + "\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "authorized_keys", Mode: 0o600, Size: int64(len(key)), ModTime: time.Now()})
	tw.Write([]byte(key))
	tw.Close()
	if _, err := d.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/root/.ssh", Content: &buf}); err != nil {
		return fmt.Errorf("%w: install the SSH key: %v", ErrEngine, err)
	}
	return nil
}

// remove deletes every container and volume labelled with lease and frees
// its ports.
func (d *DockerExecutor) remove(ctx context.Context, lease string) error {
	defer d.ports.release(lease)
	f := d.filter(lease)
	var errs []error
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("%w: list containers: %v", ErrEngine, err)
	}
	for _, c := range cs.Items {
		if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if d.fw != nil {
		if err := d.fw.remove(lease); err != nil {
			errs = append(errs, err)
		}
	}
	ns, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("%w: list networks: %v", ErrEngine, err)
	}
	for _, n := range ns.Items {
		if _, err := d.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("%w: list volumes: %v", ErrEngine, err)
	}
	for _, v := range vs.Items {
		if _, err := d.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: remove lease %s: %v", ErrEngine, lease, err)
	}
	return nil
}

// Adopt implements Adopter: a container of the lease that still runs is
// taken back (its ports marked used again); anything else of the lease is
// removed.
func (d *DockerExecutor) Adopt(ctx context.Context, w Workload, handle string) (Execution, error) {
	f := d.filter(w.LeaseID)
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("%w: list containers: %v", ErrEngine, err)
	}
	for _, c := range cs.Items {
		if handle != "" && c.ID != handle {
			continue
		}
		ins, err := d.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil || ins.Container.State == nil || !ins.Container.State.Running {
			break
		}
		access := GPUAccessEnvOnly
		if ins.Container.HostConfig != nil && len(ins.Container.HostConfig.DeviceRequests) > 0 {
			access = GPUAccessNvidia
		}
		run := d.newRun(w, c.ID, access, ins.Container.Image, "")
		if t, err := time.Parse(time.RFC3339Nano, ins.Container.State.StartedAt); err == nil {
			run.info.Started = t
		}
		var ports []uint16
		if ins.Container.NetworkSettings != nil {
			for cp, bs := range ins.Container.NetworkSettings.Ports {
				for _, b := range bs {
					hp, err := strconv.ParseUint(b.HostPort, 10, 16)
					if err != nil {
						continue
					}
					ports = append(ports, uint16(hp))
					run.info.Endpoints = append(run.info.Endpoints, Endpoint{ContainerPort: cp.Num(), Host: d.cfg.AdvertiseHost, HostPort: uint16(hp)})
					break
				}
			}
		}
		d.ports.mark(w.LeaseID, ports)
		waitCtx, cancel := context.WithCancel(context.Background())
		run.cancel = cancel
		wait := d.cli.ContainerWait(waitCtx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		if w.Stdout != nil || w.Stderr != nil {
			run.followLogs(waitCtx, time.Now(), w.Stdout, w.Stderr)
		}
		go run.watch(waitCtx, wait)
		if d.cfg.OnBusy != nil {
			d.cfg.OnBusy(w.GPUs, true)
		}
		return run, nil
	}
	if err := d.remove(ctx, w.LeaseID); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: no running container of lease %s", ErrGone, w.LeaseID)
}

// Sweep implements Adopter.
func (d *DockerExecutor) Sweep(ctx context.Context, keep func(string) bool) ([]string, error) {
	if d.cfg.Owner == "" {
		return nil, errors.New("executor: docker Sweep needs an Owner")
	}
	f := d.filter("")
	leases := map[string]bool{}
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("%w: list containers: %v", ErrEngine, err)
	}
	for _, c := range cs.Items {
		leases[c.Labels[LeaseLabel]] = true
	}
	vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("%w: list volumes: %v", ErrEngine, err)
	}
	for _, v := range vs.Items {
		leases[v.Labels[LeaseLabel]] = true
	}
	ns, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("%w: list networks: %v", ErrEngine, err)
	}
	for _, n := range ns.Items {
		leases[n.Labels[LeaseLabel]] = true
	}
	var removed []string
	var errs []error
	for l := range leases {
		if l == "" || keep(l) {
			continue
		}
		if err := d.remove(ctx, l); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, l)
	}
	return removed, errors.Join(errs...)
}

// dockerRun is one lease's container.
type dockerRun struct {
	d      *DockerExecutor
	w      Workload
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	// logsDone is closed when the output followed from the start has been
	// copied out; nil when none is followed.
	logsDone chan struct{}

	mu       sync.Mutex
	info     Info
	res      ExitResult
	detached bool
	stopping bool
	stopOnce sync.Once
	stopErr  error
}

func (d *DockerExecutor) newRun(w Workload, id, access, imageID, repoDigest string) *dockerRun {
	return &dockerRun{d: d, w: w, id: id, done: make(chan struct{}), info: Info{
		Executor: Docker, Handle: id, Image: w.Image, ImageID: imageID, RepoDigest: repoDigest,
		State: "running", GPUAccess: access, Limits: w.Limits,
	}}
}

// watch waits for the container to stop and records how it ended. An
// engine that drops the wait (restarting, say) is asked again until it
// answers with the container's state or stays away past EngineGrace.
func (r *dockerRun) watch(ctx context.Context, wait client.ContainerWaitResult) {
	defer close(r.done)
	defer func() {
		if r.logsDone != nil {
			// The last lines come out before Done: what the workload
			// printed as it ended is not lost.
			select {
			case <-r.logsDone:
			case <-time.After(5 * time.Second):
			}
		}
		if r.d.cfg.OnBusy != nil {
			r.d.cfg.OnBusy(r.w.GPUs, false)
		}
	}()
	lost := time.Time{}
	for {
		select {
		case resp := <-wait.Result:
			r.finish(int(resp.StatusCode), "")
			return
		case err := <-wait.Error:
			if ctx.Err() != nil {
				r.mu.Lock()
				if r.detached {
					r.res = ExitResult{Code: -1, Detached: true}
					r.mu.Unlock()
					return
				}
				r.mu.Unlock()
				r.finish(-1, "")
				return
			}
			if lost.IsZero() {
				lost = time.Now()
			}
			ins, ierr := r.d.cli.ContainerInspect(ctx, r.id, client.ContainerInspectOptions{})
			switch {
			case ierr == nil && ins.Container.State != nil && !ins.Container.State.Running:
				r.finish(ins.Container.State.ExitCode, "")
				return
			case cerrdefs.IsNotFound(ierr):
				r.finish(-1, "the container was removed outside the daemon")
				return
			case time.Since(lost) > r.d.cfg.EngineGrace:
				r.finish(-1, "lost the container engine: "+err.Error())
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			wait = r.d.cli.ContainerWait(ctx, r.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		}
	}
}

// finish records the exit, asking the engine whether the kernel killed it
// for memory.
func (r *dockerRun) finish(code int, why string) {
	res := ExitResult{Code: code, Error: why}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ins, err := r.d.cli.ContainerInspect(ctx, r.id, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
		st := ins.Container.State
		res.OOMKilled = st.OOMKilled
		if !st.Running && why == "" {
			res.Code = st.ExitCode
		}
		if st.Error != "" && res.Error == "" {
			res.Error = st.Error
		}
	}
	if res.OOMKilled && res.Error == "" {
		res.Error = "killed for exceeding its memory limit"
	}
	r.mu.Lock()
	if r.stopping && res.Code == 137 {
		res.Code, res.Signal = -1, "killed"
	} else if r.stopping && res.Code == 143 {
		res.Code, res.Signal = -1, "terminated"
	}
	r.res = res
	r.info.State = "exited"
	r.mu.Unlock()
}

func (r *dockerRun) Done() <-chan struct{} { return r.done }

func (r *dockerRun) Result() ExitResult {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}

func (r *dockerRun) Info() Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.info
	i.Endpoints = append([]Endpoint(nil), i.Endpoints...)
	return i
}

// Stop implements Execution: SIGTERM, grace, SIGKILL (the engine's stop),
// then the container and its volumes are removed and the ports freed.
func (r *dockerRun) Stop(grace time.Duration) error {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopping = true
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
		defer cancel()
		secs := int((grace + time.Second - 1) / time.Second)
		_, err := r.d.cli.ContainerStop(ctx, r.id, client.ContainerStopOptions{Timeout: &secs})
		if err != nil && !cerrdefs.IsNotFound(err) {
			r.stopErr = fmt.Errorf("%w: stop container: %v", ErrEngine, err)
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			r.cancel()
			<-r.done
		}
		r.cancel()
		if err := r.d.remove(ctx, r.w.LeaseID); err != nil && r.stopErr == nil {
			r.stopErr = err
		}
	})
	return r.stopErr
}

// Detach implements Detacher: the container runs on, unwatched.
func (r *dockerRun) Detach() {
	r.mu.Lock()
	r.detached = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
}

// FollowLogs implements LogFollower.
func (r *dockerRun) FollowLogs(ctx context.Context, since time.Time, stdout, stderr io.Writer) error {
	return r.logs(ctx, since, stdout, stderr)
}

// followLogs copies the output to stdout and stderr in the background,
// closing logsDone when the stream ends.
func (r *dockerRun) followLogs(ctx context.Context, since time.Time, stdout, stderr io.Writer) {
	r.logsDone = make(chan struct{})
	go func() {
		defer close(r.logsDone)
		r.logs(ctx, since, stdout, stderr)
	}()
}

func (r *dockerRun) logs(ctx context.Context, since time.Time, stdout, stderr io.Writer) error {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true}
	if !since.IsZero() {
		opts.Since = strconv.FormatInt(since.Unix(), 10)
	}
	rc, err := r.d.cli.ContainerLogs(ctx, r.id, opts)
	if err != nil {
		return fmt.Errorf("%w: logs: %v", ErrEngine, err)
	}
	defer rc.Close()
	_, err = stdcopy.StdCopy(orDiscard(stdout), orDiscard(stderr), rc)
	return err
}
