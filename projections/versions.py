"""Which of two observations of one object is newer: the resourceVersion rule every projection folds by.

A write's answer and the watch's events about the same object reach the log in either order (the executor and the
watch race), so an observation may be older than the one already folded; folding it would bring back a state the
object has left. Shared by the control plane's world (``projections.fold``) and the member clusters'
(``projections.member_fold``).
"""

from __future__ import annotations


def stale(new: str, old: str) -> bool:
    """Whether an observation at resourceVersion ``new`` tells nothing new over the one held at ``old``.

    The same resourceVersion is the same object (the watch echo of a write whose response was already folded,
    or a relist of an unchanged object): nothing to parse, nothing touched. resourceVersions are opaque by
    contract but are etcd revisions (integers) on every real apiserver; when both are integers an older
    observation (a watch event overtaken by a write's response) is ignored too.
    """
    if new == old:
        return True
    if new.isdigit() and old.isdigit() and new.isascii() and old.isascii():  # ('²'.isdigit() is True)
        if new[0] == "0" or old[0] == "0":  # never from etcd; compared as numbers all the same
            new, old = new.lstrip("0"), old.lstrip("0")
        return len(new) < len(old) or (len(new) == len(old) and new < old)  # as numbers, without parsing (int()
        # of a hostile resourceVersion of thousands of digits would raise)
    return False


__all__ = ["stale"]
