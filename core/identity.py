"""What a claim asks for: the identity of a data source, and the DataSource name derived from it.

A claim names its data by ``(system, type, name, attributes)``; two claims with equal identities share one
DataSource and therefore one catalog lookup. The DataSource name is Volcano Global's, so that a cluster moved
from VG to tether keeps its cache: ``<system>-<type>-<name>``, plus ``-`` and the first 8 hex characters of the
sha256 of the sorted ``k=v`` attributes joined by ``,`` when there are attributes.

VG's name is not always a valid object name: table names such as ``prod.db.User_Events`` contain upper case
and underscores, which the API server rejects, so VG cannot serve such a claim at all. tether keeps VG's name
whenever it is valid (the common case, and the compatible one) and otherwise derives a valid one: lower case,
every other character replaced by ``-``, runs collapsed, and the 8-hex digest of the *exact* identity
appended, so that ``User_Events`` and ``user-events`` never collide. The rule is documented in the README.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import NewType

import msgspec

from .lazy import lazy

DataSourceName = NewType("DataSourceName", str)

#: A DNS-1123 subdomain, the rule for most object names (DataSource included).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INVALID_RUN = re.compile(r"[^a-z0-9.]+")
_MAX_NAME = 253


class DataIdentity(msgspec.Struct, frozen=True, order=True, dict=True):
    """The identity of a data source. ``attributes`` are kept as sorted pairs so the struct is hashable."""

    # dict=True: the key is memoised on the instance (every index of the projections is keyed by it); the memo
    # is not a field, so it is neither encoded nor compared

    system: str
    type: str
    name: str
    attributes: tuple[tuple[str, str], ...] = ()

    @lazy
    def key(self) -> str:
        """A stable printable key (the log key of lookups and the timer ids)."""
        if self.attributes:
            return f"{self.system}/{self.type}/{self.name}?" + ",".join(f"{k}={v}" for k, v in self.attributes)
        return f"{self.system}/{self.type}/{self.name}"


def make_identity(system: str, type_: str, name: str, attributes: dict[str, str] | None) -> DataIdentity:
    return DataIdentity(
        system=system, type=type_, name=name, attributes=tuple(sorted((attributes or {}).items()))
    )


def is_valid_object_name(name: str) -> bool:
    return 0 < len(name) <= _MAX_NAME and _DNS1123_SUBDOMAIN.match(name) is not None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def volcano_global_name(identity: DataIdentity) -> str:
    """The DataSource name Volcano Global computes (possibly not a valid object name)."""
    base = f"{identity.system}-{identity.type}-{identity.name}"
    if identity.attributes:
        base += "-" + _digest(",".join(f"{k}={v}" for k, v in identity.attributes))
    return base


def data_source_name(identity: DataIdentity) -> DataSourceName:
    """The name of the DataSource caching ``identity``: VG's when valid, else a sanitised one (module doc)."""
    try:
        return _cached_name(identity)
    except TypeError:  # unhashable (a malformed identity built by hand): compute it, uncached
        return _data_source_name(identity)


def _data_source_name(identity: DataIdentity) -> DataSourceName:
    vg = volcano_global_name(identity)
    if is_valid_object_name(vg):
        return DataSourceName(vg)
    suffix = "-" + _digest(identity.key)
    stem = _INVALID_RUN.sub("-", vg.lower())
    stem = re.sub(r"[-.]{2,}", "-", stem).strip("-.")[: _MAX_NAME - len(suffix)].rstrip("-.")
    return DataSourceName((stem or "ds") + suffix)


#: The decider derives the name of every identity it resolves, in every decision (a regex match, and a sha256 for
#: attributes). A name is a pure function of the identity, an immutable value, so a cached name cannot go stale;
#: bounded, as identities come and go over a daemon's life.
_cached_name = functools.lru_cache(maxsize=4096)(_data_source_name)


def _clean(value: str) -> bool:
    return bool(value) and value == value.strip() and "\n" not in value and "\r" not in value and "\t" not in value


def identity_problem(identity: DataIdentity) -> str | None:
    """Why an identity cannot be served at all, or None. (Whether the system is known is decided elsewhere.)"""
    if _clean(identity.system) and _clean(identity.type) and _clean(identity.name):
        return None  # the common case, without building a message
    for field in ("system", "type", "name"):
        value = getattr(identity, field)
        if not value or not value.strip():
            return f"spec.{'dataSourceType' if field == 'type' else 'dataSourceName' if field == 'name' else field}"\
                f" must not be empty"
        if value != value.strip() or any(c in value for c in "\n\r\t"):
            return f"{field} {value!r} contains whitespace"
    return None
