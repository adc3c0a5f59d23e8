"""A node group's `network:`: the interface its processes use for collectives and Ray.

One interface name (`fab0`), names to try in order (`[ib0, fab0]`: nodes of one partition can differ),
or an IPv4 subnet (`10.99.0.0/16`: the interface whose address is in it, whatever its name). The node
resolves it at run time (hpcplace.runtime.network, which also owns the checks here, so the login
node and the job agree on what a valid value is).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcplace.config.yaml_source import View
from hpcplace.errors import SourceLocation, SpecError
from hpcplace.runtime.network import interface_name_problem, parse_subnet

NETWORK_HINT = "write an interface name (network: fab0), names to try in order (network: [ib0, fab0]) or an IPv4 subnet (network: 10.99.0.0/16)"


@dataclass(frozen=True)
class Network:
    """Interfaces to try in order, or a subnet (exactly one of the two)."""

    interfaces: tuple[str, ...] = ()
    subnet: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"subnet": self.subnet} if self.subnet else {"interfaces": list(self.interfaces)}

    def describe(self) -> str:
        return f"subnet {self.subnet}" if self.subnet else ", ".join(self.interfaces)


def check_network(network: Network, location: SourceLocation | None, where: str) -> None:
    """The backstop every input format passes through (NodeGroup): a located error for a bad value."""
    if bool(network.subnet) == bool(network.interfaces):
        raise SpecError(f"{where}: network needs interfaces or a subnet, not both or neither", location=location)
    if network.subnet is not None:
        subnet = parse_subnet(network.subnet)
        if isinstance(subnet, str):
            raise SpecError(f"{where}: network: {subnet}", location=location, hint=NETWORK_HINT)
    seen: set[str] = set()
    for name in network.interfaces:
        problem = interface_name_problem(name)
        if problem:
            raise SpecError(f"{where}: network: {name!r}: {problem}", location=location, hint=NETWORK_HINT)
        if name in seen:
            raise SpecError(f"{where}: network lists {name!r} twice", location=location, hint=NETWORK_HINT)
        seen.add(name)


def parse_network(view: View) -> Network:
    """`network:` as written: a name, a subnet (has a '/'), or a list of names; errors point at the value."""
    value = view.value
    if isinstance(value, str) and "${" in value:
        return parse_network(view.deref())
    if isinstance(value, list):
        if not value:
            raise view.error("the list is empty", hint=NETWORK_HINT)
        names: list[str] = []
        for child in view.elements():
            name = _one(child)
            if "/" in name:
                raise child.error(
                    f"{name!r} is a subnet inside a list; a list holds interface names", hint=NETWORK_HINT
                )
            if name in names:
                raise child.error(f"{name!r} is listed twice", hint=NETWORK_HINT)
            names.append(name)
        return Network(interfaces=tuple(names))
    text = _one(view)
    if "/" in text:  # no interface name holds a '/'
        subnet = parse_subnet(text)
        if isinstance(subnet, str):
            raise view.error(subnet, hint=NETWORK_HINT)
        return Network(subnet=text)
    return Network(interfaces=(text,))


def _one(view: View) -> str:
    """One scalar of `network:`: a string (a name may be all digits in YAML: `0` is not one)."""
    if isinstance(view.value, bool) or not isinstance(view.value, str):
        raise view.error(f"expected an interface name or a subnet, got {view.value!r}", hint=NETWORK_HINT)
    text = view.str()
    if "/" not in text:
        problem = interface_name_problem(text)
        if problem:
            raise view.error(f"{text!r}: {problem}", hint=NETWORK_HINT)
    return text


def network_from_json(data: object) -> Network | None:
    """plan.json's node group "network" record back into a Network (absent: none)."""
    if not isinstance(data, dict):
        return None
    if data.get("subnet"):
        return Network(subnet=str(data["subnet"]))
    return Network(interfaces=tuple(str(n) for n in data.get("interfaces") or ()))
