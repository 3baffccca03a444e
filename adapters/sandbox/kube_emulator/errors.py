"""Kubernetes ``Status`` errors, shaped like the real apiserver's.

Every failure the emulator reports is an :class:`ApiError` carrying the exact ``Status`` body a kube-apiserver
would send (``kind: Status, apiVersion: v1, status: Failure, message, reason, details, code``). Client libraries
branch on ``reason`` and ``code`` and people grep ``message``, so the message formats below are copied from the
apiserver's ``k8s.io/apimachinery/pkg/api/errors`` constructors rather than invented.
"""

from __future__ import annotations

import re
from typing import Any


class ApiError(Exception):
    """An error that the HTTP layer turns into a ``Status`` response with ``code``."""

    def __init__(
        self,
        *,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # (a real server omits an empty reason: an error it has no StatusReason for)
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


class NotServed(Exception):
    """A request for an API the server does not serve: an unknown group or version, an unknown resource of a group,
    a resource asked for in the wrong scope, a path no route matches. What the real apiserver answers depends on
    who owns the path (measured on kube-apiserver v1.28):

    - a **built-in group** (the core group, ``apps``, ``apiextensions.k8s.io``…) answers from its own routes: a
      ``Status`` NotFound that names no object (``details: {}``), "the server could not find the requested
      resource";
    - **any other group** — one served by CRDs, or by nobody — falls through to the last handler (Go's
      ``http.NotFound``): ``404``, ``Content-Type: text/plain; charset=utf-8``, ``404 page not found``, no
      ``Status`` at all. A CRD that is not installed is answered this way.

    A served resource whose object is missing is a ``Status`` NotFound that names it (:func:`not_found`). The HTTP
    layer picks the shape from ``builtin_group``."""

    def __init__(self, *, builtin_group: bool) -> None:
        super().__init__("404 page not found")
        self.builtin_group = builtin_group


def not_served_in_builtin_group() -> ApiError:
    return ApiError(code=404, reason="NotFound", message="the server could not find the requested resource",
                    details={})


NOT_SERVED_BODY = "404 page not found\n"


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(*, resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        code=404,
        reason="NotFound",
        message=f'{_qualified(resource, group)} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(*, resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        code=409,
        reason="AlreadyExists",
        message=f'{_qualified(resource, group)} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource},
    )


def conflict(*, resource: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        code=409,
        reason="Conflict",
        message=f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        details={"name": name, "group": group, "kind": resource},
    )


def invalid(*, kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid. ``causes`` are ``(field, type, detail)``; ``type`` is e.g. ``FieldValueRequired``.

    The message joins the causes the way ``field.ErrorList.ToAggregate()`` does: one cause is inline, several
    are wrapped in brackets.
    """
    texts = [detail if not field else f"{field}: {detail}" for field, _, detail in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        code=422,
        reason="Invalid",
        message=f'{_qualified(kind, group)} "{name}" is invalid: {joined}',
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": t, "message": d, "field": f} for f, t, d in causes],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(code=400, reason="BadRequest", message=message)


def forbidden(*, resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        code=403,
        reason="Forbidden",
        message=f'{_qualified(resource, group)} "{name}" is forbidden: {why}',
        details={"name": name, "group": group, "kind": resource},
    )


def gone(message: str) -> ApiError:
    return ApiError(code=410, reason="Expired", message=message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(code=405, reason="MethodNotAllowed", message=message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        code=415,
        reason="UnsupportedMediaType",
        message=(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(accepted)}"
        ),
    )


def _go_quoted(text: str) -> str:
    """``text`` as Go's ``%q`` prints a printable string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _strconv_error(function: str, text: str, *, form: str) -> str:
    """Go's error for ``text`` refused by ``strconv.<function>``: out of range when it has the number's ``form``."""
    problem = "value out of range" if re.fullmatch(form, text) else "invalid syntax"
    return f"strconv.{function}: parsing {_go_quoted(text)}: {problem}"


def limit_not_an_integer(text: str) -> ApiError:
    """A ``limit`` that ``strconv.ParseInt`` refuses: 400, with its error as the message."""
    return bad_request(_strconv_error("ParseInt", text, form=r"[+-]?[0-9]+"))


def resource_version_not_a_number(text: str) -> ApiError:
    """A list's or watch's ``resourceVersion`` that ``strconv.ParseUint`` refuses: a real server answers 500, with no
    reason (measured on kube-apiserver 1.28)."""
    message = f"resourceVersion: Invalid value: {_go_quoted(text)}: {_strconv_error('ParseUint', text, form='[0-9]+')}"
    return ApiError(code=500, reason="", message=message)


def internal(message: str) -> ApiError:
    return ApiError(code=500, reason="InternalError", message=f"Internal error occurred: {message}")
