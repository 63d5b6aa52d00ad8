"""Network emulation: each process on its own emulated host, all hosts on one emulated switch.

Built from Linux network namespaces (``ip netns``), veth pairs, a bridge, and traffic control
(``tc``), all on this machine; needs root and iproute2. Topology::

    host ns "worker-0" (eth0 10.211.2.1/16) ──veth──┐
    host ns "server-0" (eth0 10.211.1.1/16) ──veth──┤ bridge br0 in ns "switch"
    ...                                         ──veth──┘

Shaping (the ``tc-netem(8)`` and ``tc-tbf(8)`` queueing disciplines):

* at each host's egress (``eth0``): ``netem delay D loss L rate R`` - one-way delay D between any
  two hosts (RTT 2D), loss L on every packet a host sends, and its send rate R;
* at the switch's egress toward each host: rate R (the host's receive rate), so a server's NIC
  limits what all workers send it together, as a real NIC does.

Kernels without ``sch_netem`` (some VMs) still have ``tbf``: then bandwidth is shaped with
``tbf rate R burst max(R/250 s, 3028 B) latency 50ms`` (a burst of one timer tick at HZ=250) and
delay and loss are *not* applied; :attr:`EmulatedNetwork.applied` says what was, and a warning
is recorded.

Namespaces are named ``ddlps<launcher pid>-<host>`` and deleted when the run ends, also on
failure; a later run deletes those whose launcher is no longer alive.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from ddlscope.pstrain.config import NetemConfig

PREFIX = "ddlps"
SUBNET_PREFIX_LEN = 16
TBF_LATENCY_MS = 50
TBF_MIN_BURST_BYTES = 3028  # two full Ethernet frames
HZ = 250


class NetworkEmulationError(RuntimeError):
    """Emulation cannot be set up (not root, no iproute2, a command failed); the message says why."""


@dataclass(frozen=True)
class Host:
    """An emulated host: its namespace, interface address, and the switch port name."""

    name: str
    namespace: str
    ip: str
    port: str


@dataclass
class EmulatedNetwork:
    """A set-up emulation; :meth:`close` removes every namespace it created.

    Attributes:
        hosts: host name (``worker-0``, ``server-1``) -> :class:`Host`.
        applied: what was applied: ``qdisc`` (netem, tbf or none), ``bandwidth_mbit``,
            ``delay_ms``, ``loss_pct`` (None where not applied), ``namespaces``.
        warnings: what was requested but could not be applied, and why.
    """

    switch: str
    hosts: dict[str, Host]
    applied: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _created: list[str] = field(default_factory=list)

    def command_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[host].namespace]

    def close(self) -> None:
        """Delete the namespaces (and with them the veth pairs and qdiscs); never raises."""
        for ns in reversed(self._created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self._created.clear()

    def __enter__(self) -> EmulatedNetwork:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _must(*argv: str) -> None:
    r = _run(*argv)
    if r.returncode != 0:
        raise NetworkEmulationError(f"`{' '.join(argv)}` failed: {r.stderr.strip() or r.stdout.strip()}")


def unavailable_reason() -> str | None:
    """Why emulation cannot run here (None when it can): needs root, ``ip`` and ``tc``."""
    if os.geteuid() != 0:
        return "network emulation needs root (network namespaces and tc)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"network emulation needs iproute2 ({', '.join(missing)} not found; e.g. apt-get install iproute2)"
    return None


def sweep_stale() -> list[str]:
    """Delete ``ddlps<pid>-*`` namespaces whose launcher process is gone; returns their names."""
    r = _run("ip", "netns", "list")
    removed = []
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(rf"{PREFIX}(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _run("ip", "netns", "del", name)
            removed.append(name)
    return removed


def _netem_args(cfg: NetemConfig, with_delay: bool) -> list[str]:
    args: list[str] = []
    if with_delay and cfg.delay_ms is not None:
        args += ["delay", f"{cfg.delay_ms}ms"]
    if with_delay and cfg.loss_pct is not None:
        args += ["loss", f"{cfg.loss_pct}%"]
    if cfg.bandwidth_mbit is not None:
        args += ["rate", f"{cfg.bandwidth_mbit}mbit"]
    return args


def _tbf_args(rate_mbit: float) -> list[str]:
    burst = max(int(rate_mbit * 1e6 / 8 / HZ), TBF_MIN_BURST_BYTES)
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS}ms"]


def create(host_names: list[str], cfg: NetemConfig) -> EmulatedNetwork:
    """Create the namespaces, links and shaping for ``host_names`` (``worker-N`` / ``server-N``).

    Raises:
        NetworkEmulationError: emulation unavailable, or a command failed (everything created so
            far is removed first).
    """
    if reason := unavailable_reason():
        raise NetworkEmulationError(reason)
    sweep_stale()
    base = f"{PREFIX}{os.getpid()}"
    hosts: dict[str, Host] = {}
    counters = {"server": 0, "worker": 0}
    for name in host_names:
        role, _, idx = name.partition("-")
        if role not in counters:
            raise NetworkEmulationError(f"host {name!r}: expected worker-N or server-N")
        counters[role] += 1
        third = 1 if role == "server" else 2
        short = f"{role[0]}{idx}"
        hosts[name] = Host(name, f"{base}-{short}", f"10.211.{third}.{int(idx) + 1}", short)
    net = EmulatedNetwork(switch=f"{base}-sw", hosts=hosts)
    try:
        _must("ip", "netns", "add", net.switch)
        net._created.append(net.switch)
        _must("ip", "-n", net.switch, "link", "add", "br0", "type", "bridge")
        _must("ip", "-n", net.switch, "link", "set", "br0", "up")
        for h in hosts.values():
            _must("ip", "netns", "add", h.namespace)
            net._created.append(h.namespace)
            _must("ip", "link", "add", "eth0", "netns", h.namespace, "type", "veth", "peer", "name", h.port,
                  "netns", net.switch)
            _must("ip", "-n", h.namespace, "addr", "add", f"{h.ip}/{SUBNET_PREFIX_LEN}", "dev", "eth0")
            _must("ip", "-n", h.namespace, "link", "set", "eth0", "up")
            _must("ip", "-n", h.namespace, "link", "set", "lo", "up")
            _must("ip", "-n", net.switch, "link", "set", h.port, "master", "br0")
            _must("ip", "-n", net.switch, "link", "set", h.port, "up")
        _shape(net, cfg)
    except BaseException:
        net.close()
        raise
    net.applied["namespaces"] = len(net._created)
    return net


def _shape(net: EmulatedNetwork, cfg: NetemConfig) -> None:
    net.applied.update(qdisc="none", bandwidth_mbit=None, delay_ms=None, loss_pct=None)
    if not cfg.shaping:
        return
    first = next(iter(net.hosts.values()))
    probe = _run("tc", "-n", first.namespace, "qdisc", "add", "dev", "eth0", "root", "netem",
                 *_netem_args(cfg, with_delay=True))
    netem_ok = probe.returncode == 0
    if netem_ok:
        _run("tc", "-n", first.namespace, "qdisc", "del", "dev", "eth0", "root")
    elif "unknown" not in (probe.stderr or "").lower():
        raise NetworkEmulationError(f"tc netem failed: {probe.stderr.strip()}")
    for h in net.hosts.values():
        if netem_ok:
            _must("tc", "-n", h.namespace, "qdisc", "add", "dev", "eth0", "root", "netem",
                  *_netem_args(cfg, with_delay=True))
            if cfg.bandwidth_mbit is not None:
                _must("tc", "-n", net.switch, "qdisc", "add", "dev", h.port, "root", "netem",
                      *_netem_args(cfg, with_delay=False))
        elif cfg.bandwidth_mbit is not None:
            _must("tc", "-n", h.namespace, "qdisc", "add", "dev", "eth0", "root", *_tbf_args(cfg.bandwidth_mbit))
            _must("tc", "-n", net.switch, "qdisc", "add", "dev", h.port, "root", *_tbf_args(cfg.bandwidth_mbit))
    if netem_ok:
        net.applied.update(qdisc="netem", bandwidth_mbit=cfg.bandwidth_mbit, delay_ms=cfg.delay_ms,
                           loss_pct=cfg.loss_pct)
        return
    net.applied.update(qdisc="tbf" if cfg.bandwidth_mbit is not None else "none", bandwidth_mbit=cfg.bandwidth_mbit)
    skipped = [f"{k}={v}" for k, v in (("delay_ms", cfg.delay_ms), ("loss_pct", cfg.loss_pct)) if v is not None]
    if skipped:
        net.warnings.append(
            f"this kernel has no netem qdisc (`tc qdisc add ... netem`: {probe.stderr.strip()}); "
            f"not applied: {', '.join(skipped)}"
            + ("; bandwidth shaped with tbf instead" if cfg.bandwidth_mbit is not None else "")
        )
