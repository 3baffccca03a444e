"""Printing the chains of :mod:`.why`: the chain in one line first, then each link with its decisions.

A decision is three lines — the record with its time, ``cause`` (the event that led to it) and ``reason`` (the
decider's or the webhook's words) — so the answer to "why" is on the screen without a second command; the full
trail of any link is one ``--explain`` away, and the printout says which.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from tether.core.envelope import rfc3339

from .why import Chain, DataLink, Decisions, Step

LABEL = 16  # the width of a link's labels


def chain_line(chain: Chain, data: DataLink | None, binding: str | None) -> str:
    """``workload ← binding ← claim ← DataSource ← location ← prefix → clusters`` for one binding and claim."""
    parts = [chain.subject] if chain.workload else []
    if chain.workload:
        parts.append(binding or "(no ResourceBinding binds it)")
    if data is None:
        parts.append("(no DataSourceClaim names it: tether leaves its placement alone)")
        return " ← ".join(parts)
    if data.claim:
        parts.append(data.claim)
    parts.append(data.source or f"(no DataSource for {data.identity or 'its data'})")
    if not data.location:
        parts.append(f"(no location: {data.location_state})")
    elif data.prefix:
        parts += [data.location, f"{data.prefix} → {', '.join(data.mapped) or '-'}"]
    else:
        parts += [data.location, f"({data.mapping_state or 'no mapping'})"]
    return " ← ".join(parts)


def _step(out: Console, label: str, step: Step) -> None:
    out.print(Text(f"  {label:<{LABEL}}", style="bold") + Text(rfc3339(step.at_ms) + "  ", style="dim")
              + Text(step.what))
    out.print(Text(f"  {'':<{LABEL}}  cause  ", style="dim") + Text(step.cause))
    if step.reason:
        out.print(Text(f"  {'':<{LABEL}}  reason ", style="dim") + Text(step.reason, style="italic"))


def _decisions(out: Console, label: str, decisions: Decisions, *, none: str = "") -> None:
    if not decisions.steps:
        if none:
            out.print(Text(f"  {label:<{LABEL}}", style="bold") + Text(none, style="dim"))
        return
    for i, step in enumerate(decisions.steps):
        _step(out, label if i == 0 else "", step)
    if decisions.earlier:
        out.print(Text(f"  {'':<{LABEL}}  ({decisions.earlier} earlier not shown)", style="dim"))


def _fact(out: Console, label: str, text: str) -> None:
    out.print(Text(f"  {label:<{LABEL}}", style="bold") + Text(text))


def _data(out: Console, link: DataLink) -> None:
    if link.claim:
        out.print(Text(link.claim, style="bold underline"))
        _fact(out, "state", link.claim_state)
        _decisions(out, "status", link.claim_status)
    out.print(Text(link.source or f"DataSource (none) for {link.identity}", style="bold underline"))
    _fact(out, "state", link.source_state)
    _decisions(out, "decided", link.source_decisions)
    out.print(Text(f"location {link.location or '(unknown)'}", style="bold underline"))
    _fact(out, "data", link.identity or "-")
    _fact(out, "state", link.location_state)
    _decisions(out, "catalog", link.catalog, none="no answer recorded")
    out.print(Text("mapping " + (f"{link.prefix} → {', '.join(link.mapped) or '-'}" if link.prefix else "(none)"),
                   style="bold underline"))
    _fact(out, "state", link.mapping_state or "-")
    _decisions(out, "ConfigMap", link.mapping, none="the plugin ConfigMap was never observed")


def print_chain(chain: Chain, out: Console, *, as_of: str) -> None:
    verb = "is where it is" if chain.workload else "points where it does"
    out.print(Text(f"Why {chain.subject} {verb} ({as_of})", style="bold underline"))
    if chain.workload:
        out.print(Text(f"  workload {chain.workload}", style="dim"))
    pairs = [(d, b.key) for b in chain.bindings or [None] for d in chain.data or [None]  # type: ignore[list-item]
             ] if chain.workload else [(d, None) for d in chain.data]
    for data, binding in pairs:
        out.print(Text("  " + chain_line(chain, data, binding)))
    for b in chain.bindings:
        where = f"scheduled now on {', '.join(b.scheduled)}" if b.scheduled else "not scheduled yet"
        where += f", in {b.tier}" if b.tier.startswith("tier ") else f" ({b.tier})" if b.tier else ""
        out.print(Text(f"  {where}" + (f" ({b.key})" if len(chain.bindings) > 1 else ""), style="bold green"))
    for b in chain.bindings:
        out.print(Text(b.key, style="bold underline"))
        if b.deleted:
            _fact(out, "state", "deleted")
        _fact(out, "scheduled now", (", ".join(b.scheduled) or "nowhere (spec.clusters is empty)")
              + " — spec.clusters of its latest observation")
        if b.observed is not None:
            _step(out, "observed", b.observed)
        if b.tier:
            _fact(out, "locality tier", b.tier)
        else:
            _fact(out, "tether excludes", ", ".join(b.excluded) or "nothing")
        webhook = any("BindingAdmissionDecided" in step.what for step in b.admission.steps)
        _decisions(out, "placement", b.placement, none="no SetBindingPlacement: the binding webhook's answers "
                   "(admission, below) carry tether's exclusions" if webhook else "tether never wrote its placement")
        _fact(out, "admission", b.admission_state)
        _decisions(out, "", b.admission, none="no webhook or queue-admission decision recorded")
    for link in chain.data:
        _data(out, link)
    if chain.claims_of_source:
        shown = chain.claims_of_source[:10]
        more = len(chain.claims_of_source) - len(shown)
        _fact(out, "used by", ", ".join(shown) + (f" and {more} more" if more else ""))
    if chain.workload:
        out.print(Text("pods in the members", style="bold underline"))
        if not chain.pods:
            _fact(out, "", "none of this workload's pods is in a member tether watches")
        for pod in chain.pods:
            out.print(Text(f"  {pod.key}", style="bold") + Text(f"  {pod.state}"))
            _decisions(out, "", pod.decisions, none="no pod-webhook or placement decision recorded")
        if chain.pods_not_shown:
            _fact(out, "", f"and {chain.pods_not_shown} more pod(s)")
    keys = [b.key for b in chain.bindings] + [d.claim for d in chain.data if d.claim]
    if keys:
        out.print(Text(f"the full trail of each: --explain {' | '.join(keys)}", style="dim"))
